#!/usr/bin/env bash
# GPU workers against CPU workers (train.device): samples/s of lenet (MNIST)
# and resnet20 (synthetic 3x32x32 images, CIFAR-10's shape) for the
# single-process trainer (on the GPU: updating on the device, and on the
# host, train.local_optimizer), a sync cluster of 1 server + 1 worker and an
# all-reduce of 2 workers (the batch split between them), in process, on the
# CPU and on the GPU, with the share of the worker's step spent in
# communication (comm_s / (compute_s + comm_s) of metrics.jsonl) and where
# the training time went (summary.json's train_s, which samples/s divides
# by, and worker 0's compute, communication, clock and data waits), and on
# the GPU the local trainer in bf16 (train.precision).
# The first lines check that a short lenet run ends in the same place on
# both devices (float tolerance: cuDNN and cuBLAS sum in another order).
#
#   bench/gpu_bench.sh STRATA DATA_DIR [CPU_THREADS]
#
# Needs a CUDA build (scripts/gpu_build.sh) and a GPU; DATA_DIR holds mnist/.
set -uo pipefail
STRATA=${1:?usage: bench/gpu_bench.sh STRATA DATA_DIR [CPU_THREADS]}
DATA=${2:?usage: bench/gpu_bench.sh STRATA DATA_DIR [CPU_THREADS]}
THREADS=${3:-8}
ROOT=$(mktemp -d /tmp/strata-gpu.XXXXXX)
export OPENBLAS_NUM_THREADS=1

MNIST=(--set data.dataset=mnist --set data.dir="$DATA/mnist")
SYNTH=(--set data.dataset=synthetic --set data.synthetic.shape=3x32x32
       --set data.synthetic.train_size=4000 --set data.synthetic.val_size=500)

# run NAME ARGS... -> the run's log in $ROOT/NAME.log, its directory under
# $ROOT/NAME; prints "samples/s comm-share final-line".
run() {
  local name=$1
  shift
  timeout 120 "$STRATA" train --set run.dir="$ROOT/$name" --set train.log_every=10 \
    --set cluster.evaluator=false --set train.eval_every=1000000000 "$@" \
    >"$ROOT/$name.log" 2>&1
  local rc=$?
  local sps share
  sps=$(grep -o '[0-9.]* samples/s' "$ROOT/$name.log" | tail -1 | cut -d' ' -f1)
  share=$(tail -1 "$ROOT"/"$name"/*/metrics.jsonl 2>/dev/null |
    python3 -c 'import json,sys
try:
  j=json.loads(sys.stdin.read()); c=j["comm_s"]; t=j["compute_s"]
  print("%.2f" % (c/(c+t)))
except Exception: print("-")')
  # Where the training time went: train_s (what samples/s divides by),
  # and for a cluster worker 0's compute, communication and data waits.
  times=$(cat "$ROOT"/"$name"/*/summary.json 2>/dev/null |
    python3 -c 'import json,sys
try:
  j=json.loads(sys.stdin.read()); out="train %.2fs" % j["train_s"]
  w=(j.get("workers") or [{}])[0]
  if "compute_s" in w:
    out+=" w0 compute %.2f comm %.2f wait %.2f data %.2f" % (w["compute_s"], w["comm_s"], w.get("wait_s",0), w.get("data_wait_s",0))
  print(out)
except Exception: print("-")')
  if [ -z "$sps" ]; then
    echo "failed(rc=$rc): $(grep -E ' E\]' "$ROOT/$name.log" | head -2 | cut -c1-300)"
  else
    echo "$sps $share | $times | $(grep -o 'done.*' "$ROOT/$name.log" | tail -1 | cut -c7-90)"
  fi
}

echo "gpu_bench: $(nvidia-smi -L 2>/dev/null | head -1), $(getconf _NPROCESSORS_ONLN) cores, CPU runs with $THREADS threads"
echo "== same run on both devices (lenet, local, 300 steps, batch 64, seed 1)"
for dev in cpu cuda; do
  echo "$dev: $(run check-$dev "${MNIST[@]}" --set model.name=lenet --set cluster.mode=local \
    --set train.iterations=300 --set train.threads="$THREADS" --set train.device=$dev)"
done

echo "== samples/s (comm share of the worker's step)"
printf '%-9s %-6s %-20s %s\n' model device setup "samples/s comm-share result"
for model in lenet resnet20; do
  if [ $model = lenet ]; then data=("${MNIST[@]}"); steps=400; cpu_steps=400; batch=64
  else data=("${SYNTH[@]}"); steps=150; cpu_steps=20; batch=128; fi
  for dev in cpu cuda; do
    n=$steps
    [ $dev = cpu ] && n=$cpu_steps
    common=("${data[@]}" --set model.name=$model --set train.batch_size=$batch
            --set train.iterations=$n --set train.threads="$THREADS"
            --set cluster.threads_per_worker="$THREADS" --set train.device=$dev)
    printf '%-9s %-6s %-20s %s\n' $model $dev local \
      "$(run $model-$dev-local "${common[@]}" --set cluster.mode=local)"
    # On the GPU local updates on the device (train.local_optimizer =
    # auto); this row is the host's update, two copies a step, beside it.
    [ $dev = cuda ] && printf '%-9s %-6s %-20s %s\n' $model $dev "local, host update" \
      "$(run $model-$dev-local-host "${common[@]}" --set cluster.mode=local \
        --set train.local_optimizer=host)"
    # Mixed precision (train.precision = bf16: autocast on the device).
    [ $dev = cuda ] && printf '%-9s %-6s %-20s %s\n' $model $dev "local, bf16" \
      "$(run $model-$dev-local-bf16 "${common[@]}" --set cluster.mode=local \
        --set train.precision=bf16)"
    printf '%-9s %-6s %-20s %s\n' $model $dev "sync 1+1 inproc" \
      "$(run $model-$dev-sync "${common[@]}" --set cluster.mode=sync \
        --set cluster.servers=1 --set cluster.workers=1)"
    printf '%-9s %-6s %-20s %s\n' $model $dev "allreduce 2 inproc" \
      "$(run $model-$dev-allreduce "${common[@]}" --set cluster.mode=allreduce \
        --set cluster.workers=2)"
  done
done
rm -rf "$ROOT"
