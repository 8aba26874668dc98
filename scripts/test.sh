#!/usr/bin/env bash
# The whole test suite: system packages, services, then every crate's tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --services
# Reuse a build cache outside the clone when there is one; an empty cache works too.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sless-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
cargo build --workspace --all-targets --locked
cargo nextest run --workspace --locked --no-fail-fast "$@"
