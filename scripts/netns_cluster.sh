#!/usr/bin/env bash
# A virtual cluster on one machine: N "hosts" made of Linux network namespaces, so that traffic
# between them really crosses network interfaces (veth pairs through a bridge), for multi-node
# tests of `dtrain launch` without a second machine.
#
#   scripts/netns_cluster.sh up [N]   # N hosts (default 2); idempotent, converges to exactly N
#   scripts/netns_cluster.sh down     # remove everything `up` made; idempotent
#   scripts/netns_cluster.sh status   # list the hosts and their addresses
#
# Layout (all names fixed; addressing by IP, no /etc/hosts entries):
#   dtns1..dtnsN  the hosts: interface eth0 = 10.77.0.<i>/24, loopback up
#   dtns0         the switch: bridge br0 holding the other end of every host's veth pair
#   dtns-root     a veth in the root namespace, 10.77.0.254/24, also on the switch: processes of the
#                 root namespace (mpirun) reach the hosts through it
# The bridge lives in its own namespace so that the root namespace's firewall (e.g. Docker's
# FORWARD policy DROP applied to bridged traffic through br_netfilter) never sees host-to-host
# packets.
#
# Run commands on a host with `ip netns exec dtns1 CMD`; scripts/netns_rsh.sh is the matching
# launch agent for Open MPI (mpirun --mca plm_rsh_agent scripts/netns_rsh.sh).
#
# Exit codes: 0 done; 77 not possible here (not root, no `ip`, namespaces or veth not permitted);
# 1 other failure; 2 usage.
set -euo pipefail

readonly SUBNET=10.77.0
readonly PREFIX=dtns
readonly SWITCH=${PREFIX}0
readonly UPLINK=dtns-root
readonly UPLINK_ADDR=${SUBNET}.254
readonly MAX_HOSTS=250
readonly LOCK=/tmp/dtrain-netns-cluster.lock

die() { echo "netns_cluster: $*" >&2; exit 1; }
cannot() { echo "netns_cluster: $*" >&2; exit 77; }

usage() {
  echo "usage: $0 up [N] | down | status   (N hosts dtns1..dtnsN at ${SUBNET}.1..N, default 2)" >&2
  exit 2
}

have_ns() { [[ -e /run/netns/$1 ]]; }

# Namespaces of this cluster present now, switch included.
cluster_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+$" | sort -V || true; }

# Adds namespace $1 unless present; "not permitted" is reported as exit 77.
add_ns() {
  have_ns "$1" && return 0
  local err
  if ! err=$(ip netns add "$1" 2>&1); then
    cannot "'ip netns add $1' is not permitted here: ${err} (in a container, run it with --privileged or --cap-add SYS_ADMIN,NET_ADMIN)"
  fi
}

cmd_up() {
  local n=$1
  add_ns "$SWITCH"
  ip -n "$SWITCH" link set lo up
  if ! ip -n "$SWITCH" link show br0 >/dev/null 2>&1; then
    ip -n "$SWITCH" link add br0 type bridge || cannot "cannot create a bridge (kernel module 'bridge' missing?)"
  fi
  ip -n "$SWITCH" link set br0 up

  if ! ip link show "$UPLINK" >/dev/null 2>&1; then
    ip link add "$UPLINK" type veth peer name p0 netns "$SWITCH" ||
      cannot "cannot create a veth pair (kernel module 'veth' missing?)"
  fi
  ip addr replace "${UPLINK_ADDR}/24" dev "$UPLINK"
  ip link set "$UPLINK" up
  ip -n "$SWITCH" link set p0 master br0 up

  local i ns
  for ((i = 1; i <= n; i++)); do
    ns=${PREFIX}${i}
    add_ns "$ns"
    ip -n "$ns" link set lo up
    if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
      ip -n "$SWITCH" link del "p${i}" 2>/dev/null || true  # a stale switch port from a half-made host
      ip -n "$ns" link add eth0 type veth peer name "p${i}" netns "$SWITCH"
    fi
    ip -n "$ns" addr replace "${SUBNET}.${i}/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$SWITCH" link set "p${i}" master br0 up
  done
  # Converge to exactly n hosts.
  for ns in $(cluster_namespaces); do
    i=${ns#"$PREFIX"}
    if ((i > n)); then ip netns del "$ns"; fi
  done
  wait_links_up "$n"
  echo "netns_cluster: up: ${n} host(s) ${PREFIX}1..${PREFIX}${n} at ${SUBNET}.1..${n}/24, root namespace at ${UPLINK_ADDR}"
}

# Prints "UP" when the link is up with a carrier (both ends of its veth pair up). $1: namespace
# ("" for the root namespace), $2: device.
link_state() {
  local -a ns=()
  [[ -z $1 ]] || ns=(-n "$1")
  ip "${ns[@]}" -o link show dev "$2" 2>/dev/null | sed -n 's/.* state \([A-Z]*\).*/\1/p'
}

# Waits until every link of the cluster is up (the bridge has STP off: ports forward at once).
wait_links_up() {
  local i try link
  local -a links=(":$UPLINK" "$SWITCH:p0")
  for ((i = 1; i <= $1; i++)); do links+=("${PREFIX}${i}:eth0" "$SWITCH:p${i}"); done
  for link in "${links[@]}"; do
    for ((try = 0; try < 50; try++)); do
      [[ $(link_state "${link%%:*}" "${link#*:}") == UP ]] && break
      sleep 0.1
    done
    ((try < 50)) || die "link ${link} did not come up"
  done
}

cmd_down() {
  local ns
  ip link del "$UPLINK" 2>/dev/null || true
  for ns in $(cluster_namespaces); do
    local -a pids
    mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null || true)
    if ((${#pids[@]})); then
      echo "netns_cluster: warning: processes still in ${ns}: ${pids[*]} (killing them)" >&2
      kill -KILL "${pids[@]}" 2>/dev/null || true
    fi
    ip netns del "$ns"
  done
  echo "netns_cluster: down"
}

cmd_status() {
  local ns
  for ns in $(cluster_namespaces); do
    [[ $ns == "$SWITCH" ]] && continue
    echo "${ns} $(ip -n "$ns" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}')"
  done
}

main() {
  (($# >= 1)) || usage
  local sub=$1 n=2
  shift
  case $sub in
    up)
      (($# <= 1)) || usage
      if (($# == 1)); then n=$1; fi
      [[ $n =~ ^[0-9]+$ ]] || usage
      ((n >= 1 && n <= MAX_HOSTS)) || usage
      ;;
    down | status) (($# == 0)) || usage ;;
    *) usage ;;
  esac
  command -v ip >/dev/null || cannot "'ip' not found (apt-get install iproute2)"
  if [[ $sub == status ]]; then cmd_status; return; fi
  [[ $(id -u) -eq 0 ]] || cannot "must run as root: network namespaces and veth pairs need CAP_SYS_ADMIN and CAP_NET_ADMIN (try: sudo $0 $sub)"

  # One `up`/`down` at a time on this machine.
  exec 9>"$LOCK" || die "cannot open lock file $LOCK"
  flock 9
  if [[ $sub == up ]]; then cmd_up "$n"; else cmd_down; fi
}

main "$@"
