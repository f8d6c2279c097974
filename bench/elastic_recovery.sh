#!/usr/bin/env bash
# Time to recover of an elastic job, each way (issue 21: GPT-2 124M on 2 GPUs -> one lost -> 1 -> back -> 2), with
# the breakdown: launcher noticing -> next attempt started -> worker ready (its start record: process start, MPI,
# NCCL, data, model) -> checkpoint restored -> first step completed.
#
#   sudo bench/elastic_recovery.sh [CONFIG] [OUT_DIR] [--set k=v ...]
#
# Two "hosts" are network namespaces of this machine (scripts/netns_cluster.sh; needs root), one GPU each: the
# worker wrapper sets CUDA_VISIBLE_DEVICES from the namespace's hostname (dtns1 -> GPU 0, dtns2 -> GPU 1), so NCCL
# sees two hosts and talks over sockets (slower steps than NVLink; the recovery path is the real one). Once the
# job has passed KILL_AT_STEP (default 200; a checkpoint every CKPT_EVERY, default 100, steps), every process of
# host 2 is killed; the launcher continues on host 1 and, --rejoin-after REJOIN (default 20) s later, probes host 2
# (it answers: its network stays up), asks for a checkpoint and grows back to two. CPU smoke run:
#   sudo bench/elastic_recovery.sh configs/fashion_mnist_mlp_ci.yaml /tmp/er --set train.device=cpu \
#     --set train.epochs=20 --set train.eval=false
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
config=${1:-$root/configs/gpt2_124m.yaml}
out=${2:-$(mktemp -d /tmp/dtrain-elastic-recovery.XXXXXX)}
shift $(($# > 2 ? 2 : $#))
dtrain=${DTRAIN:-$root/build/dtrain}
[[ -x $dtrain ]] || dtrain=$root/build-cpu/dtrain
kill_at=${KILL_AT_STEP:-200} every=${CKPT_EVERY:-100} rejoin=${REJOIN:-20}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
mkdir -p "$out"
"$root/scripts/netns_cluster.sh" up 2 >/dev/null
trap '"$root/scripts/netns_cluster.sh" down >/dev/null 2>&1 || true' EXIT

cat >"$out/worker.sh" <<EOF
#!/bin/sh
export CUDA_VISIBLE_DEVICES=\$(( \$(hostname | tr -dc 0-9) - 1 ))
exec $dtrain "\$@"
EOF
chmod +x "$out/worker.sh"

mpi=()
for a in --mca plm_rsh_agent "$root/scripts/netns_rsh.sh" --mca oob_tcp_if_include 10.77.0.0/24 \
  --mca btl_tcp_if_include 10.77.0.0/24 --mca pml ob1 --mca btl tcp,self -x NCCL_SOCKET_IFNAME=eth0; do
  mpi+=("--mpirun-arg=$a")
done
DTRAIN_WORKER_BIN=$out/worker.sh "$dtrain" launch --nnodes 1:2 --hosts 10.77.0.1:1,10.77.0.2:1 \
  --rejoin-after "$rejoin" --grace-seconds 10 "${mpi[@]}" "$config" --set checkpoint.every_steps="$every" \
  --set checkpoint.keep_last=2 --set train.log_every=10 --set run.dir="$out/run" "$@" >"$out/launch.log" 2>&1 &
launcher=$!

# Kill host 2 once the job is past KILL_AT_STEP.
until grep -q "\"step\":$kill_at[,}]" "$out/run/metrics.jsonl" 2>/dev/null ||
  { grep -o '"step":[0-9]*' "$out/run/metrics.jsonl" 2>/dev/null | tail -1 | awk -F: -v k="$kill_at" '$2 >= k {f=1} END {exit !f}'; }; do
  kill -0 "$launcher" 2>/dev/null || { echo "the job ended before step $kill_at: see $out/launch.log" >&2; exit 1; }
  sleep 0.5
done
echo "elastic_recovery: killing every process of host 2 (dtns2) at $(date +%T)" >&2
for p in $(ip netns pids dtns2); do kill -9 "$p" 2>/dev/null || true; done
wait "$launcher" || echo "elastic_recovery: the launcher exited $?" >&2

"$dtrain" report "$out/run" | sed -n '/^elastic attempts/,$p'
python3 - "$out/run" <<'EOF'
import json, sys
d = sys.argv[1]
att = [json.loads(l) for l in open(d + '/elastic.jsonl') if l.strip()]
starts, restores, firsts, cur = {}, {}, {}, None
pending_restore = None
for l in open(d + '/metrics.jsonl'):
    try: r = json.loads(l)
    except ValueError: continue
    k = r.get('kind')
    if k == 'restore': pending_restore = r
    elif k == 'start':
        cur = r.get('restart', 0); starts[cur] = r
        if pending_restore: restores[cur] = pending_restore
        pending_restore = None
    elif k == 'first_step' and cur is not None: firsts[cur] = r
print('breakdown (s): launcher noticed -> next attempt started (stop or drain, mpirun exit) -> worker start record'
      ' (process, MPI, NCCL, data, model, restore) -> first step completed')
for prev, a in zip(att, att[1:]):
    n = a['attempt']
    if n not in starts or n not in firsts: continue
    s, f = starts[n]['time'], firsts[n]['time']
    rs = restores.get(n, {}).get('restore_s', float('nan'))
    print('  attempt %d (%s -> world %d): %.1f total = %.1f to the next start + %.1f worker start (restore %.2f) + %.1f first step'
          % (n + 1, prev['reason'], a['world'], f - prev['noticed'], a['start'] - prev['noticed'], s - a['start'], rs,
             f - s))
EOF
