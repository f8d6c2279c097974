#!/usr/bin/env bash
# A real Prometheus server on loopback for tests and for trying the README's Monitoring section: Debian's
# `prometheus` (the server, not an exporter), its config, TSDB and log inside DIR, no systemd. It scrapes
# TARGET (host:port of a dtrain endpoint, run.prometheus_port) every INTERVAL (default 1s).
#
#   scripts/prometheus_test_server.sh start DIR TARGET [INTERVAL]  # prints "http://127.0.0.1:PORT" and writes
#                                                                 # DIR/env (PROMETHEUS_URL=..., PROMETHEUS_PORT=...)
#   scripts/prometheus_test_server.sh stop DIR                    # SIGTERM by pid, SIGKILL after 3 s; idempotent
#
# The server gets stdin from /dev/null and writes DIR/prometheus.log, so `$(... start ...)` returns once it
# answers /-/ready. Exit codes: 0 done; 77 the prometheus binary is missing (apt-get install prometheus, or
# scripts/install_deps.sh --test); 1 failure (the log's tail goes to stderr); 2 usage.
set -euo pipefail

usage() { echo "usage: $0 start DIR TARGET [INTERVAL] | stop DIR" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
cmd=$1
dir=$2

stop() {
  [[ -f "$dir/prometheus.pid" ]] || return 0
  local pid
  pid=$(cat "$dir/prometheus.pid")
  rm -f "$dir/prometheus.pid"
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 60); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
}

start() {
  local target=$1 interval=${2:-1s} bin port
  bin=$(command -v prometheus || true)
  [[ -n $bin ]] || { echo "prometheus_test_server: 'prometheus' not found (apt-get install prometheus)" >&2; exit 77; }
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)
  port=$(python3 "$(dirname "${BASH_SOURCE[0]}")/free_ports.py" 1)
  cat > "$dir/prometheus.yml" <<CONF
global:
  scrape_interval: $interval
  scrape_timeout: $interval
scrape_configs:
  - job_name: dtrain
    static_configs:
      - targets: ['$target']
CONF
  "$bin" --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
    --web.listen-address="127.0.0.1:$port" --log.level=warn </dev/null >"$dir/prometheus.log" 2>&1 &
  echo $! >"$dir/prometheus.pid"
  local deadline=$((SECONDS + 30))
  until python3 -c "import urllib.request, sys; urllib.request.urlopen('http://127.0.0.1:$port/-/ready', timeout=1)" \
      2>/dev/null; do
    if ! kill -0 "$(cat "$dir/prometheus.pid")" 2>/dev/null; then
      echo "prometheus_test_server: prometheus exited during start-up" >&2
      tail -n 20 "$dir/prometheus.log" >&2
      rm -f "$dir/prometheus.pid"
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      echo "prometheus_test_server: prometheus not ready after 30 s" >&2
      tail -n 20 "$dir/prometheus.log" >&2
      stop
      exit 1
    fi
    sleep 0.1
  done
  printf 'PROMETHEUS_URL=http://127.0.0.1:%s\nPROMETHEUS_PORT=%s\n' "$port" "$port" >"$dir/env"
  echo "http://127.0.0.1:$port"
}

case $cmd in
  start) [[ $# -ge 3 && $# -le 4 ]] || usage; start "${@:3}" ;;
  stop) [[ $# -eq 2 ]] || usage; stop ;;
  *) usage ;;
esac
