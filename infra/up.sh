#!/usr/bin/env bash
# Install and start the whole system on this machine, then put the demo job.
#   NATS (JetStream) 127.0.0.1:4222, ClickHouse 127.0.0.1:8123, jetcron all with
#   the HTTP gateway on 127.0.0.1:8080. Data and logs in .local/ (JETCRON_HOME).
# Reads the variables of start-nats.sh and start-clickhouse.sh, and
#   JETCRON_HTTP_ADDR (127.0.0.1:8080), JETCRON_ENABLE_SHELL (unset: shell targets off).
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "$0")/lib.sh"

command -v curl >/dev/null || apt_install curl ca-certificates
command -v cargo >/dev/null || die "cargo not found: install Rust (rustup) first"
"$INFRA_DIR/start-nats.sh"
"$INFRA_DIR/start-clickhouse.sh"

log "building jetcron (release)"
(cd "$REPO_DIR" && cargo build --release -q -p jetcron)
bin="$REPO_DIR/target/release/jetcron"
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
if is_running jetcron; then
  log "jetcron already running (pid $(cat "$RUN_DIR/jetcron.pid")); restarting it with the new build"
  stop_pid jetcron 45
fi
log "starting jetcron all (log: $LOG_DIR/jetcron.log)"
start_bg jetcron "$LOG_DIR/jetcron.log" "$bin" all
wait_for "jetcron gateway" 60 curl -sf "http://$http_addr/readyz"

# The demo job calls the gateway's own /healthz; point it at the chosen address.
demo="$(sed "s|127.0.0.1:8080|$http_addr|" "$INFRA_DIR/demo/hello.json")"
log "putting the demo job 'hello' (jetcron req jetcron.api.jobs.put)"
"$bin" req jetcron.api.jobs.put "$demo"
cat <<MSG

jetcron is running.
  runs of the demo job:  curl -s http://$http_addr/v1/jobs/hello/runs
  all jobs:              curl -s http://$http_addr/v1/jobs
  put a job:             nats req jetcron.api.jobs.put '{...}'   (or: $bin req jetcron.api.jobs.put '{...}')
  or over HTTP:          curl -s -X POST http://$http_addr/v1/jobs -H "Authorization: Bearer \$(cat $token_file)" -d '{...}'
  the HTTP API:          curl -s http://$http_addr/openapi.json
  logs:                  $LOG_DIR/
  stop:                  ./infra/stop.sh
MSG
