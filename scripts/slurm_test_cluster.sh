#!/usr/bin/env bash
# A real one-machine Slurm cluster for tests and for trying the job scripts of examples/slurm:
# munged, slurmctld and slurmd with a minimal slurm.conf (no cgroups, no accounting), everything
# (config, keys, state, spool, logs, pid files) inside DIR, nothing in /etc, no systemd. Works as
# root and as a normal user (the daemons then run as that user). The node is idle ~0.2 s after start.
#
# SLURM_TEST_NODES=N (default 1) at start: N nodes n1..nN on this machine, one `slurmd -N nK` each
# (Slurm's multiple-slurmd support: own NodeName, own Port, all NodeAddr=127.0.0.1, pid file
# DIR/slurmd-nK.pid, log DIR/log/slurmd-nK.log), so jobs span nodes (`sbatch -N3`) and a node can be
# lost on its own (`scontrol update nodename=n3 state=down`, or its slurmd ended). N=1 keeps the
# single node named after this host (pid file DIR/slurmd.pid, log DIR/log/slurmd.log).
#
#   scripts/slurm_test_cluster.sh start DIR [CPUS]  # prints "SLURM_CONF=DIR/slurm.conf" and writes DIR/env
#                                                   # (SLURM_CONF=...) for `source`; CPUS (default 8) may
#                                                   # exceed the real core count (config_overrides)
#   scripts/slurm_test_cluster.sh stop DIR          # scancel, end this cluster's slurmstepd and job
#                                                   # processes, then SIGTERM slurmd, slurmctld, munged by
#                                                   # pid (SIGKILL after 5 s)
#
# SLURM_TEST_OWNER=PID at start: the cluster stops itself (a detached watcher runs `stop DIR`) within a
# second of process PID ending, so a test killed by its timeout leaves no daemons or job processes behind
# (the daemons and the jobs' ranks are not its children: they would outlive it and take the CPU).
#
# Every client command (sbatch, srun, squeue, scontrol) must see SLURM_CONF=DIR/slurm.conf; jobs
# inherit it. Ports are picked free at start, so several clusters can run side by side.
# Exit codes: 0 done; 77 the slurm/munge binaries are missing (install: scripts/install_deps.sh);
# 1 failure (the tail of the failing daemon's log goes to stderr); 2 usage.
# Recipe and measurements: shared/notes/slurm-test-cluster.md, docs/slurm.md.
set -euo pipefail

