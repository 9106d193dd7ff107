#!/usr/bin/env bash
# A throwaway single-node Slurm on this machine, for tests: munged, slurmctld and
# slurmd started by hand (no systemd), every file under one directory.
#
#   scripts/slurm_local.sh start DIR    # writes DIR/slurm.conf and a munge key, starts
#                                       # the daemons, waits for the node to be idle, and
#                                       # prints `export SLURM_CONF=DIR/slurm.conf`
#   scripts/slurm_local.sh status DIR   # which recorded daemons live; sinfo
#   scripts/slurm_local.sh stop DIR     # cancels the jobs, ends the recorded daemons
#
#   eval "$(scripts/slurm_local.sh start /tmp/slurm)" && srun -n 7 hostname
#
# Needs root and Debian's slurm-wlm and munge (slurmctld, slurmd, srun, munged).
# The node is this host (`hostname -s`) at 127.0.0.1 with SLURM_LOCAL_CPUS CPUs
# (default 64, more than the machine has, so a whole strata cluster of one task per
# role fits; SlurmdParameters=config_overrides keeps slurmd from draining the node
# for it). SlurmUser is root; no accounting, cgroups or task binding.
# Only the PIDs recorded in DIR/pids are ever signalled, and only while
# /proc/PID/cmdline still names DIR.
#
# Environment: SLURM_LOCAL_TIMEOUT (seconds for each wait, default 60),
# SLURM_LOCAL_CPUS (default 64), SLURM_LOCAL_PORT (first port tried for slurmctld,
# default 6817; the first two free ones from there are used).
set -euo pipefail

TIMEOUT=${SLURM_LOCAL_TIMEOUT:-60}
CPUS=${SLURM_LOCAL_CPUS:-64}
FIRST_PORT=${SLURM_LOCAL_PORT:-6817}

say() { echo "slurm_local: $*" >&2; }
die() { say "error: $*"; exit 1; }

usage() {
  echo "usage: $0 start|stop|status DIR" >&2
  exit 2
}

# Absolute path of DIR (created for start).
abs_dir() {
  local d=$1
  [ -d "$d" ] || return 1
  (cd "$d" && pwd -P)
}

# 0 if something listens on 127.0.0.1:PORT.
port_busy() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

free_port_from() {
  local p=$1 n=0
  while port_busy "$p"; do
    p=$((p + 1)); n=$((n + 1))
    [ "$n" -lt 200 ] || die "no free TCP port in $1..$p on 127.0.0.1"
  done
  echo "$p"
}

# A recorded PID is ours while it lives and its command line names DIR.
is_ours() {
  local pid=$1 dir=$2
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$dir/"
}

# alive PID: the process exists and is not a zombie.
alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

recorded_pid() {  # recorded_pid DIR NAME
  [ -f "$1/pids" ] || return 0
  awk -v n="$2" '$1 == n { print $2 }' "$1/pids" | tail -n 1
}

show_log() {  # show_log FILE
  if [ -s "$1" ]; then
    say "last lines of $1:"
    tail -n 20 "$1" | sed 's/^/  | /' >&2
  fi
}

# wait_for SECONDS WHAT COMMAND...: polls COMMAND every 0.5 s.
wait_for() {
  local secs=$1 what=$2; shift 2
  local deadline=$((SECONDS + secs))
  while ! "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      say "timed out after ${secs}s waiting for $what"
      return 1
    fi
    sleep 0.5
  done
}

# wait_daemon SECONDS WHAT PID DIR COMMAND...: as wait_for, but gives up at once
# when the daemon PID has exited.
wait_daemon() {
  local secs=$1 what=$2 pid=$3 dir=$4; shift 4
  local deadline=$((SECONDS + secs))
  while ! "$@" >/dev/null 2>&1; do
    # Alive, not its cmdline: right after the start the child may not have
    # exec'd the daemon yet (is_ours would not recognise it).
    if ! alive "$pid"; then
      say "the daemon (pid $pid) exited while waiting for $what"
      return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      say "timed out after ${secs}s waiting for $what"
      return 1
    fi
    sleep 0.5
  done
}

