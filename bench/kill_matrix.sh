#!/bin/bash
# The kill matrix (issue 12). Processes column: for each role x mode, a
# `strata train --processes` run (synthetic data, 3 workers, 1 server,
# heartbeat 100 ms / timeout 1.5 s) has one node SIGKILLed once worker 1 is
# training, and the table says how the run ended and how long after the
# kill. Killing the coordinator kills the launcher (it is the coordinator);
# the cell then times how long the other processes take to stop themselves.
# Threads column (the embedded default, one process): the same run with
# fault injection instead (cluster.fail_worker = 1 at iteration 20, or
# cluster.fail_node = ROLE vanishing 1 s after it joined); the cell gives the
# run's wall time and how it ended.
# RESTART=1: the processes column with checkpoints every 50 steps and
# cluster.restart = true (docs/design/checkpoints.md).
# bench/kill_matrix.sh [BUILD_DIR] [processes|threads|both]. Every wait is
# bounded (90 s; 120 s per threads run).
set -uo pipefail
build="$(cd "${1:-build}" && pwd)"
strata="$build/src/cli/strata"
tmp="$(mktemp -d /tmp/strata_kill_matrix_XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1
now() { date +%s.%N; }
json() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@" 2>/dev/null; }
column="${2:-both}"
common=(--set cluster.workers=3 --set cluster.servers=1 --set train.iterations=400 --set cluster.worker_delay_ms=10
        --set train.log_every=5 --set cluster.heartbeat_interval_ms=100 --set cluster.heartbeat_timeout_ms=1500
        --set data.synthetic.train_size=3000 --set data.synthetic.val_size=300 --set cluster.threads_per_worker=1
        --set run.log_level=error)
if [ "$column" != processes ]; then
printf "%-8s %-12s %-6s %-10s %-8s %s\n" column role mode outcome "wall s" "detail"
for mode in sync async; do
  for role in worker server evaluator data coordinator; do
    extra=(--set cluster.fail_node=$role --set cluster.fail_after_s=1)
    [ "$role" = worker ] && extra=(--set cluster.fail_worker=1 --set cluster.fail_at=20)
    [ "$role" = data ] && extra+=(--set cluster.data_servers=1)
    t0=$(now)
    timeout 120 "$strata" train --set cluster.mode=$mode --set run.dir="$tmp" --set run.name=t-$role-$mode \
      "${common[@]}" "${extra[@]}" > "$tmp/t-$role-$mode.log" 2>&1
    rc=$?
    t1=$(now)
    case $rc in 0) outcome=finished ;; 124) outcome=HUNG ;; *) outcome=stopped ;; esac
    dir="$tmp/t-$role-$mode"
    if [ -f "$dir/summary.json" ]; then
      detail="exit $rc; $(json "$dir/summary.json" "d.get('error') or ('lost: ' + ', '.join(d.get('lost_workers', [])) if d.get('lost_workers') else 'no node lost') + (', val acc %.3f' % d['final_val_acc'] if 'final_val_acc' in d else ', no final evaluation')")"
    else
      detail="exit $rc; no summary; $(grep -E ' E\]' "$tmp/t-$role-$mode.log" | tail -1 | cut -c25-140)"
    fi
    printf "%-8s %-12s %-6s %-10s %-8.1f %s\n" threads "$role" "$mode" "$outcome" "$(/usr/bin/python3 -c "print($t1 - $t0)")" "$detail"
  done
done
fi
[ "$column" = threads ] && exit 0
printf "%-12s %-6s %-10s %-8s %s\n" role mode outcome "secs" "detail"
for mode in sync async; do
  for role in worker server evaluator data coordinator; do
    dir="$tmp/$role-$mode"
    extra=()
    [ "$role" = data ] && extra=(--set cluster.data_servers=1)
    [ "${RESTART:-0}" = 1 ] && extra+=(--set cluster.restart=true --set checkpoint.every_updates=50)
    "$strata" train --processes --set cluster.mode=$mode --set run.dir="$tmp" --set run.name=$role-$mode \
      --set cluster.workers=3 --set cluster.servers=1 --set train.iterations=400 --set cluster.worker_delay_ms=10 \
      --set train.log_every=5 --set cluster.heartbeat_interval_ms=100 --set cluster.heartbeat_timeout_ms=1500 \
      --set data.synthetic.train_size=3000 --set data.synthetic.val_size=300 --set cluster.threads_per_worker=1 \
      --set run.log_level=error "${extra[@]}" > "$tmp/$role-$mode.log" 2>&1 &
    launcher=$!
    # Wait for worker 1 to train (RESTART=1: and for the first checkpoint,
    # the state a replacement starts from).
    for _ in $(seq 1 900); do
      grep -q '"worker":1' "$dir/metrics.jsonl" 2>/dev/null && [ -f "$dir/pids.json" ] &&
        { [ "${RESTART:-0}" != 1 ] || [ -f "$dir/checkpoints/step-50/manifest.json" ]; } && break
      sleep 0.1
    done
    case $role in
      worker) name="worker 1" ;; server) name="server 0" ;; evaluator) name="evaluator" ;;
      data) name="data server 0" ;; coordinator) name="" ;;
    esac
    if [ -n "$name" ]; then
      victim=$(/usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print([v for k,v in d.items() if k.startswith(sys.argv[2]+' (')][0])" "$dir/pids.json" "$name")
    else
      victim=$launcher
    fi
    children=$(/usr/bin/python3 -c "import json,sys; print(' '.join(str(v) for v in json.load(open(sys.argv[1])).values()))" "$dir/pids.json")
    t0=$(now)
    kill -9 "$victim"
    if [ "$role" = coordinator ]; then
      wait "$launcher" 2>/dev/null
      left="$children"
      for _ in $(seq 1 900); do
        left=""
        for p in $children; do kill -0 "$p" 2>/dev/null && [ "$(ps -o stat= -p $p | cut -c1)" != Z ] && left="$left $p"; done
        [ -z "$left" ] && break
        sleep 0.1
      done
      t1=$(now)
      if [ -z "$left" ]; then outcome="stopped"; detail="every node stopped itself (lost the coordinator)"; else outcome="HUNG"; detail="still running:$left"; for p in $left; do kill -9 $p; done; fi
    else
      rc=""
      for _ in $(seq 1 900); do
        if ! kill -0 "$launcher" 2>/dev/null; then break; fi
        sleep 0.1
      done
      if kill -0 "$launcher" 2>/dev/null; then kill -9 "$launcher"; outcome="HUNG"; fi
      wait "$launcher"; rc=$?
      t1=$(now)
      [ "${outcome:-}" = HUNG ] || { [ $rc = 0 ] && outcome="finished" || outcome="stopped"; }
      detail="exit $rc; $(json "$dir/summary.json" "d.get('error') or ('lost: ' + ', '.join(d.get('lost_workers', [])) if d.get('lost_workers') else 'no node lost') + (', val acc %.3f' % d['final_val_acc'] if 'final_val_acc' in d else ', no final evaluation') + (', replaced: %s' % ', '.join(r['node'] for r in d['node_restarts']) if d.get('node_restarts') else '') + (', cluster restarted %d time(s)' % len(d['restarts']) if d.get('restarts') else '')")"
    fi
    printf "%-12s %-6s %-10s %-8.1f %s\n" "$role" "$mode" "$outcome" "$(/usr/bin/python3 -c "print($t1 - $t0)")" "$detail"
    outcome=""
  done
done
