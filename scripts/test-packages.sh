#!/usr/bin/env bash
# The packages the fidelity tests' handlers install (pip and npm), fetched
# once from PyPI and the npm registry into a local directory (default
# ~/.cache/sless-test-packages, or $SLESS_TEST_PACKAGES). The tests serve it
# on loopback (crates/sless/tests/api/package_registry.py) as the index and
# registry of the server's builds, so a build under test never reaches the
# internet. Idempotent; ./scripts/setup.sh calls it.
set -euo pipefail
dir="${SLESS_TEST_PACKAGES:-$HOME/.cache/sless-test-packages}"
# Keep in step with REQUIREMENTS and PACKAGE_JSON in crates/sless/tests/api/fidelity.rs.
pip_wanted=(numpy==2.2.6 Jinja2==3.1.6 requests==2.32.3)
npm_wanted=(lodash@4.17.21 handlebars@4.7.8 semver@7.6.3)
stamp="$(echo "${pip_wanted[*]} | ${npm_wanted[*]}" | sha256sum | cut -c1-16)"
[ -f "$dir/.complete-$stamp" ] && exit 0
echo "setup: fetching the fidelity tests' packages into $dir (their builds get them on loopback)"
rm -rf "$dir"
mkdir -p "$dir/pypi" "$dir/npm"
python3.11 -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
  --dest "$dir/pypi" "${pip_wanted[@]}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm install --silent --no-audit --no-fund --no-package-lock --omit=dev "${npm_wanted[@]}" >/dev/null)
# Every package npm installed, dependencies included, as the registry's tarball.
mapfile -t installed < <(node -e '
const fs = require("fs"), path = require("path");
const found = new Set();
function walk(dir) {
  if (!fs.existsSync(dir)) return;
  for (const entry of fs.readdirSync(dir)) {
    if (entry.startsWith(".")) continue;
    const at = path.join(dir, entry);
    if (entry.startsWith("@")) { walk(at); continue; }
    const manifest = path.join(at, "package.json");
    if (fs.existsSync(manifest)) {
      const p = JSON.parse(fs.readFileSync(manifest));
      found.add(p.name + "@" + p.version);
    }
    walk(path.join(at, "node_modules"));
  }
}
walk(process.argv[1]);
console.log([...found].join("\n"));
' "$work/node_modules")
(cd "$dir/npm" && npm pack --silent "${installed[@]}" >/dev/null)
touch "$dir/.complete-$stamp"
