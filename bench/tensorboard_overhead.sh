#!/bin/bash
# samples/s with the TensorBoard mirror on vs off, alternating, local mlp on MNIST.
# bench/tensorboard_overhead.sh [BUILD_DIR]; needs STRATA_DATA_DIR. Prints one line
# per run; compare the per-rep ratios (on / off).
set -euo pipefail
build="$(cd "${1:-build}" && pwd)"
data="$(cd "${STRATA_DATA_DIR:?set STRATA_DATA_DIR}" && pwd)"
tmp="$(mktemp -d /tmp/strata_tb_overhead_XXXXXX)"; trap 'rm -rf "$tmp"' EXIT
cd "$tmp"; export OPENBLAS_NUM_THREADS=1
for i in 1 2 3 4 5; do
  for tb in true false; do
    "$build/src/cli/strata" train --set data.dataset=mnist --set "data.dir=$data/mnist" --set cluster.mode=local --set train.iterations=1500 --set train.log_every=10 --set train.eval_every=1000000 --set train.threads=2 --set metrics.tensorboard=$tb --set run.name=tb$tb$i --set run.log_level=warning > /dev/null 2>&1
    /usr/bin/python3 -c "import json; print('$tb', json.load(open('runs/tb$tb$i/summary.json'))['samples_per_s'])"
    rm -rf runs/tb$tb$i
  done
done
