#!/usr/bin/env bash
# Runs sless, the embedded default: SQLite and code archives under ./sless-data,
# listening on 127.0.0.1:8080. Any `sless server` flag may follow.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec cargo run --release --locked -p sless -- server "$@"
