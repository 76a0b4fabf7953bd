#!/usr/bin/env bash
# Install and start the whole system on this machine, then put the demo job.
#   NATS (JetStream) 127.0.0.1:4222, ClickHouse 127.0.0.1:8123, jetcron all with
#   the HTTP gateway on 127.0.0.1:8080. Data and logs in .local/ (JETCRON_HOME).
# Reads the variables of start-nats.sh and start-clickhouse.sh, and
#   JETCRON_HTTP_ADDR (127.0.0.1:8080), JETCRON_ENABLE_SHELL (unset: shell targets off).
#
# Cluster mode: `./infra/up.sh --cluster` (or JETCRON_CLUSTER=1) starts three
#   nats-server nodes with routes instead (infra/start-nats-cluster.sh; ports
#   4222-4224), R3 topology (infra/cluster.env), and the services as separate
#   processes: two tickers, two executors, a projector and the gateway, so
#   that failover can be watched on one machine (docs/cluster-local.md).
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "$0")/lib.sh"

cluster="${JETCRON_CLUSTER:-0}"
for arg in "$@"; do
  case "$arg" in
    --cluster) cluster=1 ;;
    *) die "unknown argument '$arg' (expected: --cluster)" ;;
  esac
done
# The processes of cluster mode, by pid-file name (each name appears in its
# command line, which is how lib.sh recognises it).
cluster_services=(gateway projector executor-1 executor-2 ticker-1 ticker-2)

command -v curl >/dev/null || apt_install curl ca-certificates
command -v cargo >/dev/null || die "cargo not found: install Rust (rustup) first"
if [[ "$cluster" == 1 ]]; then
  is_running jetcron && die "single-node jetcron runs: ./infra/stop.sh first"
  "$INFRA_DIR/start-nats-cluster.sh"
else
  for name in "${cluster_services[@]}" n1 n2 n3; do
    is_running "$name" && die "the cluster mode runs ($name): ./infra/stop.sh first"
  done
  "$INFRA_DIR/start-nats.sh"
fi
"$INFRA_DIR/start-clickhouse.sh"

log "building jetcron (release)"
(cd "$REPO_DIR" && cargo build --release -q -p jetcron)
bin="$REPO_DIR/target/release/jetcron"
# Whether the process of pid file NAME started before the binary was built.
older_build() { [[ "$bin" -nt "$RUN_DIR/$1.pid" ]]; }
# service NAME: sets `args`, the jetcron command line of service NAME (each
# holds its pid file's name: lib.sh's is_running looks for it), and
# `marker`, the log line that says it started.
service() {
  case "$1" in
    gateway) args=(gateway) marker="NATS API serving" ;;
    projector) args=(projector) marker="projector started" ;;
    executor-*) args=(executor --executor-id "$1") marker="executor started" ;;
    *) args=(ticker --replica-id "$1") marker="ticker started" ;;
  esac
}
# started_lines NAME LOGFILE: how many times the log says service NAME started.
started_lines() {
  local args marker count
  service "$1"
  count="$(grep -c -- "$marker" "$2" 2>/dev/null || true)"
  echo "${count:-0}"
}
# started_again NAME LOGFILE BEFORE: whether it started since BEFORE was counted.
started_again() { [[ "$(started_lines "$1" "$2")" -gt "$3" ]]; }
nats_url="nats://127.0.0.1:${JETCRON_NATS_PORT:-4222}"
http_addr="${JETCRON_HTTP_ADDR:-127.0.0.1:8080}"
export JETCRON_NATS_URL="$nats_url"
export JETCRON_CLICKHOUSE_URL="http://127.0.0.1:${JETCRON_CLICKHOUSE_HTTP_PORT:-8123}"
export JETCRON_HTTP_ADDR="$http_addr"
# HTTP writes need a bearer token: make one on first start, keep it private.
token_file="$JETCRON_HOME/api-token"
if [[ ! -s "$token_file" ]]; then
  (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token_file")
fi
export JETCRON_API_TOKEN_FILE="$token_file"
if [[ "$cluster" == 1 ]]; then
  set -a
  # shellcheck source=infra/cluster.env
  source "$INFRA_DIR/cluster.env"
  set +a
  # One at a time: what runs the current build is left alone (this is how
  # a killed process is started again while the others go on), what runs
  # an older one is restarted with the new build, and the next one waits
  # until it has started (a ticker has its jobs, an executor pulls), as a
  # rolling upgrade does (docs/operations.md).
  for name in "${cluster_services[@]}"; do
    restarting=0
    if is_running "$name"; then
      if ! older_build "$name"; then
        log "$name already running (pid $(cat "$RUN_DIR/$name.pid"))"
        continue
      fi
      log "$name runs an older build; restarting it with the new one"
      stop_pid "$name" 45
      restarting=1
    fi
    service "$name"
    logfile="$LOG_DIR/$name.log"
    started_before="$(started_lines "$name" "$logfile")"
    log "starting jetcron ${args[*]} (log: $logfile)"
    start_bg "$name" "$logfile" "$bin" "${args[@]}"
    if [[ "$restarting" == 1 ]]; then
      wait_started "$name" 120 "$logfile" started_again "$name" "$logfile" "$started_before"
    fi
  done
  # 503 until every service verified its streams and buckets on the cluster.
  wait_for "jetcron gateway" 120 curl -sf "http://$http_addr/readyz"
else
  if is_running jetcron && older_build jetcron; then
    log "jetcron runs an older build (pid $(cat "$RUN_DIR/jetcron.pid")); restarting it with the new one"
    stop_pid jetcron 45
  fi
  if is_running jetcron; then
    log "jetcron already running (pid $(cat "$RUN_DIR/jetcron.pid"))"
  else
    log "starting jetcron all (log: $LOG_DIR/jetcron.log)"
    start_bg jetcron "$LOG_DIR/jetcron.log" "$bin" all
  fi
  wait_for "jetcron gateway" 60 curl -sf "http://$http_addr/readyz"
fi

# The demo job calls the gateway's own /healthz; point it at the chosen address.
demo="$(sed "s|127.0.0.1:8080|$http_addr|" "$INFRA_DIR/demo/hello.json")"
log "putting the demo job 'hello' (jetcron req jetcron.api.jobs.put)"
"$bin" req jetcron.api.jobs.put "$demo"
cat <<MSG

jetcron is running.
  web console:           http://$http_addr/   (sign in with the token in $token_file)
  runs of the demo job:  curl -s http://$http_addr/v1/jobs/hello/runs
  all jobs:              curl -s http://$http_addr/v1/jobs
  put a job:             nats req jetcron.api.jobs.put '{...}'   (or: $bin req jetcron.api.jobs.put '{...}')
  or over HTTP:          curl -s -X POST http://$http_addr/v1/jobs -H "Authorization: Bearer \$(cat $token_file)" -d '{...}'
  the HTTP API:          curl -s http://$http_addr/openapi.json
  logs:                  $LOG_DIR/
  stop:                  ./infra/stop.sh
MSG
if [[ "$cluster" == 1 ]]; then
  cat <<MSG
Cluster mode: nodes n1-n3 on ports 4222-4224, R3 streams and buckets, two
tickers, two executors (docs/cluster-local.md). Watch a failover:
  kill a node:           kill -9 \$(cat $RUN_DIR/n1.pid)
  or a ticker:           kill -9 \$(cat $RUN_DIR/ticker-1.pid)
  the runs go on:        curl -s http://$http_addr/v1/jobs/hello/runs
  who leads what:        curl -s http://127.0.0.1:8223/jsz?streams=true
  start what you killed: ./infra/up.sh --cluster
MSG
fi
