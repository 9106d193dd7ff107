#!/bin/bash
# What cluster checkpoints cost: a sync PS cluster (mlp on MNIST, or
# MODEL=resnet56 on synthetic CIFAR-shaped data; MODEL=lenet on MNIST; 1 server,
# WORKERS workers (default 2), in one process) trained with a checkpoint round
# every EVERY steps (default 100) against none, alternating side by side. K=k
# (0 < k < WORKERS) makes it sync k-of-n (late gradients deferred); STRATA=PATH
# runs another strata binary (e.g. an older build) for the runs with rounds.
# bench/cluster_checkpoint.sh [BUILD_DIR] [REPS]; needs STRATA_DATA_DIR for
# mlp and lenet.
# Prints every run, the median per-round time (the coordinator's log: state
# gathered, written, fsynced), the median ratio of training time (on / off)
# and the slowdown that one round per 60 s of training means.
set -euo pipefail
build="$(cd "${1:-build}" && pwd)"
reps="${2:-5}"
every="${EVERY:-100}"
model="${MODEL:-mlp}"
tmp="$(mktemp -d /tmp/strata_cluster_checkpoint_XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"; export OPENBLAS_NUM_THREADS=1
strata="${STRATA:-$build/src/cli/strata}"
common=(--set cluster.mode=sync --set cluster.servers=1 --set "cluster.workers=${WORKERS:-2}"
        --set "cluster.updates_per_step=${K:-0}" --set cluster.late_gradients=defer
        --set cluster.threads_per_worker=1 --set train.log_every=50 --set eval.every_s=1000
        --set cluster.evaluator=false --set run.log_level=info --set checkpoint.keep=2)
if [ "$model" = mlp ] || [ "$model" = lenet ]; then
  data="$(cd "${STRATA_DATA_DIR:?set STRATA_DATA_DIR}" && pwd)"
  common+=(--set data.dataset=mnist --set "data.dir=$data/mnist" --set "model.name=$model"
           --set "train.iterations=${ITERATIONS:-2000}")
else
  common+=(--set data.dataset=synthetic --set data.synthetic.shape=3x32x32
           --set data.synthetic.train_size=2048 --set data.synthetic.val_size=256
           --set model.name="$model" --set train.batch_size=32 --set "train.iterations=${ITERATIONS:-200}")
fi
ratios=(); rounds=()
for i in $(seq 1 "$reps"); do
  for on in true false; do
    extra=(--set checkpoint.every_updates=0); bin="$build/src/cli/strata"
    [ $on = true ] && extra=(--set "checkpoint.every_updates=$every") && bin="$strata"
    "$bin" train "${common[@]}" "${extra[@]}" --set run.name=c$on$i > log$on$i 2>&1
    t=$(/usr/bin/python3 -c "import json; print(json.load(open('runs/c$on$i/summary.json'))['train_s'])")
    n=$(grep -c "checkpoint at step" log$on$i || true)
    echo "rep $i checkpoints=$on train_s $t rounds $n"
    eval "t_$on=$t"
    if [ $on = true ]; then
      rounds+=($(sed -n 's/.*checkpoint at step [0-9]*: .* MB, \([0-9.]*\) ms).*/\1/p' log$on$i))
      size=$(sed -n 's/.*checkpoint at step [0-9]*: .* (\([0-9.]*\) MB.*/\1/p' log$on$i | tail -1)
      n_on=$n
    fi
    rm -rf "runs/c$on$i"
  done
  ratios+=("$(/usr/bin/python3 -c "print($t_true / $t_false)")")
done
/usr/bin/python3 -c "
import statistics, sys
n = int(sys.argv[1]); size = sys.argv[2]; reps = int(sys.argv[3])
rest = sys.argv[4:]
ratios = [float(x) for x in rest[:reps]]
rounds = [float(x) for x in rest[reps:]]
med_round = statistics.median(rounds)
print('checkpoint size %s MB, %d rounds per run' % (size, n))
print('round (gather + write + fsync), median of %d: %.1f ms' % (len(rounds), med_round))
print('ratios on/off:', ' '.join('%.3f' % x for x in ratios))
print('median on/off: %.3f' % statistics.median(ratios))
print('slowdown at one round per 60 s: %.3f %% (the round time over 60 s; target < 2 %%)' % (100 * med_round / 1000 / 60))
" "$n_on" "$size" "$reps" "${ratios[@]}" "${rounds[@]}"
