#!/usr/bin/env bash
# Scaling of the parameter-server modes with CPU workers: samples/s for
# 1, 2, 4, 8 workers with 2 servers, sync and async, and the efficiency
# against n x one worker (weak scaling: each worker keeps a batch of 64, so
# train.batch_size = 64 n). One process runs the cluster (the embedded
# default) with every node on loopback TCP; each worker computes with one
# LibTorch thread, so the machine needs about n + 2 cores.
#
#   bench/scaling.sh STRATA DATA_DIR [MODEL] [ITERATIONS] [WORKERS] [DEVICE]
#
# DATA_DIR holds mnist/ (STRATA_DATA_DIR); MODEL defaults to lenet,
# ITERATIONS (steps per run) to 400, WORKERS to "1 2 4 8", DEVICE to cpu.
set -uo pipefail
STRATA=${1:?usage: bench/scaling.sh STRATA DATA_DIR [MODEL] [ITERATIONS] [WORKERS] [DEVICE]}
DATA=${2:?usage: bench/scaling.sh STRATA DATA_DIR [MODEL] [ITERATIONS] [WORKERS] [DEVICE]}
MODEL=${3:-lenet}
ITERS=${4:-400}
WORKERS=${5:-1 2 4 8}
DEVICE=${6:-cpu}
DEVICE_SET=()
[ "$DEVICE" != cpu ] && DEVICE_SET=(--set train.device="$DEVICE")
ROOT=$(mktemp -d /tmp/strata-scaling.XXXXXX)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

run() {  # mode n -> prints samples/s, or "failed"
  local mode=$1 n=$2 log="$ROOT/$1-$2.log"
  timeout 300 "$STRATA" train \
    --set model.name="$MODEL" --set data.dataset=mnist --set data.dir="$DATA/mnist" \
    --set cluster.mode="$mode" --set cluster.servers=2 --set cluster.workers="$n" \
    --set cluster.transport=tcp --set cluster.evaluator=false \
    --set train.batch_size=$((64 * n)) --set train.iterations="$ITERS" \
    --set train.threads=1 --set cluster.threads_per_worker=1 \
    ${DEVICE_SET[@]+"${DEVICE_SET[@]}"} \
    --set train.eval_every=1000000000 --set train.log_every=100 \
    --set run.dir="$ROOT/runs" >"$log" 2>&1
  local sps
  sps=$(grep -o '[0-9.]* samples/s' "$log" | tail -1 | cut -d' ' -f1)
  if [ -z "$sps" ]; then
    echo "failed"
    tail -5 "$log" >&2
  else
    echo "$sps"
  fi
}

echo "scaling: model $MODEL, $ITERS steps, 2 servers, loopback TCP, batch 64 per worker, device $DEVICE, $(getconf _NPROCESSORS_ONLN) cores"
printf '%-6s %8s %12s %12s\n' mode workers samples/s efficiency
for mode in sync async; do
  one=""
  for n in $WORKERS; do
    sps=$(run "$mode" "$n")
    eff="-"
    if [ "$sps" != failed ]; then
      [ -z "$one" ] && [ "$n" = 1 ] && one=$sps
      [ -n "$one" ] && eff=$(awk -v s="$sps" -v o="$one" -v n="$n" 'BEGIN{printf "%.2f", s/(n*o)}')
    fi
    printf '%-6s %8s %12s %12s\n' "$mode" "$n" "$sps" "$eff"
  done
done
rm -rf "$ROOT"
