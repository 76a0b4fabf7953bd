#!/usr/bin/env bash
# Start nats-server with JetStream in the background, using infra/nats/jetcron.conf;
# installs it first if needed. Idempotent: does nothing if it is already running.
# Reads: JETCRON_HOME (<repo>/.local), JETCRON_NATS_HOST (127.0.0.1),
#        JETCRON_NATS_PORT (4222), JETCRON_NATS_HTTP_PORT (8222, monitoring).
# Data: $JETCRON_HOME/nats  Log: $JETCRON_HOME/log/nats.log  Pid: $JETCRON_HOME/run/nats.pid
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

host="${JETCRON_NATS_HOST:-127.0.0.1}"
port="${JETCRON_NATS_PORT:-4222}"
http_port="${JETCRON_NATS_HTTP_PORT:-8222}"
probe_host="$host"
case "$host" in 0.0.0.0 | :: | "") probe_host=127.0.0.1 ;; esac
logfile="$LOG_DIR/nats.log"

if is_running nats; then
  log "nats-server already running (pid $(cat "$RUN_DIR/nats.pid"))"
  exit 0
fi
command -v curl >/dev/null || apt_install curl
bin="$("$INFRA_DIR/install-nats.sh")"
for p in "$port" "$http_port"; do
  ! port_open "$probe_host" "$p" || die "port $p on $probe_host is already in use"
done
mkdir -p "$JETCRON_HOME/nats"
log "starting nats-server on $host:$port (monitoring :$http_port, log $logfile)"
start_bg nats "$logfile" "$bin" -c "$INFRA_DIR/nats/jetcron.conf" \
  -a "$host" -p "$port" -m "$http_port" -js -sd "$JETCRON_HOME/nats"
wait_started nats 20 "$logfile" \
  curl -sf "http://$probe_host:$http_port/healthz?js-enabled-only=true"
log "nats-server ready: nats://$probe_host:$port"
