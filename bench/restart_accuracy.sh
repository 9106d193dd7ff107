#!/bin/bash
# cluster.restart on MNIST: an async --processes run (mlp, 1 server, 3
# workers, a checkpoint every 100 steps) whose server is SIGKILLed once the
# checkpoint at step KILL_AT (default 300) exists, against the same run
# undisturbed, REPS times side by side. Prints each run's final validation
# accuracy, the replacement's down time and lost updates, and the median
# difference in accuracy points.
# bench/restart_accuracy.sh [BUILD_DIR] [REPS]; needs STRATA_DATA_DIR.
set -euo pipefail
build="$(cd "${1:-build}" && pwd)"
reps="${2:-3}"
kill_at="${KILL_AT:-300}"
data="$(cd "${STRATA_DATA_DIR:?set STRATA_DATA_DIR}" && pwd)"
tmp="$(mktemp -d /tmp/strata_restart_accuracy_XXXXXX)"
launcher=""
cleanup() { [ -n "$launcher" ] && kill "$launcher" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
cd "$tmp"; export OPENBLAS_NUM_THREADS=1
common=(--processes --set data.dataset=mnist --set "data.dir=$data/mnist" --set cluster.mode=async
        --set cluster.servers=1 --set cluster.workers=3 --set "train.iterations=${ITERATIONS:-1000}"
        --set checkpoint.every_updates=100 --set cluster.restart=true --set eval.every_s=1000
        --set run.log_level=warning)
diffs=()
for i in $(seq 1 "$reps"); do
  "$build/src/cli/strata" train "${common[@]}" --set run.name=calm$i > /dev/null 2>&1
  "$build/src/cli/strata" train "${common[@]}" --set run.name=hit$i > log$i 2>&1 &
  launcher=$!
  for _ in $(seq 1 6000); do
    [ -f "runs/hit$i/checkpoints/step-$kill_at/manifest.json" ] && break
    sleep 0.02
  done
  pid=$(/usr/bin/python3 -c "import json; print(json.load(open('runs/hit$i/pids.json'))['server 0 (node 1)'])")
  kill -9 "$pid"
  wait "$launcher"; launcher=""
  read -r calm hit down lost < <(/usr/bin/python3 -c "
import json
c = json.load(open('runs/calm$i/summary.json')); h = json.load(open('runs/hit$i/summary.json'))
r = h.get('node_restarts', [{}])
print(c['final_val_acc'], h['final_val_acc'], r[0].get('down_s', 'none'), h.get('lost_updates_at_least', 'none'))")
  echo "rep $i undisturbed val acc $calm | server killed at step $kill_at: val acc $hit, back after $down s, lost updates >= $lost"
  diffs+=("$(/usr/bin/python3 -c "print(100 * ($hit - $calm))")")
done
/usr/bin/python3 -c "
import statistics, sys
d = [float(x) for x in sys.argv[1:]]
print('accuracy difference (points, killed - undisturbed):', ' '.join('%+.2f' % x for x in d))
print('median %+.2f points (target: within 1 point)' % statistics.median(d))
" "${diffs[@]}"
