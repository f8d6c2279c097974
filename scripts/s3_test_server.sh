#!/usr/bin/env bash
# A real S3 server on loopback for tests: Ceph RADOS Gateway on a one-mon, one-OSD (memstore) cluster,
# everything (config, keys, data, logs, sockets) inside DIR, no systemd. Recipe and measurements:
# shared/notes/s3-test-server.md. About 3 s to start, 0.5 s to stop, ~130 MiB RSS.
#
#   scripts/s3_test_server.sh start DIR   # prints "ENDPOINT ACCESS_KEY SECRET_KEY" on one line and
#                                         # writes DIR/env (S3_TEST_ENDPOINT=..., S3_TEST_ACCESS_KEY=...,
#                                         # S3_TEST_SECRET_KEY=...) for `source`
#   scripts/s3_test_server.sh stop DIR    # SIGTERM rgw, osd, mon by pid (SIGKILL after 1 s); idempotent
#
# S3_TEST_MEMSTORE_BYTES sets the OSD's in-memory store (default 1 GiB; the benchmarks of >= 1 GB objects
# raise it: memstore holds about twice the data in RAM).
# Daemons get stdin from /dev/null and write to DIR/log/*, so `$(... start DIR)` returns.
# Exit codes: 0 done; 77 the ceph binaries are missing (install: scripts/install_deps.sh); 1 failure
# (the tail of the failing daemon's log goes to stderr); 2 usage.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
cmd=$1
dir=$2

stop() {
  # The data is throwaway (memstore): all three get SIGTERM at once and SIGKILL after a 1 s grace
  # (on a busy 2-core machine each takes ~2 s to exit cleanly, and mon waits for osd).
  local name pids=()
  for name in rgw osd mon; do
    [[ -f "$dir/$name.pid" ]] || continue
    pids+=("$(cat "$dir/$name.pid")")
    rm -f "$dir/$name.pid"
  done
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  local deadline=$((SECONDS + 1)) alive
  while :; do
    alive=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
    ((${#alive[@]})) || return 0
    ((SECONDS < deadline)) || break
    sleep 0.05
  done
  kill -KILL "${alive[@]}" 2>/dev/null || true
  for pid in "${alive[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  done
}

fail() {  # fail MESSAGE [LOG]: stop what started, show the log's tail
  echo "s3_test_server: $1" >&2
  [[ $# -ge 2 && -f "$2" ]] && tail -n 20 "$2" >&2
  stop
  exit 1
}

# wait_for SECONDS PIDNAME LOG COMMAND...: polls COMMAND every 0.1 s while the daemon lives.
wait_for() {
  local secs=$1 name=$2 log=$3
  shift 3
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null || fail "$name exited during start-up" "$log"
    ((SECONDS < deadline)) || fail "$name not ready after ${secs}s" "$log"
    sleep 0.1
  done
}

start() {
  local b
  for b in ceph-mon ceph-osd radosgw radosgw-admin ceph ceph-authtool monmaptool; do
    command -v "$b" >/dev/null || { echo "s3_test_server: '$b' not found (apt-get install ceph-mon ceph-osd radosgw ceph-common)" >&2; exit 77; }
  done
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  mkdir -p "$dir/log" "$dir/run" "$dir/mon.a" "$dir/osd.0" "$dir/rgw"
  unset CEPH_ARGS
  export CEPH_CONF="$dir/ceph.conf"

  local fsid osd_uuid p2 p1 prgw access secret
  fsid=$(uuidgen)
  osd_uuid=$(uuidgen)
  read -r p2 p1 prgw < <(python3 "$(dirname "${BASH_SOURCE[0]}")/free_ports.py" 3)
  access=$(head -c 10 /dev/urandom | od -An -tx1 | tr -d " \n" | tr a-f A-F)
  secret=$(head -c 20 /dev/urandom | od -An -tx1 | tr -d " \n")

  cat > "$CEPH_CONF" <<CONF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$p2,v1:127.0.0.1:$p1]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
keyring = $dir/keyring
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
pid file = $dir/run/\$name.pid
mon data = $dir/mon.\$id
osd data = $dir/osd.\$id
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
paxos propose interval = 0.05
paxos min wait = 0.01
[osd]
osd objectstore = memstore
memstore device bytes = ${S3_TEST_MEMSTORE_BYTES:-1073741824}
[client.rgw.local]
rgw frontends = beast endpoint=127.0.0.1:$prgw
rgw dns name = localhost
rgw data = $dir/rgw
rgw enable lc threads = false
CONF

  # Keys before mkfs; the one keyring holds them all (mon., admin, osd.0, rgw).
  ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$dir/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
    --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
  ceph-authtool "$dir/keyring" --gen-key -n osd.0 --cap mon 'allow profile osd' --cap osd 'allow *' >/dev/null
  ceph-authtool "$dir/keyring" --gen-key -n client.rgw.local --cap mon 'allow rw' --cap osd 'allow rwx' >/dev/null

  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$p2,v1:127.0.0.1:$p1]" "$dir/monmap" >/dev/null
  ceph-mon --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring" >"$dir/log/mon-mkfs.out" 2>&1 ||
    fail "ceph-mon --mkfs failed" "$dir/log/mon-mkfs.out"
  ceph-mon -i a -f </dev/null >"$dir/log/mon.out" 2>&1 &
  echo $! >"$dir/mon.pid"
  wait_for 20 mon "$dir/log/mon.out" ceph --connect-timeout 2 mon stat

  local id
  id=$(ceph osd new "$osd_uuid" 2>"$dir/log/osd-new.out") || fail "ceph osd new failed" "$dir/log/osd-new.out"
  [[ $id == 0 ]] || fail "ceph osd new gave id '$id', expected 0"
  ceph-osd -i 0 --mkfs --osd-uuid "$osd_uuid" >"$dir/log/osd-mkfs.out" 2>&1 ||
    fail "ceph-osd --mkfs failed" "$dir/log/osd-mkfs.out"
  ceph-osd -i 0 -f </dev/null >"$dir/log/osd.out" 2>&1 &
  echo $! >"$dir/osd.pid"
  wait_for 30 osd "$dir/log/osd.out" bash -c 'ceph osd dump | grep -q "^osd.0 up"'

  radosgw -n client.rgw.local -f </dev/null >"$dir/log/rgw.out" 2>&1 &
  echo $! >"$dir/rgw.pid"
  wait_for 30 rgw "$dir/log/rgw.out" curl -sf -o /dev/null "http://127.0.0.1:$prgw/"

  radosgw-admin user create --uid=tester --display-name=Test --access-key="$access" --secret-key="$secret" \
    >"$dir/log/user.out" 2>&1 || fail "radosgw-admin user create failed" "$dir/log/user.out"

  cat >"$dir/env" <<ENV
S3_TEST_ENDPOINT=http://127.0.0.1:$prgw
S3_TEST_ACCESS_KEY=$access
S3_TEST_SECRET_KEY=$secret
ENV
  echo "http://127.0.0.1:$prgw $access $secret"
}

case $cmd in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
