#!/usr/bin/env bash
# One command for every figure of the local driver's targets, measured side by
# side in one run: warm throughput and latency through the sless gateway vs.
# the same handler behind a plain server of its language (direct, and behind
# nginx), cold start p50/p99 per runtime, and deploy time.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
for pkg in wrk nginx-light; do
  dpkg -s "$pkg" >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null; }
done
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sless-target}"
cargo build --release --locked -p sless
python3 bench/bench.py --sless "$CARGO_TARGET_DIR/release/sless" "$@"
# Leader takeover after kill -9 (two replicas on the PostgreSQL on 127.0.0.1:5432).
python3 bench/takeover.py --sless "$CARGO_TARGET_DIR/release/sless"
# One handler uploaded to 1000 functions, 8 uploads at a time: all must end Ready.
python3 bench/same_code.py --sless "$CARGO_TARGET_DIR/release/sless" --functions 1000
# The invocation-record pipeline into the PostgreSQL on 127.0.0.1:5432, and into SQLite.
cargo run --release --locked -q -p sless-server --example log_pipeline -- postgres://root@127.0.0.1:5432/test 200000
pipeline_db="$(mktemp -d)"
cargo run --release --locked -q -p sless-server --example log_pipeline -- "sqlite://$pipeline_db/bench.db" 200000
rm -rf "$pipeline_db"
