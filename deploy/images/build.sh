#!/usr/bin/env bash
# Builds and pushes the images of the cluster shape:
#   {REPO}/sless-python3.11:{TAG}, {REPO}/sless-nodejs20:{TAG} (runtimes)
#   {REPO}/sless-server:{TAG}
# where TAG is `{sless version}-{shim digest}` (what `sless version --shim`
# would print: the workspace version and the first 12 hex digits of the
# sha256 of the two shims, the same digest the local driver fingerprints
# artifacts with). Never `latest`: a pod's image names exactly the shims
# its artifacts were built with.
#
# Usage: deploy/images/build.sh REPO [--push]
#   REPO    registry path, e.g. registry.example.com/sless
#   --push  push after building (default: build only)
# Needs docker (or DOCKER=podman) and cargo. Not run in CI (no container
# engine there); checked with `bash -n` and shellcheck by the test suite.
set -euo pipefail
cd "$(dirname "$0")/../.."

repo="${1:?usage: deploy/images/build.sh REPO [--push]}"
push="${2:-}"
docker="${DOCKER:-docker}"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
shim_digest="$(cat runtimes/python/sless_shim.py runtimes/node/sless_shim.js | sha256sum | cut -c1-12)"
tag="${version}-${shim_digest}"

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cargo build --release --locked -p sless
cp "${CARGO_TARGET_DIR:-target}/release/sless" "$context/sless"

for image in python3.11 nodejs20 server; do
  name="${repo%/}/sless-${image}:${tag}"
  echo "build: $name"
  "$docker" build -f "deploy/images/${image}.Dockerfile" -t "$name" "$context"
  if [[ "$push" == "--push" ]]; then
    "$docker" push "$name"
  fi
done
echo "build: tag $tag (set SLESS_K8S_IMAGE_TAG=$tag)"
