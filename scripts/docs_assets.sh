#!/usr/bin/env bash
# Fetches the one third-party asset the documentation site needs to search from disk: the
# iframe-worker shim (MIT, by the author of mkdocs-material), which lets the search worker run on
# file:// pages. Taken from the npm registry at a pinned version, like any other dependency, into
# docs/assets/vendor/ (git-ignored); never committed. Without it the site still reads from disk,
# and search works when the site is served (python -m http.server -d site).
set -u
cd "$(dirname "$0")/.."
dest=docs/assets/vendor
[ -f "$dest/iframe-worker-shim.js" ] && exit 0
command -v npm >/dev/null 2>&1 || { echo "docs: npm not found; search will need a server"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if (cd "$tmp" && timeout 120 npm pack --silent iframe-worker@1.0.4 >/dev/null 2>&1) \
    && tar -xzf "$tmp"/iframe-worker-1.0.4.tgz -C "$tmp" package/shim/index.js package/LICENSE; then
  mkdir -p "$dest"
  cp "$tmp/package/shim/index.js" "$dest/iframe-worker-shim.js"
  cp "$tmp/package/LICENSE" "$dest/iframe-worker-LICENSE"
else
  echo "docs: could not fetch iframe-worker from the npm registry; search will need a server"
fi
exit 0
