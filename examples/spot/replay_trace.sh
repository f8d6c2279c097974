#!/usr/bin/env bash
# Replays a trace of spot host losses and returns against real multi-host jobs on this machine's network-namespace
# hosts (scripts/netns_cluster.sh; needs root), twice: an elastic job (`dtrain launch --nnodes MIN:N`: shrinks on a
# loss, grows on a return) and the restart-everything-on-the-same-hosts baseline (`--nnodes N:N --wait-for-hosts`:
# every loss stops the whole job until the host is back). Prints each one's `dtrain report` (attempts, time to
# recover, goodput, cost per 1M samples) and its final weights' distance from an uninterrupted run.
#
#   examples/spot/replay_trace.sh TRACE [OUT_DIR]
#
# TRACE: one event per line, "SECONDS HOST EVENT" (seconds after the job's start; HOST 1..N; # comments):
#   kill    the host is reclaimed without notice: its processes die and its network goes
#   notice  its metadata endpoint (169.254.169.254:8169 inside its namespace only, as on a cloud VM) gives a
#           termination notice; NOTICE_S seconds later (default 20) the host goes as with kill
#   return  a fresh host answers at the same address again
# Environment: HOSTS (N, default 3), MIN (default 2), EPOCHS (default 30), SPOT and ON_DEMAND (prices per
# rank-hour, default 1 and 3), NOTICE_S. Example trace: examples/spot/trace_example.txt.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
trace=${1:?usage: $0 TRACE [OUT_DIR]}
out=${2:-$(mktemp -d /tmp/dtrain-spot-trace.XXXXXX)}
n=${HOSTS:-3} min=${MIN:-2} epochs=${EPOCHS:-30} notice_s=${NOTICE_S:-20}
dtrain=${DTRAIN:-$root/build/dtrain}
[[ -x $dtrain ]] || dtrain=$root/build-cpu/dtrain
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"

"$root/scripts/netns_cluster.sh" up "$n" >/dev/null
servers=()
cleanup() {
  for p in "${servers[@]}"; do kill "$p" 2>/dev/null || true; done
  "$root/scripts/netns_cluster.sh" down >/dev/null 2>&1 || true
}
trap cleanup EXIT

hostfile=$out/hosts
: >"$hostfile"
for ((i = 1; i <= n; i++)); do
  echo "10.77.0.$i slots=1" >>"$hostfile"
  mkdir -p "$out/imds$i"
  ip -n "dtns$i" addr add 169.254.169.254/32 dev lo 2>/dev/null || true
  ip netns exec "dtns$i" python3 -m http.server 8169 --bind 169.254.169.254 --directory "$out/imds$i" \
    </dev/null >/dev/null 2>&1 &
  servers+=($!)
done

# A host goes: every process in its namespace but its metadata server dies, and its link goes down.
host_gone() {
  local i=$1 p
  ip -n "dtns$i" link set eth0 down
  for p in $(ip netns pids "dtns$i"); do [[ " ${servers[*]} " == *" $p "* ]] || kill -9 "$p" 2>/dev/null || true; done
}
host_back() {
  rm -f "$out/imds$1"/*
  ip -n "dtns$1" link set eth0 up
}

# Replays the trace in the background, relative to now.
replay() {
  local t0 at host event
  t0=$(date +%s.%N)
  while read -r at host event; do
    [[ -z $at || $at == \#* ]] && continue
    sleep "$(awk -v at="$at" -v t0="$t0" -v now="$(date +%s.%N)" 'BEGIN { d = at - (now - t0); print (d > 0 ? d : 0) }')"
    echo "replay_trace: t=$at host $host $event" >&2
    case $event in
      kill) host_gone "$host" ;;
      notice)
        echo '{"action":"terminate"}' >"$out/imds$host/instance-action"
        (sleep "$notice_s"; host_gone "$host") &
        ;;
      return) host_back "$host" ;;
      *) echo "replay_trace: unknown event '$event'" >&2 ;;
    esac
  done <"$trace"
  wait
}

mpi_args=()
for a in --mca plm_rsh_agent "$root/scripts/netns_rsh.sh" --mca oob_tcp_if_include 10.77.0.0/24 \
  --mca btl_tcp_if_include 10.77.0.0/24 --mca pml ob1 --mca btl tcp,self; do
  mpi_args+=("--mpirun-arg=$a")
done
run() {  # run DIR FLAGS...
  local dir=$1
  shift
  "$dtrain" launch "$@" "${mpi_args[@]}" "$root/configs/fashion_mnist_mlp_ci.yaml" --set train.device=cpu \
    --set train.epochs="$epochs" --set train.eval=false --set optim.name=sgd --set optim.lr=0.05 \
    --set model.mlp.activation=gelu --set checkpoint.every_steps=10 --set checkpoint.async=false \
    --set checkpoint.spot_notice_url=http://169.254.169.254:8169/instance-action --set checkpoint.spot_poll_s=1 \
    --set run.dir="$dir" >"$dir.log" 2>&1
}

hosts_all=$(seq -s, -f '10.77.0.%g:1' 1 "$n")
echo "replay_trace: uninterrupted reference on $n hosts" >&2
run "$out/ref" --hosts "$hosts_all"
for job in elastic baseline; do
  for ((i = 1; i <= n; i++)); do host_back "$i"; done
  echo "replay_trace: $job job with the trace" >&2
  replay &
  replayer=$!
  if [[ $job == elastic ]]; then
    run "$out/$job" --nnodes "$min:$n" --hostfile "$hostfile" --rejoin-after 2 --grace-seconds 3 || true
  else
    run "$out/$job" --nnodes "$n:$n" --hostfile "$hostfile" --rejoin-after 2 --grace-seconds 3 \
      --wait-for-hosts 3600 || true
  fi
  kill "$replayer" 2>/dev/null || true
  wait "$replayer" 2>/dev/null || true
done

for job in elastic baseline; do
  echo "=== $job (log: $out/$job.log)"
  "$dtrain" report "$out/$job" --price-spot "${SPOT:-1}" --price-on-demand "${ON_DEMAND:-3}" |
    sed -n '/^elastic attempts/,$p'
  python3 - "$out/ref/final.safetensors" "$out/$job/final.safetensors" <<'EOF'
import array, json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); out = {}
    for k, v in h.items():
        if k != '__metadata__':
            a = array.array('f'); a.frombytes(b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]); out[k] = a
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
print('  weights        max |run - uninterrupted| = %.3g' % max(abs(x - y) for k in a for x, y in zip(a[k], b[k])))
EOF
done
