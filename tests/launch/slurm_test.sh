#!/usr/bin/env bash
# A strata cluster under a real single-node Slurm: scripts/slurm_local.sh starts
# munged, slurmctld and slurmd in a temporary directory, `srun -n 7` runs
# `strata node` without --role (SLURM_PROCID picks the role: 0 coordinator,
# 1 server, 2..5 workers, 6 evaluator) in async and then sync mode, and the
# coordinator's summary.json must name the mode, 4 workers and a finite
# final_val_acc. One rank too many must fail at once, naming SLURM_PROCID.
#
#   tests/launch/slurm_test.sh build/src/cli/strata
#
# Exit 0 passed, 1 failed, 2 usage, 77 skipped (not root, or slurm-wlm/munge
# missing: apt-get install slurm-wlm munge). Slurm is always stopped on exit.
# STRATA_SLURM_TEST_KEEP=1 keeps the temporary directory (logs, run directories).
set -uo pipefail

SKIP=77
RUN_TIMEOUT=${STRATA_SLURM_TEST_TIMEOUT:-180}  # seconds for each srun

say() { echo "slurm_test: $*"; }
skip() { say "SKIP: $*"; exit "$SKIP"; }

[ $# -eq 1 ] || { echo "usage: $0 STRATA_BINARY" >&2; exit 2; }
strata=$1
[ -x "$strata" ] || { echo "slurm_test: $strata is not an executable" >&2; exit 2; }
strata=$(cd "$(dirname "$strata")" && pwd -P)/$(basename "$strata")
root=$(cd "$(dirname "$0")/../.." && pwd -P)
slurm_local=$root/scripts/slurm_local.sh

[ "$(id -u)" -eq 0 ] || skip "needs root (slurmd, SlurmUser=root)"
for t in slurmctld slurmd srun sinfo scontrol squeue scancel munged; do
  command -v "$t" >/dev/null 2>&1 ||
    skip "$t not installed (Debian: apt-get install slurm-wlm munge)"
done

# Not inside someone else's job or MPI launch: srun would join the outer job, and
# an inherited MPI rank would win over SLURM_PROCID in RoleFromRank.
for v in $(compgen -e); do
  case $v in
    SLURM_*|OMPI_COMM_WORLD_RANK|PMI_RANK|PMIX_RANK) unset "$v" ;;
  esac
done

tmp=$(mktemp -d "/tmp/strata_slurm_test.XXXXXX") || { say "FAIL: mktemp"; exit 1; }
chmod 755 "$tmp"  # munged wants every directory above its socket searchable
# shellcheck disable=SC2317  # reached through the EXIT trap
cleanup() {
  local rc=$?
  "$slurm_local" stop "$tmp/slurm" >/dev/null 2>&1 ||
    say "warning: $slurm_local stop $tmp/slurm failed"
  if [ "${STRATA_SLURM_TEST_KEEP:-0}" = 1 ]; then
    say "kept $tmp"
  else
    rm -rf "$tmp"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

failed=0
fail() { say "FAIL: $*"; failed=1; }

t0=$SECONDS
if ! SLURM_LOCAL_TIMEOUT=45 timeout 170 "$slurm_local" start "$tmp/slurm" >"$tmp/slurm.env" 2>"$tmp/slurm_start.log"; then
  cat "$tmp/slurm_start.log"
  say "FAIL: scripts/slurm_local.sh start did not bring up Slurm"
  exit 1
fi
# shellcheck disable=SC1091
. "$tmp/slurm.env"
export SLURM_CONF
say "Slurm up in $((SECONDS - t0)) s ($SLURM_CONF)"

# A port nobody listens on for the coordinator (it binds it).
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local p=$((20000 + RANDOM % 20000)) _
  for _ in $(seq 1 200); do
    port_busy "$p" || { echo "$p"; return 0; }
    p=$((p + 1))
  done
  return 1
}

# The value of a top-level key of the coordinator's summary.json (pretty
# printed, two-space indent): `"mode": "async",` -> async.
summary_value() {  # summary_value FILE KEY
  sed -n "s/^  \"$2\": \(.*\)$/\1/p" "$1" | sed 's/,$//; s/^"\(.*\)"$/\1/' | head -n 1
}