usage() { echo "usage: $0 start DIR [CPUS] | stop DIR" >&2; exit 2; }
[[ $# -ge 2 && $# -le 3 ]] || usage
cmd=$1
dir=$2
cpus=${3:-8}
nodes=${SLURM_TEST_NODES:-1}
[[ $nodes =~ ^[1-9][0-9]*$ ]] || { echo "slurm_test_cluster: SLURM_TEST_NODES=$nodes: expected a positive integer" >&2; exit 2; }
export PATH="$PATH:/usr/sbin:/sbin"

# stop_pids GRACE PID...: SIGTERM, wait up to GRACE s, then SIGKILL what is left.
stop_pids() {
  local grace=$1 alive pid
  shift
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  local deadline=$((SECONDS + grace))
  while :; do
    alive=()
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
    ((${#alive[@]})) || return 0
    ((SECONDS < deadline)) || break
    sleep 0.05
  done
  kill -KILL "${alive[@]}" 2>/dev/null || true
}

stop() {
  [[ -d $dir ]] || return 0
  dir=$(cd "$dir" && pwd)
  if [[ -f $dir/slurm.conf && -f $dir/slurmctld.pid ]] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
    SLURM_CONF=$dir/slurm.conf timeout 5 scancel --full --signal=KILL --user="$(id -un)" >/dev/null 2>&1 || true
  fi
  # Leftover slurmstepd and job processes of this cluster (never another cluster's, never this script's
  # ancestors): slurmstepd's environment holds SLURM_CONF=DIR/slurm.conf (slurmd passes its own on), a job
  # process's holds it (inherited from the submitter) and SLURM_JOB_ID. Matched on that, ended by pid.
  local p e keep=" " steps=()
  for ((p = $$; p > 1; p = $(awk '/^PPid:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 1))); do keep+="$p "; done
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/} && p=${p%/environ}
    [[ $keep != *" $p "* ]] && grep -qsxzF "SLURM_CONF=$dir/slurm.conf" "$e" || continue
    if [[ $(cat "/proc/$p/comm" 2>/dev/null) == slurmstepd ]] || grep -qsz '^SLURM_JOB_ID=' "$e"; then steps+=("$p"); fi
  done
  local pids=()
  local f
  for f in "$dir"/slurmd.pid "$dir"/slurmd-*.pid "$dir"/slurmctld.pid; do
    [[ -f $f ]] && pids+=("$(cat "$f")")
  done
  stop_pids 5 "${steps[@]}" "${pids[@]}"
  rm -f "$dir"/slurmd.pid "$dir"/slurmd-*.pid "$dir/slurmctld.pid"
  if [[ -f $dir/munge/munged.pid ]]; then
    stop_pids 5 "$(cat "$dir/munge/munged.pid")"
    rm -f "$dir/munge/munged.pid"
  fi
}

fail() {  # fail MESSAGE [LOG]: stop what started, show the log's tail
  echo "slurm_test_cluster: $1" >&2
  [[ $# -ge 2 && -f $2 ]] && tail -n 20 "$2" >&2
  stop
  exit 1
}

# wait_for SECONDS PIDFILE LOG COMMAND...: polls COMMAND every 0.05 s while the daemon lives. The
# daemons fork first and write their pid file only after their own start-up (slurmd: after probing
# the hardware, which takes seconds on a loaded machine), so a pid file not there yet means "still
# starting"; one whose process is gone means it died.
wait_for() {
  local secs=$1 pidfile=$2 log=$3 pid
  shift 3
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    pid=$(cat "$pidfile" 2>/dev/null || true)
    [[ -z $pid ]] || kill -0 "$pid" 2>/dev/null || fail "$(basename "$pidfile" .pid) is not running" "$log"
    ((SECONDS < deadline)) || fail "$(basename "$pidfile" .pid) not ready after ${secs}s" "$log"
    sleep 0.05
  done
}

start() {
  local b
  for b in munged mungekey munge unmunge slurmctld slurmd sbatch srun scontrol sinfo; do
    command -v "$b" >/dev/null || {
      echo "slurm_test_cluster: '$b' not found (apt-get install slurm-wlm munge, or scripts/install_deps.sh)" >&2
      exit 77
    }
  done
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [[ -f $dir/slurmctld.pid ]] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null &&
    { echo "slurm_test_cluster: a cluster already runs in $dir" >&2; exit 1; }
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  chmod 0700 "$dir/munge"

  # 1. munged with its own key and socket.
  local sock=$dir/munge/munge.socket
  rm -f "$dir/munge/munge.key"
  mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null 2>&1 ||
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none  # mungekey < 0.5.14
  chmod 0600 "$dir/munge/munge.key"
  munged --key-file="$dir/munge/munge.key" --socket="$sock" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" --origin=127.0.0.1 --force \
    </dev/null >"$dir/log/munged.out" 2>&1 || fail "munged failed to start" "$dir/log/munged.log"
  local deadline=$((SECONDS + 10))
  until munge -n -S "$sock" 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "munged not answering on $sock" "$dir/log/munged.log"
    sleep 0.05
  done

  # 2. slurm.conf: this host as controller and node(s), free ports, the running user as SlurmUser.
  local host user ctld_port slurmd_port mem ports
  host=$(hostname -s)
  user=$(id -un)
  read -r ctld_port slurmd_port ports < <(python3 "$(dirname "${BASH_SOURCE[0]}")/free_ports.py" $((2 + nodes)) |
    sed 's/ /,/3g')
  mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2))
  local names node_lines pidfile=$dir/slurmd.pid logfile=$dir/log/slurmd.log tmpfs=/tmp
  if ((nodes == 1)); then
    names=$host
    node_lines="NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN"
  else
    names="n[1-$nodes]"
    pidfile=$dir/slurmd-%n.pid
    logfile=$dir/log/slurmd-%n.log
    tmpfs=$dir/tmp/%n  # srun --mpi=pmix makes its per-step directory there: one path per node, not /tmp for all
    local k port
    IFS=, read -ra port <<<"$ports"
    for ((k = 1; k <= nodes; k++)); do
      node_lines+="NodeName=n$k NodeHostname=$host NodeAddr=127.0.0.1 Port=${port[k - 1]} CPUs=$cpus"
      node_lines+=" RealMemory=$((mem / nodes)) State=UNKNOWN"$'\n'
      mkdir -p "$dir/tmp/n$k"
    done
  fi
  : >"$dir/plugstack.conf"
  cat >"$dir/slurm.conf" <<CONF
ClusterName=dtraintest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$tmpfs
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$pidfile
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$logfile
PlugStackConfig=$dir/plugstack.conf
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=1,bf_interval=1
SlurmdParameters=config_overrides
MailProg=/bin/true
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=300
$node_lines
PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF=$dir/slurm.conf

  # 3. slurmctld (fresh state: -c), then slurmd; the node must reach idle.
  slurmctld -c -f "$SLURM_CONF" </dev/null >"$dir/log/slurmctld.out" 2>&1 || fail "slurmctld failed to start" "$dir/log/slurmctld.log"
  wait_for 20 "$dir/slurmctld.pid" "$dir/log/slurmctld.log" bash -c 'scontrol ping | grep -q "is UP"'
  if ((nodes == 1)); then
    slurmd -f "$SLURM_CONF" </dev/null >"$dir/log/slurmd.out" 2>&1 || fail "slurmd failed to start" "$dir/log/slurmd.log"
    wait_for 20 "$dir/slurmd.pid" "$dir/log/slurmd.log" bash -c '[[ $(sinfo -h -N -o %T) == idle ]]'
  else
    for ((k = 1; k <= nodes; k++)); do
      slurmd -N "n$k" -f "$SLURM_CONF" </dev/null >"$dir/log/slurmd-n$k.out" 2>&1 ||
        fail "slurmd -N n$k failed to start" "$dir/log/slurmd-n$k.log"
    done
    for ((k = 1; k <= nodes; k++)); do
      wait_for 20 "$dir/slurmd-n$k.pid" "$dir/log/slurmd-n$k.log" bash -c "[[ \$(sinfo -h -N -n n$k -o %T) == idle ]]"
    done
  fi

  echo "SLURM_CONF=$SLURM_CONF" >"$dir/env"
  echo "SLURM_CONF=$SLURM_CONF"
  [[ -z ${SLURM_TEST_OWNER:-} ]] || watch_owner "$SLURM_TEST_OWNER"
}

# watch_owner PID: a detached watcher (own session, no inherited descriptors: the caller's pipe must see
# end-of-file when start returns) that stops the cluster once PID has ended; it exits by itself once the
# cluster has been stopped otherwise (slurmctld's pid file gone).
watch_owner() {
  [[ $1 =~ ^[1-9][0-9]*$ ]] || fail "SLURM_TEST_OWNER=$1: expected a process id"
  kill -0 "$1" 2>/dev/null || fail "SLURM_TEST_OWNER=$1: no such process"
  env -u SLURM_CONF setsid bash -c 'while kill -0 "$1" 2>/dev/null && [[ -f $3/slurmctld.pid ]]; do sleep 1; done
    [[ -f $3/slurmctld.pid ]] && exec "$2" stop "$3"' watch "$1" "$(realpath "$0")" "$dir" \
    </dev/null >>"$dir/log/watch.log" 2>&1 &
}

case $cmd in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
