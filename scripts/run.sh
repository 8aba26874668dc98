#!/usr/bin/env bash
# Runs sless, the embedded default: SQLite and code archives under ./sless-data,
# listening on 127.0.0.1:8080. Any `sless server` flag may follow. Installs
# only what running needs (./scripts/setup-run.sh); the binary is built into
# $CARGO_TARGET_DIR/release (./target/release by default).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-run.sh
exec cargo run --release --locked -p sless -- server "$@"
