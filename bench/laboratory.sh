#!/usr/bin/env bash
# The laboratory's two accuracy and cost figures in one run, side by side:
# the emulated links against their model (link_bench) and the cluster
# timeline on against off (timeline_bench.py). docs/design/links.md and
# docs/design/timeline.md quote them.
# usage: bench/laboratory.sh [BUILD_DIR] [PAIRS]   (needs STRATA_DATA_DIR)
set -euo pipefail
build="${1:-build}"
pairs="${2:-7}"
: "${STRATA_DATA_DIR:?set STRATA_DATA_DIR to the directory holding mnist/}"
date -u +"laboratory bench, %Y-%m-%d %H:%M UTC, $(nproc) cores"
echo "== link_bench: measured transfer time / (size / rate + latency)"
"$build/bench/link_bench"
echo "== timeline_bench: cluster.timeline on / off"
python3 "$(dirname "$0")/timeline_bench.py" "$build" --pairs "$pairs"