# munged refuses a socket in a directory some user cannot search (o+x), and
# checks every directory above it too.
check_searchable() {  # check_searchable DIR
  local d=$1 mode
  while [ -n "$d" ] && [ "$d" != / ]; do
    mode=$(stat -c %a "$d")
    if [ $(( 8#$mode & 1 )) -eq 0 ]; then
      die "munged needs every directory above its socket searchable by all, and $d is mode $mode (chmod o+x $d, or start in a directory under /tmp)"
    fi
    d=$(dirname "$d")
  done
}

check_tools() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (slurmd and SlurmUser=root)"
  local t missing=()
  for t in munged slurmctld slurmd srun sinfo scontrol squeue scancel; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  [ ${#missing[@]} -eq 0 ] ||
    die "missing ${missing[*]} (Debian: apt-get install slurm-wlm munge)"
}

node_idle() {  # node_idle CONF NODE
  local st
  st=$(SLURM_CONF=$1 timeout 10 sinfo -h -N -n "$2" -o %T 2>/dev/null) || return 1
  [ "$st" = idle ]
}

ctld_up() {  # ctld_up CONF
  SLURM_CONF=$1 timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'
}

not_ours() {  # not_ours PID DIR: the process ended (or is a zombie)
  ! is_ours "$1" "$2"
}

START_DIR=
on_start_exit() {
  local rc=$?
  if [ -n "$START_DIR" ]; then
    say "start failed; stopping what was started in $START_DIR"
    do_stop_dir "$START_DIR" || true
  fi
  exit "$rc"
}

do_start() {
  local dir_arg=$1
  check_tools
  mkdir -p "$dir_arg"
  local dir
  dir=$(abs_dir "$dir_arg") || die "cannot use $dir_arg"
  local name
  for name in munged slurmctld slurmd; do
    if is_ours "$(recorded_pid "$dir" "$name")" "$dir"; then
      die "$name from $dir is already running; run: $0 stop $dir"
    fi
  done
  rm -f "$dir/pids"

  # munged refuses a socket directory others cannot search, so DIR and the run
  # directory are 0755; the key stays in a 0700 directory.
  chmod 755 "$dir"
  mkdir -p "$dir/munge" "$dir/run" "$dir/log" "$dir/state" "$dir/spool"
  chmod 700 "$dir/munge" "$dir/state" "$dir/spool"
  chmod 755 "$dir/run" "$dir/log"
  check_searchable "$dir/run"
  local key=$dir/munge/munge.key
  if [ ! -s "$key" ]; then
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --keyfile="$key" >/dev/null 2>&1 || die "mungekey could not create $key"
    else
      dd if=/dev/urandom of="$key" bs=1 count=1024 status=none
    fi
  fi
  chown root:root "$key"
  chmod 600 "$key"

  local pid node ctld_port slurmd_port conf=$dir/slurm.conf sock=$dir/run/munge.socket
  node=$(hostname -s)
  ctld_port=$(free_port_from "$FIRST_PORT")
  slurmd_port=$(free_port_from $((ctld_port + 1)))
  cat >"$conf" <<EOF
# Written by scripts/slurm_local.sh start $dir
ClusterName=strata-local
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
KillWait=10
MinJobAge=30
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node CPUs=$CPUS State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
  export SLURM_CONF=$conf

  # On any failure from here on, end what was started.
  START_DIR=$dir
  trap on_start_exit EXIT

  setsid munged -F -S "$sock" --key-file="$key" --pid-file="$dir/run/munged.pid" \
    --seed-file="$dir/munge/munged.seed" --log-file="$dir/log/munged.log" \
    </dev/null >>"$dir/log/munged.out" 2>&1 &
  pid=$!
  echo "munged $pid" >>"$dir/pids"
  if ! wait_daemon "$TIMEOUT" "munged's socket $sock" "$pid" "$dir" test -S "$sock"; then
    show_log "$dir/log/munged.log"; show_log "$dir/log/munged.out"; exit 1
  fi

  setsid slurmctld -D -c -f "$conf" </dev/null >>"$dir/log/slurmctld.out" 2>&1 &
  pid=$!
  echo "slurmctld $pid" >>"$dir/pids"
  if ! wait_daemon "$TIMEOUT" "slurmctld on 127.0.0.1:$ctld_port (scontrol ping)" "$pid" "$dir" ctld_up "$conf"; then
    show_log "$dir/log/slurmctld.log"; show_log "$dir/log/slurmctld.out"; exit 1
  fi

  setsid slurmd -D -f "$conf" -N "$node" </dev/null >>"$dir/log/slurmd.out" 2>&1 &
  pid=$!
  echo "slurmd $pid" >>"$dir/pids"
  if ! wait_daemon "$TIMEOUT" "node $node to be idle in sinfo" "$pid" "$dir" node_idle "$conf" "$node"; then
    SLURM_CONF=$conf timeout 10 scontrol show node "$node" >&2 || true
    show_log "$dir/log/slurmd.log"; show_log "$dir/log/slurmd.out"
    show_log "$dir/log/slurmctld.log"; exit 1
  fi
  START_DIR=
  trap - EXIT
  say "node $node idle with $CPUS CPUs; slurmctld port $ctld_port, slurmd port $slurmd_port; logs in $dir/log"
  echo "export SLURM_CONF=$conf"
}

# Ends one recorded daemon: SIGTERM, a bounded wait, then SIGKILL.
stop_one() {  # stop_one DIR NAME
  local dir=$1 name=$2 pid
  pid=$(recorded_pid "$dir" "$name")
  [ -n "$pid" ] || return 0
  if ! is_ours "$pid" "$dir"; then
    say "$name (pid $pid) not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_for 15 "$name (pid $pid) to exit after SIGTERM" not_ours "$pid" "$dir"; then
    if is_ours "$pid" "$dir"; then
      say "sending SIGKILL to $name (pid $pid)"
      kill -KILL "$pid" 2>/dev/null || true
      wait_for 5 "$name (pid $pid) to exit after SIGKILL" not_ours "$pid" "$dir" || true
    fi
  fi
  say "stopped $name (pid $pid)"
}

no_jobs() {  # no_jobs CONF
  local out
  out=$(SLURM_CONF=$1 timeout 10 squeue -h -o %A 2>/dev/null) || return 1
  [ -z "$out" ]
}

do_stop_dir() {
  local dir=$1 conf=$1/slurm.conf jobs
  [ -f "$dir/pids" ] || { say "nothing recorded in $dir/pids"; return 0; }
  # Jobs first, while slurmctld and slurmd can still end their steps.
  if [ -f "$conf" ] && is_ours "$(recorded_pid "$dir" slurmctld)" "$dir"; then
    jobs=$(SLURM_CONF=$conf timeout 10 squeue -h -o %A 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      jobs=${jobs//$'\n'/ }
      say "cancelling jobs $jobs"
      # shellcheck disable=SC2086
      SLURM_CONF=$conf timeout 10 scancel $jobs 2>/dev/null || true
      wait_for 20 "jobs $jobs to leave squeue" no_jobs "$conf" || true
    fi
  fi
  stop_one "$dir" slurmd
  stop_one "$dir" slurmctld
  stop_one "$dir" munged
}

do_stop() {
  local dir
  dir=$(abs_dir "$1") || die "no directory $1"
  do_stop_dir "$dir"
}

do_status() {
  local dir name pid rc=0
  dir=$(abs_dir "$1") || die "no directory $1"
  [ -f "$dir/pids" ] || { echo "no daemons recorded in $dir/pids"; return 1; }
  for name in munged slurmctld slurmd; do
    pid=$(recorded_pid "$dir" "$name")
    if is_ours "$pid" "$dir"; then
      echo "$name: running (pid $pid)"
    else
      echo "$name: not running${pid:+ (recorded pid $pid)}"
      rc=1
    fi
  done
  if is_ours "$(recorded_pid "$dir" slurmctld)" "$dir"; then
    SLURM_CONF=$dir/slurm.conf timeout 10 sinfo -N -l || rc=1
    SLURM_CONF=$dir/slurm.conf timeout 10 squeue || rc=1
  fi
  echo "export SLURM_CONF=$dir/slurm.conf"
  return $rc
}

[ $# -eq 2 ] || usage
case $1 in
  start) do_start "$2" ;;
  stop) do_stop "$2" ;;
  status) do_status "$2" ;;
  *) usage ;;
esac