dump() {  # dump LOG: what to read when a run fails
  say "--- $1 (last 40 lines)"; tail -n 40 "$1"
  say "--- slurmd.log (last 15 lines)"; tail -n 15 "$tmp/slurm/log/slurmd.log" 2>/dev/null
  say "--- slurmctld.log (last 15 lines)"; tail -n 15 "$tmp/slurm/log/slurmctld.log" 2>/dev/null
}

workers=4
ranks=$((1 + 1 + workers + 1))  # coordinator, 1 server, workers, evaluator

run_cluster() {  # run_cluster MODE NTASKS RUN_DIR LOG
  local port
  port=$(free_port) || { say "no free port"; return 1; }
  timeout -k 10 "$RUN_TIMEOUT" srun -n "$2" --kill-on-bad-exit=1 --label \
    "$strata" node --coordinator "tcp://127.0.0.1:$port" --run-dir "$3" \
    --set cluster.mode="$1" --set cluster.servers=1 --set cluster.workers=$workers \
    --set train.iterations=50 --set data.dataset=synthetic \
    --set cluster.request_timeout_ms=60000 >"$4" 2>&1
}

for mode in async sync; do
  run=$tmp/run-$mode log=$tmp/$mode.log
  t0=$SECONDS
  run_cluster "$mode" "$ranks" "$run" "$log"
  rc=$?
  say "$mode: srun -n $ranks exited $rc in $((SECONDS - t0)) s"
  if [ "$rc" -ne 0 ]; then
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      fail "$mode: srun ran past ${RUN_TIMEOUT}s"
    else
      fail "$mode: srun exited $rc (a task failed)"
    fi
    dump "$log"; continue
  fi
  if grep -q '^srun: error' "$log"; then fail "$mode: srun reported an error"; dump "$log"; continue; fi
  # Each rank took the role its SLURM_PROCID names.
  grep -q '^0: .*coordinator (node 0) listening' "$log" || fail "$mode: rank 0 is not the coordinator"
  grep -q '^1: .*server 0 (node 1) ' "$log" || fail "$mode: rank 1 is not server 0"
  for w in $(seq 0 $((workers - 1))); do
    r=$((w + 2))
    grep -q "^$r: .*worker $w (node $r) " "$log" || fail "$mode: rank $r is not worker $w"
  done
  grep -q "^$((ranks - 1)): .*evaluator (node $((ranks - 1))) " "$log" ||
    fail "$mode: rank $((ranks - 1)) is not the evaluator"
  summary=$run/summary.json
  if [ ! -s "$summary" ]; then fail "$mode: no $summary"; dump "$log"; continue; fi
  got_mode=$(summary_value "$summary" mode)
  got_workers=$(summary_value "$summary" workers_count)
  acc=$(summary_value "$summary" final_val_acc)
  interrupted=$(summary_value "$summary" interrupted)
  [ "$got_mode" = "$mode" ] || fail "$mode: summary.json mode is '$got_mode'"
  [ "$got_workers" = "$workers" ] || fail "$mode: summary.json workers_count is '$got_workers', not $workers"
  [ "$interrupted" = false ] || fail "$mode: summary.json interrupted is '$interrupted'"
  # A finite number in [0, 1] (NaN and infinity are written as null).
  if ! echo "$acc" | grep -Eq '^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$' ||
     ! awk -v a="$acc" 'BEGIN { exit !(a >= 0 && a <= 1) }'; then
    fail "$mode: summary.json final_val_acc is '$acc', not a finite accuracy"
  fi
  say "$mode: mode=$got_mode workers_count=$got_workers final_val_acc=$acc"
done

# One rank more than the role table has: that rank fails at once (exit 2),
# naming SLURM_PROCID, and --kill-on-bad-exit ends the others.
log=$tmp/extra.log
t0=$SECONDS
run_cluster async $((ranks + 1)) "$tmp/run-extra" "$log"
rc=$?
say "extra rank: srun -n $((ranks + 1)) exited $rc in $((SECONDS - t0)) s"
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  fail "extra rank: srun exited $rc, wanted the rank error (exit 2)"; dump "$log"
elif ! grep -q "^$ranks: .*SLURM_PROCID=$ranks: .*outside a cluster of $ranks nodes" "$log"; then
  fail "extra rank: no error naming SLURM_PROCID=$ranks"; dump "$log"
fi

if [ "$failed" -ne 0 ]; then
  say "FAILED"
  exit 1
fi
say "PASSED"
exit 0
