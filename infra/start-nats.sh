#!/usr/bin/env bash
# Start nats-server with JetStream in the background (idempotent).
# Reads: JETCRON_NATS_HOST (127.0.0.1), JETCRON_NATS_PORT (4222),
#        JETCRON_NATS_HTTP_PORT (8222, monitoring), JETCRON_HOME.
# Data: $JETCRON_HOME/nats   Log: $JETCRON_HOME/log/nats.log
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "$0")/lib.sh"

host="${JETCRON_NATS_HOST:-127.0.0.1}"
port="${JETCRON_NATS_PORT:-4222}"
http_port="${JETCRON_NATS_HTTP_PORT:-8222}"
if is_running nats; then log "nats-server already running (pid $(cat "$RUN_DIR/nats.pid"))"; exit 0; fi
bin="$("$INFRA_DIR/install-nats.sh")"
mkdir -p "$JETCRON_HOME/nats"
log "starting nats-server on $host:$port (monitoring :$http_port)"
JETCRON_NATS_HOST="$host" JETCRON_NATS_PORT="$port" JETCRON_NATS_HTTP_PORT="$http_port" \
JETCRON_NATS_STORE="$JETCRON_HOME/nats" \
  start_bg nats "$LOG_DIR/nats.log" "$bin" -c "$INFRA_DIR/nats/jetcron.conf"
wait_for "nats-server" 20 curl -sf "http://127.0.0.1:$http_port/healthz?js-enabled-only=true"
log "nats-server ready: nats://$host:$port"
