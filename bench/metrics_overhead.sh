#!/bin/bash
# samples/s of an async PS cluster with the watchers on (TensorBoard event
# files + Prometheus /metrics, scraped every second by one scraper process as
# Prometheus would) against off (neither), alternating side by side; mlp on MNIST,
# 2 servers, 2 workers, in one process.
# bench/metrics_overhead.sh [BUILD_DIR] [REPS]; needs STRATA_DATA_DIR; ITERATIONS
# per worker (default 6000, about 6 s of training here).
# Prints every run and the median of the per-rep ratios (on / off).
set -euo pipefail
build="$(cd "${1:-build}" && pwd)"
reps="${2:-5}"
data="$(cd "${STRATA_DATA_DIR:?set STRATA_DATA_DIR}" && pwd)"
tmp="$(mktemp -d /tmp/strata_metrics_overhead_XXXXXX)"
scraper=""
cleanup() { [ -n "$scraper" ] && kill "$scraper" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
cd "$tmp"; export OPENBLAS_NUM_THREADS=1
port=$(( 20000 + RANDOM % 20000 ))
common=(--set data.dataset=mnist --set "data.dir=$data/mnist" --set cluster.mode=async
        --set cluster.servers=2 --set cluster.workers=2 --set cluster.threads_per_worker=1
        --set "train.iterations=${ITERATIONS:-6000}" --set train.log_every=10 --set eval.every_s=5
        --set run.log_level=warning)
ratios=()
for i in $(seq 1 "$reps"); do
  for on in true false; do
    # WATCH=tb or WATCH=prom turns on one of the two only (default both).
    tb=$on; [ "${WATCH:-both}" = prom ] && tb=false
    extra=(--set metrics.tensorboard=$tb)
    if [ $on = true ] && [ "${WATCH:-both}" != tb ]; then
      extra+=(--set "cluster.metrics_address=127.0.0.1:$port")
      # One scraper process, as Prometheus is (a curl started every second
      # costs more CPU than the scrape itself on two cores).
      /usr/bin/python3 -c "
import time, urllib.request
for _ in range(600):
    try: urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=1).read()
    except Exception: pass
    time.sleep(1)
" &
      scraper=$!
    fi
    "$build/src/cli/strata" train "${common[@]}" "${extra[@]}" --set run.name=m$on$i > /dev/null 2>&1
    if [ -n "$scraper" ]; then kill "$scraper" 2>/dev/null || true; wait "$scraper" 2>/dev/null || true; scraper=""; fi
    sps=$(/usr/bin/python3 -c "import json; print(json.load(open('runs/m$on$i/summary.json'))['samples_per_s'])")
    echo "rep $i watchers=$on samples/s $sps"
    eval "sps_$on=$sps"
    rm -rf "runs/m$on$i"
  done
  ratios+=("$(/usr/bin/python3 -c "print($sps_true / $sps_false)")")
done
/usr/bin/python3 -c "
import statistics, sys
r = [float(x) for x in sys.argv[1:]]
print('ratios on/off:', ' '.join('%.3f' % x for x in r))
print('median on/off: %.3f (target >= 0.99, i.e. < 1%% overhead)' % statistics.median(r))
" "${ratios[@]}"
