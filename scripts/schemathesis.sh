#!/usr/bin/env bash
# schemathesis (installed by scripts/setup.sh --services) against the OpenAPI
# document a fresh server serves: a bounded number of examples per operation,
# every check (exceptions and why in scripts/schemathesis.toml). The public
# gateway /fn is left out: it serves deployed handlers, not the API.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${CARGO_TARGET_DIR:-target}/debug/sless"
data="$(mktemp -d)"
token="schemathesis-admin-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
SLESS_LISTEN="127.0.0.1:0" SLESS_DATA_DIR="$data" SLESS_ADMIN_TOKEN="$token" SLESS_LOG=warn \
  "$bin" server >"$data/server.out" 2>"$data/server.log" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$data"' EXIT
url=""
for _ in $(seq 1 300); do
  url="$(sed -n 's/^sless: listening on //p' "$data/server.out")"
  [[ -n "$url" ]] && break
  kill -0 "$server" 2>/dev/null || { cat "$data/server.log"; echo "schemathesis: the server did not start" >&2; exit 1; }
  sleep 0.2
done
[[ -n "$url" ]] || { cat "$data/server.log"; echo "schemathesis: the server did not listen within 60 s" >&2; exit 1; }
python3 -m schemathesis.cli --config-file scripts/schemathesis.toml run "$url/v1/openapi.json" --wait-for-schema 30 \
  -H "Authorization: Bearer $token" --exclude-path-regex '^/fn/' \
  --max-examples "${SLESS_SCHEMATHESIS_EXAMPLES:-20}" --seed "${SLESS_SCHEMATHESIS_SEED:-1}" --request-timeout 20
