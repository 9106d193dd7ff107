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
# the machine lacks them; scripts/gpu_prepare.sh puts both in .gpu/.
# STEPS (400) steps a run (MULTI_STEPS, 200, with 2 and 4 workers); steady
# rates from step 50 (bench/steady_rate.py: a cluster's steady figure is
# worker 0's, so an n-worker run's total is about n times it). A dry run of
# the table without a build or a GPU:
# STRATA=build/src/cli/strata DEVICE=cpu STEPS=60 (python3 with torch).
# A device call lasts at most 10 minutes: PART=build (the build and the GPU
# tests; the loader path it needs is kept in BUILD_DIR/strata-env.sh) and then
# PART=table split the session in two calls; MODELS (resnet20 lenet)
# narrows the table. The table's rows run most telling first (the peer, then
# local, 1 + 1 and 2 workers of every model, then the rest) within BUDGET_S
# seconds (420); a row that would start past it is listed as skipped, and the
# ratios are printed either way. If the build fails in the CUDA graph's one
# file (src/models/cuda_graph.cc), it is built again without CUDA graphs
# (-DSTRATA_CUDA_GRAPHS=OFF) so the other rows still run.
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
BUDGET_S=${BUDGET_S:-420}
ROOT=$(mktemp -d /tmp/strata-gpu-session.XXXXXX)
export OPENBLAS_NUM_THREADS=1

echo "== $(date -u) $(nvidia-smi -L 2>/dev/null | head -1), $(getconf _NPROCESSORS_ONLN) cores"
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'

# The strata binary and the worker tests, against the machine's CUDA
# LibTorch; its output in $ROOT/build.log.
build_strata() {
  STRATA_BUILD_TESTS=ON "$HERE/../scripts/gpu_build.sh" "$BUILD" strata \
    strata_worker_test >"$BUILD/strata-env.sh" 2>"$ROOT/build.log"
}

if [ -z "${STRATA:-}" ] && [ "$PART" != table ]; then
  echo "== build"
  start=$(date +%s)
  mkdir -p "$BUILD"
  build_strata
  rc=$?
  echo "build rc=$rc in $(($(date +%s) - start)) s"
  tail -3 "$ROOT/build.log"
  if [ $rc -ne 0 ]; then
    echo "-- the build's first errors"
    grep -m 20 -E 'error:|FAILED:' "$ROOT/build.log"
    if grep -q '^FAILED: .*cuda_graph\.cc' "$ROOT/build.log"; then
      echo "== build again without CUDA graphs (STRATA_CUDA_GRAPHS=OFF; the -graph rows fail saying so)"
      STRATA_CMAKE_ARGS=-DSTRATA_CUDA_GRAPHS=OFF build_strata
      rc=$?
      echo "build rc=$rc in $(($(date +%s) - start)) s"
      [ $rc -eq 0 ] || grep -m 20 -E 'error:|FAILED:' "$ROOT/build.log"
    fi
  fi
  # A test that fails to build need not stop the table.
  if [ $rc -ne 0 ] && [ ! "$BUILD/src/cli/strata" -nt "$ROOT" ]; then
    exit $rc
  fi
  # shellcheck disable=SC1091
  . "$BUILD/strata-env.sh"
  STRATA=$BUILD/src/cli/strata

  echo "== GPU tests"
  if [ -x "$BUILD/tests/strata_worker_test" ]; then
    timeout 180 "$BUILD/tests/strata_worker_test" \
      --gtest_filter='*GpuPathTest.*:DeviceConfig*:GpuGraphTest.*:PrecisionTest.*' \
      >"$ROOT/gpu_tests.log" 2>&1
    echo "GPU tests rc=$?"
    grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|tests? from .* ran' "$ROOT/gpu_tests.log"
    # Why a test failed, if one did.
    grep -m 40 -B2 -A6 -E ': Failure$' "$ROOT/gpu_tests.log"
  else
    echo "GPU tests: not built (the build's errors above)"
  fi
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

DEADLINE=$(($(date +%s) + BUDGET_S))
# left -> the seconds before BUDGET_S runs out.
left() { echo $((DEADLINE - $(date +%s))); }

