#!/usr/bin/env bash
# schemathesis (installed by scripts/setup.sh --services) against the OpenAPI
# document a fresh server serves: a bounded number of examples per operation,
# every check (exceptions and why in scripts/schemathesis.toml). The public
# gateway /fn is left out: it serves deployed handlers, not the API.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${CARGO_TARGET_DIR:-target}/debug/sless"
data="$(mktemp -d)"
port=$((20000 + RANDOM % 20000))
token="schemathesis-admin-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
SLESS_LISTEN="127.0.0.1:$port" SLESS_DATA_DIR="$data" SLESS_ADMIN_TOKEN="$token" SLESS_LOG=warn \
  "$bin" server >"$data/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  sleep 0.2
done
python3 -m schemathesis.cli --config-file scripts/schemathesis.toml run "http://127.0.0.1:$port/v1/openapi.json" \
  -H "Authorization: Bearer $token" --exclude-path-regex '^/fn/' \
  --max-examples "${SLESS_SCHEMATHESIS_EXAMPLES:-20}" --seed "${SLESS_SCHEMATHESIS_SEED:-1}" --request-timeout 20
