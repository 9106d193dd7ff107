#!/usr/bin/env bash
# Runs every benchmark in bench/ and prints its figures.
set -euo pipefail
build="${1:-build}"
for b in "$build"/bench/*_bench; do
  [ -x "$b" ] || continue
  echo "== $(basename "$b")"
  "$b"
done
# strata allreduce vs PyTorch DDP; skips itself without /usr/bin/python3's
# torch or STRATA_DATA_DIR.
echo "== ddp_bench"
"$(dirname "$0")/ddp_bench.sh" "$build"
# TorchScript modules vs the built-in models; skips itself without
# /usr/bin/python3's torch.
echo "== torchscript_bench"
"$(dirname "$0")/torchscript_bench.sh" "$build"
# strata.train (Python) against strata train, and the import time; skips
# itself without /usr/bin/python3's torch or the built package.
echo "== python_bench"
/usr/bin/python3 "$(dirname "$0")/python_bench.py" "$build"
# TensorBoard + Prometheus /metrics on vs off (needs STRATA_DATA_DIR).
if [ -n "${STRATA_DATA_DIR:-}" ]; then
  # The CPU defaults against the best settings, allreduce against sync PS.
  echo "== cpu_defaults"
  python3 "$(dirname "$0")/cpu_defaults.py" "$build"
  # workers.* pacing and net.* links in whole runs.
  echo "== emulation_bench"
  python3 "$(dirname "$0")/emulation_bench.py" "$build"
  # cluster.timeline off vs on, alternating pairs.
  echo "== timeline_bench"
  python3 "$(dirname "$0")/timeline_bench.py" "$build"
  # strata scale 2 -> 4 -> 3 while training; scaled against fixed accuracy.
  echo "== elastic_bench"
  python3 "$(dirname "$0")/elastic_bench.py" "$build"
  echo "== metrics_overhead"
  "$(dirname "$0")/metrics_overhead.sh" "$build"
  # cluster.compression none / fp16 / int8, one rep (docs/design/compression.md
  # quotes 5: bench/compression.sh build 5).
  echo "== compression"
  "$(dirname "$0")/compression.sh" "$build" 1
fi
