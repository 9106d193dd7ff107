#!/usr/bin/env bash
# Refreshes the vendored Apache ECharts (third_party/echarts) from the npm
# registry with `npm pack` (no node_modules, no build): the minified full
# bundle, its LICENSE and NOTICE, and VERSION. The report embeds the bundle
# into the strata binary at build time (src/experiment/CMakeLists.txt).
#   scripts/update_echarts.sh          # latest release
#   scripts/update_echarts.sh 6.1.0    # a given version
set -euo pipefail
version="${1:-latest}"
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/third_party/echarts"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
tarball="$(npm pack --silent "echarts@$version")"
tar xzf "$tarball"
got="$(node -p "require('./package/package.json').version")"
license="$(node -p "require('./package/package.json').license")"
mkdir -p "$dest"
cp package/dist/echarts.min.js package/LICENSE package/NOTICE "$dest/"
echo "$got" > "$dest/VERSION"
echo "third_party/echarts: echarts $got ($license), $(wc -c < "$dest/echarts.min.js") bytes"
