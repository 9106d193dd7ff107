#!/usr/bin/env bash
# Where the embedded 1 + 1 cluster's step loses against the single-process
# trainer's: lenet on MNIST, the same runs on the GPU (one LibTorch thread)
# and on the CPU (CPU_THREADS threads), each with a window of steps recorded
# by LibTorch's profiler (train.profile_steps). Prints each run's whole-run
# and steady-state samples/s (bench/steady_rate.py) and worker 0's compute
# seconds, then bench/profile_diff.py's tables: the local trainer against
# itself on a thread other than main (strata train --on-thread), against the
# pipelined sync worker, and against the unpipelined one.
#
#   bench/gpu_profile.sh STRATA DATA_DIR [CPU_THREADS] [OUT_DIR]
#
# Runs on the CPU alone when no GPU is there. OUT_DIR keeps the profiles
# (and, with a Kineto LibTorch, the Chrome traces); a temporary folder
# otherwise.
set -uo pipefail
STRATA=${1:?usage: bench/gpu_profile.sh STRATA DATA_DIR [CPU_THREADS] [OUT_DIR]}
DATA=${2:?usage: bench/gpu_profile.sh STRATA DATA_DIR [CPU_THREADS] [OUT_DIR]}
THREADS=${3:-8}
ROOT=${4:-$(mktemp -d /tmp/strata-profile.XXXXXX)}
# Run names are fixed: an earlier run's directories would be read instead.
if [ -n "$(ls -A "$ROOT" 2>/dev/null)" ]; then
  echo "gpu_profile: $ROOT is not empty; name a new folder" >&2
  exit 2
fi
HERE=$(dirname "$0")
STEPS=${STEPS:-400}
FROM=${FROM:-150}
COUNT=${COUNT:-50}
export OPENBLAS_NUM_THREADS=1
mkdir -p "$ROOT"

# run NAME ARGS... -> "samples/s | train_s | worker 0 compute"; the run's
# directory is $ROOT/NAME.
run() {
  local name=$1
  shift
  timeout 300 "$STRATA" train --set run.dir="$ROOT" --set run.name="$name" \
    --set data.dataset=mnist --set data.dir="$DATA/mnist" \
    --set model.name=lenet --set train.batch_size=64 \
    --set train.iterations="$STEPS" --set train.log_every=50 \
    --set train.eval_every=1000000000 --set cluster.evaluator=false \
    --set cluster.servers=1 --set cluster.workers=1 \
    --set train.profile_from="$FROM" --set train.profile_steps="$COUNT" "$@" \
    >"$ROOT/$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "failed (rc=$rc): $(grep -E ' E\]' "$ROOT/$name.log" | head -1 | cut -c1-200)"
    return
  fi
  python3 "$HERE/steady_rate.py" "$ROOT/$name"
}

devices=(cpu)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  devices=(cuda cpu)
fi
echo "gpu_profile: $(nvidia-smi -L 2>/dev/null | head -1), $(getconf _NPROCESSORS_ONLN) cores; lenet, $STEPS steps, profiled $FROM..$((FROM + COUNT - 1))"
# Round 1 records the profiles; later rounds (ROUNDS, default 2) run the
# same configurations unprofiled, for samples/s alone. MALLOC_ARENA_MAX=1
# puts every thread's allocations in glibc's main arena, as the main
# thread's are.
for round in $(seq 1 "${ROUNDS:-2}"); do
  prof=()
  [ "$round" -gt 1 ] && prof=(--set train.profile_steps=0)
  for dev in "${devices[@]}"; do
    t=1
    [ "$dev" = cpu ] && t=$THREADS
    common=(--set train.device="$dev" --set train.threads="$t"
            --set cluster.threads_per_worker="$t" "${prof[@]}")
    r=""
    [ "$round" -gt 1 ] && r="-r$round"
    echo "== round $round: $dev, $t thread(s)${prof:+, unprofiled}"
    printf '%-30s %s\n' local "$(run "$dev-local$r" "${common[@]}" --set cluster.mode=local)"
    printf '%-30s %s\n' local-on-thread "$(run "$dev-local-thread$r" --on-thread "${common[@]}" --set cluster.mode=local)"
    printf '%-30s %s\n' local-on-thread-arena1 "$(MALLOC_ARENA_MAX=1 run "$dev-local-thread-arena1$r" --on-thread "${common[@]}" --set cluster.mode=local)"
    printf '%-30s %s\n' sync-1+1 "$(run "$dev-sync$r" "${common[@]}" --set cluster.mode=sync)"
    printf '%-30s %s\n' sync-1+1-arena1 "$(MALLOC_ARENA_MAX=1 run "$dev-sync-arena1$r" "${common[@]}" --set cluster.mode=sync)"
    printf '%-30s %s\n' sync-1+1-unpipelined "$(run "$dev-sync-nopipe$r" "${common[@]}" --set cluster.mode=sync --set cluster.pipeline=false)"
  done
done
for dev in "${devices[@]}"; do
  L=$ROOT/$dev-local/profile-local.json
  for other in "$dev-local-thread/profile-local.json" \
      "$dev-local-thread-arena1/profile-local.json" "$dev-sync/profile-worker0.json" \
      "$dev-sync-nopipe/profile-worker0.json"; do
    echo
    python3 "$HERE/profile_diff.py" "$L" "$ROOT/$other" --top "${TOP:-22}" 2>&1
  done
done
echo "gpu_profile: profiles in $ROOT"
