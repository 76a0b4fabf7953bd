#!/usr/bin/env bash
# Start a three-node nats-server cluster on this machine (infra/nats/cluster/
# n1..n3.conf: client ports 4222-4224, routes 6222-6224, monitoring
# 8222-8224), each node with its own JetStream store; installs nats-server
# first if needed. Idempotent: nodes already running are left alone.
# Data: $JETCRON_HOME/nats-n<i>  Logs: $JETCRON_HOME/log/n<i>.log  Pids: $JETCRON_HOME/run/n<i>.pid
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

command -v curl >/dev/null || apt_install curl
bin="$("$INFRA_DIR/install-nats.sh")"
if is_running nats; then
  die "a single-node nats-server runs (pid $(cat "$RUN_DIR/nats.pid")): ./infra/stop.sh first"
fi
for i in 1 2 3; do
  name="n$i"
  if is_running "$name"; then
    log "nats-server $name already running (pid $(cat "$RUN_DIR/$name.pid"))"
    continue
  fi
  for p in $((4221 + i)) $((6221 + i)) $((8221 + i)); do
    ! port_open 127.0.0.1 "$p" || die "port $p is already in use"
  done
  mkdir -p "$JETCRON_HOME/nats-$name"
  log "starting nats-server $name on 127.0.0.1:$((4221 + i)) (routes :$((6221 + i)), log $LOG_DIR/$name.log)"
  start_bg "$name" "$LOG_DIR/$name.log" "$bin" -c "$INFRA_DIR/nats/cluster/$name.conf" \
    -sd "$JETCRON_HOME/nats-$name"
done
for i in 1 2 3; do
  wait_started "n$i" 30 "$LOG_DIR/n$i.log" \
    curl -sf "http://127.0.0.1:$((8221 + i))/healthz?js-enabled-only=true"
done
# JetStream answers once the nodes elected a meta leader.
wait_for "a JetStream meta leader" 60 \
  bash -c 'curl -sf "http://127.0.0.1:8222/jsz" | grep -q "\"leader\""'
log "nats cluster ready: nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224"
