#!/usr/bin/env bash
# Installs what running sless needs from Debian's packages, and nothing
# else: bubblewrap (the handler sandbox), passt (its pasta is the user-mode
# network of each instance's network namespace), nftables (the rules that
# keep instances off the host and private ranges), iproute2 (ip netns),
# Python 3.11 (the python3.11 runtime) and pip (installs a Python
# function's requirements.txt at build time). Node.js 20 and npm, for nodejs20 functions, are not in Debian 12's
# own packages: install them yourself (or point SLESS_NODE/SLESS_NPM at
# them). Idempotent; ./scripts/run.sh calls it on every start.
set -euo pipefail

need_apt=()
for pkg in bubblewrap passt nftables iproute2 python3.11 python3-pip; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  echo "setup: installing ${need_apt[*]} (to run sless)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
