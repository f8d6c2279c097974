#!/usr/bin/env bash
# Spot instances, simulated on one machine: runs a training job, reclaims it N times at random moments
# (SIGKILL: the machine vanishes with every process; SIGTERM: a shutdown with notice, the ranks checkpoint
# and exit 75), restarts it each time with the SAME command, and at the end compares its final.safetensors
# with an uninterrupted run of that command. Prints the comparison; exits 0 when they are bit-identical.
#
#   examples/spot/simulate_preemptions.sh [options] CONFIG [--set key=value ...]
#     --preemptions N    reclaims before the run may finish (default 3)
#     --signal S         KILL, TERM, random (each reclaim picks one; the default), or a list used in
#                        turn, e.g. TERM,KILL,KILL
#     --max-delay SECS   each reclaim comes a random 0.5..SECS s after training (re)starts (default 8)
#     --nproc N          ranks, `dtrain launch --nproc-per-node N` (default 2)
#     --dir DIR          work directory, kept: DIR/{reference,spot}/ hold the runs, DIR/*.log their logs (default: a
#                        new one under /tmp, removed when the runs end identical, kept for a look otherwise)
#     --seed N           seed of the random moments and signals (default: random; printed, for replays)
#     --dtrain BIN       dtrain binary (default $DTRAIN, else `dtrain` in PATH, else build/dtrain)
#
# Both runs get --set run.dir=DIR/<run> --set checkpoint.url=DIR/<run>/checkpoints (local checkpoints stand
# in for S3, and the spot run's directory for the replacement machine's view of the bucket) and
# checkpoint.spot_notice_url="" (no metadata endpoint here). Example:
#   examples/spot/simulate_preemptions.sh examples/spot/fashion_mnist_spot.yaml \
#     --set train.device=cpu --set train.epochs=1 --set checkpoint.every_steps=20
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

preemptions=3 signal=random max_delay=8 nproc=2 dir="" seed=$((RANDOM * 32768 + RANDOM)) dtrain=${DTRAIN:-}
while [[ $# -gt 0 && $1 == --* ]]; do
  [[ $# -ge 2 ]] || usage
  case $1 in
    --preemptions) preemptions=$2 ;;
    --signal) signal=$2 ;;
    --max-delay) max_delay=$2 ;;
    --nproc) nproc=$2 ;;
    --dir) dir=$2 ;;
    --seed) seed=$2 ;;
    --dtrain) dtrain=$2 ;;
    *) usage ;;
  esac
  shift 2
done
[[ $# -ge 1 ]] || usage
[[ $signal =~ ^(KILL|TERM|random)(,(KILL|TERM|random))*$ ]] || usage
IFS=, read -r -a signals <<<"$signal"
if [[ -z $dtrain ]]; then
  dtrain=$(command -v dtrain || echo "$(cd "$(dirname "$0")/../.." && pwd)/build/dtrain")
fi
[[ -x $dtrain ]] || { echo "simulate_preemptions: no dtrain binary at '$dtrain' (--dtrain BIN)" >&2; exit 2; }
own_dir=0
[[ -n $dir ]] || { dir=$(mktemp -d /tmp/dtrain_spot_XXXXXX) && own_dir=1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
RANDOM=$seed
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
echo "simulate_preemptions: $preemptions reclaims (signal $signal, within ${max_delay}s), seed $seed, in $dir"

# The job's command for run directory DIR/$run: the same every time it is started.
job_cmd() {
  cmd=("$dtrain" launch --nproc-per-node "$nproc" "$@")
  cmd+=(--set "run.dir=$dir/$run" --set "checkpoint.url=$dir/$run/checkpoints" --set "checkpoint.spot_notice_url=\"\"")
}

# Every descendant of pid $1.
descendants() {
  local c
  for c in $(pgrep -P "$1" || true); do
    echo "$c"
    descendants "$c"
  done
}

fail_with_log() {  # fail_with_log MESSAGE LOG
  echo "simulate_preemptions: $1:" >&2
  tail -n 20 "$2" >&2
  echo "simulate_preemptions: the runs and their logs are in $dir" >&2
  exit 1
}

# 1. The uninterrupted reference.
run=reference
job_cmd "$@"
"${cmd[@]}" >"$dir/reference.log" 2>&1 || fail_with_log "the reference run failed" "$dir/reference.log"

# 2. The spot run: started, reclaimed at a random moment, started again with the same command.
run=spot
job_cmd "$@"
reclaims=0
attempt=0
while :; do
  attempt=$((attempt + 1))
  log=$dir/spot.$attempt.log
  "${cmd[@]}" >"$log" 2>&1 &
  pid=$!
  sig=""
  if ((reclaims < preemptions)); then
    # A random moment 0.5 .. max_delay s after this attempt's first progress line.
    delay_ms=$((500 + RANDOM % (max_delay * 1000 - 500 + 1)))
    sig=${signals[reclaims % ${#signals[@]}]}
    if [[ $sig == random ]]; then sig=$( ((RANDOM % 2)) && echo KILL || echo TERM); fi
    until grep -q "step [0-9]*/" "$log" 2>/dev/null || ! kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    sleep "$((delay_ms / 1000)).$(printf %03d $((delay_ms % 1000)))"
    if ! kill -0 "$pid" 2>/dev/null; then
      sig=""  # it ended by itself first
    elif [[ $sig == KILL ]]; then
      # The machine vanishes: every process of the job at once (frozen first, so that none reacts).
      procs=("$pid" $(descendants "$pid"))
      kill -STOP "${procs[@]}" 2>/dev/null || true
      kill -KILL "${procs[@]}" 2>/dev/null || true
    else
      kill -TERM "$pid"  # a shutdown with notice: the launcher lets every rank checkpoint and exit 75
    fi
  fi
  rc=0
  { wait "$pid"; } 2>/dev/null || rc=$?  # (no "Killed" line from bash: the exit code says it)
  # Finished: exit 0, or training was done when the signal came (the launcher then reports the signal).
  if [[ -z $sig || $rc -eq 0 ]] || grep -q "\] done: [0-9]* steps" "$log"; then
    [[ $rc -eq 0 || -n $sig ]] || fail_with_log "attempt $attempt failed (exit $rc)" "$log"
    echo "attempt $attempt: finished${sig:+ (before SIG$sig)}"
    break
  fi
  [[ $sig == TERM && $rc -ne 75 ]] && fail_with_log "SIGTERM must end in a checkpoint and exit 75, got $rc" "$log"
  reclaims=$((reclaims + 1))
  step=$(grep -o "step [0-9]*/" "$log" | tail -n 1 | tr -dc 0-9)
  echo "attempt $attempt: SIG$sig ${delay_ms} ms after the first progress line (last logged step ${step:-none}):" \
    "exit $rc; restarting with the same command"
done

# 3. The comparison.
ref=$dir/reference/final.safetensors spot=$dir/spot/final.safetensors
echo "reclaims: $reclaims of $preemptions; attempts: $attempt"
if cmp -s "$ref" "$spot"; then
  echo "final.safetensors: IDENTICAL to the uninterrupted run ($(stat -c %s "$spot") bytes)"
  if ((own_dir)); then rm -rf "$dir"; fi  # its own temporary directory (--dir DIR keeps the runs)
  exit 0
fi
echo "final.safetensors: DIFFERENT from the uninterrupted run: $(cmp "$ref" "$spot" 2>&1 || true)"
echo "the runs and their logs are in $dir"
exit 1
