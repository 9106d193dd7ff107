#!/usr/bin/env bash
# One GPU session in one go (issue: a cluster worker as fast as the local
# trainer and a step faster than eager PyTorch): builds strata against the
# machine's CUDA LibTorch, runs the GPU tests, then prints the table of
# samples/s beside the plain PyTorch peer (bench/torch_peer.py) in the same
# run. Device time is scarce: everything is bounded, and the output is the
# raw record to commit under docs/results/raw/.
#
#   STRATA_DEVKIT=devkit.tar.xz bench/gpu_session.sh DATA_DIR [BUILD_DIR]
#
# DATA_DIR holds mnist/. STRATA_DEVKIT: the Debian packages' files
# (scripts/gpu_devkit.sh makes it on Debian 12; docs/guide/gpu.md), where
# the machine lacks them. STEPS (400) steps a run (MULTI_STEPS, 200, with 2
# and 4 workers); steady rates from step 50
# (bench/steady_rate.py: a cluster's steady figure is worker 0's, so an
# n-worker run's total is about n times it). A dry run of the table without a build or a GPU:
# STRATA=build/src/cli/strata DEVICE=cpu STEPS=60 (python3 with torch).
# A device call lasts at most 10 minutes: PART=build (the build and the GPU
# tests; the loader path it needs is kept in BUILD_DIR/strata-env.sh) and then
# PART=table split the session in two calls; MODELS (resnet20 lenet)
# narrows the table.
set -uo pipefail
DATA=${1:?usage: bench/gpu_session.sh DATA_DIR [BUILD_DIR]}
BUILD=${2:-build-cuda}
HERE=$(cd "$(dirname "$0")" && pwd)
STEPS=${STEPS:-400}
PART=${PART:-all}
# Runs of 2 and 4 workers take fewer steps (each worker makes them).
MULTI_STEPS=${MULTI_STEPS:-200}
MODELS=${MODELS:-resnet20 lenet}
DEVICE=${DEVICE:-cuda}
ROOT=$(mktemp -d /tmp/strata-gpu-session.XXXXXX)
export OPENBLAS_NUM_THREADS=1

echo "== $(date -u) $(nvidia-smi -L 2>/dev/null | head -1), $(getconf _NPROCESSORS_ONLN) cores"
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'

if [ -z "${STRATA:-}" ] && [ "$PART" != table ]; then
  echo "== build"
  start=$(date +%s)
  mkdir -p "$BUILD"
  STRATA_BUILD_TESTS=ON "$HERE/../scripts/gpu_build.sh" "$BUILD" strata \
    strata_worker_test >"$BUILD/strata-env.sh" 2>"$ROOT/build.log"
  rc=$?
  echo "build rc=$rc in $(($(date +%s) - start)) s"
  tail -3 "$ROOT/build.log"
  [ $rc -eq 0 ] || exit $rc
  # shellcheck disable=SC1091
  . "$BUILD/strata-env.sh"
  STRATA=$BUILD/src/cli/strata

  echo "== GPU tests"
  timeout 300 "$BUILD/tests/strata_worker_test" \
    --gtest_filter='*GpuPathTest.*:DeviceConfig*:GpuGraphTest.*:PrecisionTest.*' 2>&1 |
    grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|tests? from .* ran'
fi
if [ "$PART" = build ]; then
  echo "== end $(date -u)"
  exit 0
fi
STRATA=${STRATA:-$BUILD/src/cli/strata}
# PART=table after PART=build: the loader path the build printed (the
# packages' libraries of STRATA_DEVKIT).
# shellcheck disable=SC1091
[ -f "$BUILD/strata-env.sh" ] && . "$BUILD/strata-env.sh"

# run NAME ARGS... -> the steady and whole samples/s of a strata run, and
# worker 0's compute and communication seconds for a cluster.
run() {
  local name=$1
  shift
  timeout 180 "$STRATA" train --set run.dir="$ROOT" --set run.name="$name" \
    --set train.iterations="$STEPS" --set train.log_every=10 \
    --set train.eval_every=1000000000 --set cluster.evaluator=false \
    --set train.device="$DEVICE" "$@" >"$ROOT/$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "$name: failed (rc=$rc): $(grep -E ' E\]' "$ROOT/$name.log" | head -1 | cut -c1-200)"
    return
  fi
  echo "$name: $(python3 "$HERE/steady_rate.py" "$ROOT/$name")"
}

SYNTH=(--set data.dataset=synthetic --set data.synthetic.shape=3x32x32
       --set data.synthetic.train_size=8192 --set data.synthetic.val_size=512)
MNIST=(--set data.dataset=mnist --set data.dir="$DATA/mnist")
# Beside each strata row that has one, the same with train.cuda_graph
# (-graph); sync 1 + 1 also without pipelining's per-parameter hooks
# (-nopipe: where the worker's extra compute goes), and 2 workers as
# processes (-proc: autograd's device thread is one per process, shared by
# the workers that are threads of one).
{
for model in $MODELS; do
  if [ $model = resnet20 ]; then batch=128; data=("${SYNTH[@]}")
  else batch=64; data=("${MNIST[@]}"); fi
  echo "== $model, batch $batch, $STEPS steps: plain PyTorch"
  timeout 300 python3 "$HERE/torch_peer.py" --model $model --batch $batch \
    --steps "$STEPS" --device "$DEVICE"
  echo "== $model: strata"
  common=("${data[@]}" --set model.name=$model --set train.batch_size=$batch)
  run $model-local "${common[@]}" --set cluster.mode=local
  run $model-local-bf16 "${common[@]}" --set cluster.mode=local \
    --set train.precision=bf16
  run $model-local-graph "${common[@]}" --set cluster.mode=local \
    --set train.cuda_graph=true
  one=(--set cluster.servers=1 --set cluster.workers=1)
  run $model-sync11 "${common[@]}" --set cluster.mode=sync "${one[@]}"
  run $model-sync11-nopipe "${common[@]}" --set cluster.mode=sync "${one[@]}" \
    --set cluster.pipeline=false
  run $model-sync11-graph "${common[@]}" --set cluster.mode=sync "${one[@]}" \
    --set train.cuda_graph=true
  run $model-async11 "${common[@]}" --set cluster.mode=async "${one[@]}"
  run $model-async11-graph "${common[@]}" --set cluster.mode=async \
    "${one[@]}" --set train.cuda_graph=true
  run $model-sync11-tcp "${common[@]}" --set cluster.mode=sync "${one[@]}" \
    --set cluster.transport=tcp
  run $model-sync11-tcp-graph "${common[@]}" --set cluster.mode=sync \
    "${one[@]}" --set cluster.transport=tcp --set train.cuda_graph=true
  for n in 2 4; do
    for g in false true; do
      tag=$([ $g = true ] && echo -graph)
      STEPS=$MULTI_STEPS run $model-allreduce$n$tag "${common[@]}" \
        --set cluster.mode=allreduce --set cluster.workers=$n \
        --set train.cuda_graph=$g
      STEPS=$MULTI_STEPS run $model-sync$n$tag "${common[@]}" \
        --set cluster.mode=sync \
        --set cluster.servers=1 --set cluster.workers=$n \
        --set train.cuda_graph=$g
    done
  done
  STEPS=$MULTI_STEPS run $model-allreduce2-proc "${common[@]}" --set cluster.mode=allreduce \
    --set cluster.workers=2 --processes
done
} 2>&1 | tee "$ROOT/table.txt"
echo "== the table against the targets (bench/gpu_table.py)"
python3 "$HERE/gpu_table.py" "$ROOT/table.txt"
echo "== end $(date -u)"
rm -rf "$ROOT"