# run NAME ARGS... -> the steady and whole samples/s of a strata run, and
# worker 0's compute and communication seconds for a cluster; "skipped" past
# the budget (a run needs 20 s at least).
run() {
  local name=$1
  shift
  local t
  t=$(left)
  if [ "$t" -lt 20 ]; then
    echo "$name: skipped (BUDGET_S=$BUDGET_S spent)"
    return
  fi
  [ "$t" -gt 180 ] && t=180
  timeout "$t" "$STRATA" train --set run.dir="$ROOT" --set run.name="$name" \
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
one=(--set cluster.servers=1 --set cluster.workers=1)

# setup MODEL -> batch and common (the model's data, name and batch).
setup() {
  if [ "$1" = resnet20 ]; then batch=128; data=("${SYNTH[@]}")
  else batch=64; data=("${MNIST[@]}"); fi
  common=("${data[@]}" --set model.name="$1" --set train.batch_size="$batch")
}

# many MODEL N MODE GRAPH [ARGS...]: N workers sharing the GPU.
many() {
  local model=$1 n=$2 mode=$3 g=$4
  shift 4
  local tag servers=()
  tag=$([ "$g" = true ] && echo -graph)
  [ "$mode" = sync ] && servers=(--set cluster.servers=1)
  STEPS=$MULTI_STEPS run "$model-$mode$n$tag" "${common[@]}" \
    --set cluster.mode="$mode" "${servers[@]}" --set cluster.workers="$n" \
    --set train.cuda_graph="$g" "$@"
}

# first MODEL: the peer, then the rows of the issue's first targets.
first() {
  local model=$1
  setup "$model"
  echo "== $model, batch $batch, $STEPS steps: plain PyTorch"
  local t
  t=$(left)
  [ "$t" -gt 300 ] && t=300
  if [ "$t" -lt 20 ]; then
    echo "peer: skipped (BUDGET_S=$BUDGET_S spent)"
  else
    timeout "$t" python3 "$HERE/torch_peer.py" --model "$model" \
      --batch "$batch" --steps "$STEPS" --device "$DEVICE"
  fi
  echo "== $model: strata"
  run "$model-local" "${common[@]}" --set cluster.mode=local
  run "$model-local-graph" "${common[@]}" --set cluster.mode=local \
    --set train.cuda_graph=true
  run "$model-sync11" "${common[@]}" --set cluster.mode=sync "${one[@]}"
  run "$model-async11" "${common[@]}" --set cluster.mode=async "${one[@]}"
  run "$model-sync11-tcp" "${common[@]}" --set cluster.mode=sync "${one[@]}" \
    --set cluster.transport=tcp
  many "$model" 2 allreduce false
  many "$model" 2 sync false
}

# rest MODEL: the graph beside each cluster row, 2 workers with their
# backward passes on LibTorch's autograd thread (-autograd: one per GPU in a
# process, shared by the workers that are threads of it; the other rows run
# each worker's on its own thread, train.gpu_backward's default), 4 workers,
# bf16, sync 1 + 1 without pipelining's per-parameter hooks (-nopipe: where
# the worker's extra compute goes), and 2 workers as processes (-proc).
rest() {
  local model=$1
  setup "$model"
  echo "== $model: more strata rows"
  run "$model-sync11-graph" "${common[@]}" --set cluster.mode=sync "${one[@]}" \
    --set train.cuda_graph=true
  run "$model-async11-graph" "${common[@]}" --set cluster.mode=async \
    "${one[@]}" --set train.cuda_graph=true
  run "$model-sync11-tcp-graph" "${common[@]}" --set cluster.mode=sync \
    "${one[@]}" --set cluster.transport=tcp --set train.cuda_graph=true
  many "$model" 2 allreduce true
  many "$model" 2 sync true
  STEPS=$MULTI_STEPS run "$model-allreduce2-autograd" "${common[@]}" \
    --set cluster.mode=allreduce --set cluster.workers=2 \
    --set train.gpu_backward=autograd_thread
  for g in false true; do
    many "$model" 4 allreduce $g
    many "$model" 4 sync $g
  done
  run "$model-local-bf16" "${common[@]}" --set cluster.mode=local \
    --set train.precision=bf16
  run "$model-sync11-nopipe" "${common[@]}" --set cluster.mode=sync \
    "${one[@]}" --set cluster.pipeline=false
  STEPS=$MULTI_STEPS run "$model-allreduce2-proc" "${common[@]}" \
    --set cluster.mode=allreduce --set cluster.workers=2 --processes
}

{
for model in $MODELS; do first "$model"; done
for model in $MODELS; do rest "$model"; done
} 2>&1 | tee "$ROOT/table.txt"
echo "== the table against the targets (bench/gpu_table.py)"
python3 "$HERE/gpu_table.py" "$ROOT/table.txt"
echo "== end $(date -u)"
rm -rf "$ROOT"
