#!/usr/bin/env bash
# A TorchScript module against the built-in model of the same architecture:
# single-process training samples/s (summary.json, time in training steps),
# mlp and lenet on MNIST (synthetic 1x28x28 without STRATA_DATA_DIR),
# alternating, medians of 3. The modules are scripted by Debian's
# python3-torch (tests/fixtures/make_torchscript.py); skipped without it.
#   bench/torchscript_bench.sh [BUILD_DIR] [REPS]
set -euo pipefail
build="${1:-build}"
reps="${2:-3}"
here="$(cd "$(dirname "$0")" && pwd)"
strata="$build/src/cli/strata"
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "torchscript_bench: skipped (/usr/bin/python3 has no torch: Debian's python3-torch)"
  exit 0
fi
tmp="$(mktemp -d /tmp/strata_torchscript_bench_XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$here/../tests/fixtures/make_torchscript.py" "$tmp"
data=(--set data.synthetic.shape=1x28x28 --set data.synthetic.train_size=20000)
if [ -n "${STRATA_DATA_DIR:-}" ]; then
  data=(--set data.dataset=mnist --set "data.dir=$STRATA_DATA_DIR/mnist")
fi
export OPENBLAS_NUM_THREADS=1
run() {  # name, model args... -> samples/s
  local name="$1"; shift
  "$strata" train "${data[@]}" --set cluster.mode=local --set train.iterations=600 \
    --set train.threads=2 --set train.eval_every=1000000 --set run.log_level=warning \
    --set "run.dir=$tmp/runs" --set "run.name=$name" "$@" > /dev/null 2>&1
  /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['samples_per_s'])" \
    "$tmp/runs/$name/summary.json"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf '%-8s %14s %14s %8s\n' model "built-in smp/s" "scripted smp/s" ratio
for m in mlp lenet; do
  b=(); s=(); r=()
  for i in $(seq "$reps"); do
    if [ $((i % 2)) -eq 1 ]; then
      x=$(run "b$m$i" --set model.name=$m); y=$(run "s$m$i" --set model.name=torchscript --set "model.path=$tmp/$m.pt")
    else
      y=$(run "s$m$i" --set model.name=torchscript --set "model.path=$tmp/$m.pt"); x=$(run "b$m$i" --set model.name=$m)
    fi
    b+=("$x"); s+=("$y"); r+=("$(awk -v a="$y" -v b="$x" 'BEGIN {print a / b}')")
  done
  printf '%-8s %14.0f %14.0f %8.3f\n' "$m" "$(median "${b[@]}")" "$(median "${s[@]}")" "$(median "${r[@]}")"
done
echo "ratio: median over reps of scripted / built-in of the same rep (target >= 0.95)"
