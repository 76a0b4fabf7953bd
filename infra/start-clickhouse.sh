#!/usr/bin/env bash
# Start a private clickhouse-server in the background (idempotent), not the system service.
# Reads: JETCRON_CLICKHOUSE_HOST (127.0.0.1), JETCRON_CLICKHOUSE_HTTP_PORT (8123),
#        JETCRON_CLICKHOUSE_TCP_PORT (9000), JETCRON_HOME.
# Data: $JETCRON_HOME/clickhouse   Logs: $JETCRON_HOME/log/clickhouse*.log
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "$0")/lib.sh"

host="${JETCRON_CLICKHOUSE_HOST:-127.0.0.1}"
http_port="${JETCRON_CLICKHOUSE_HTTP_PORT:-8123}"
tcp_port="${JETCRON_CLICKHOUSE_TCP_PORT:-9000}"
if is_running clickhouse; then log "clickhouse-server already running (pid $(cat "$RUN_DIR/clickhouse.pid"))"; exit 0; fi
bin="$("$INFRA_DIR/install-clickhouse.sh")"
conf_dir="$JETCRON_HOME/clickhouse/conf"
data_dir="$JETCRON_HOME/clickhouse/data"
mkdir -p "$conf_dir" "$data_dir"
cp "$INFRA_DIR/clickhouse/users.xml" "$conf_dir/users.xml"
sed -e "s|@LOG_DIR@|$LOG_DIR|g" -e "s|@DATA_DIR@|$data_dir|g" -e "s|@CONF_DIR@|$conf_dir|g" \
    -e "s|@HTTP_PORT@|$http_port|g" -e "s|@TCP_PORT@|$tcp_port|g" -e "s|@HOST@|$host|g" \
    "$INFRA_DIR/clickhouse/config.xml.tmpl" >"$conf_dir/config.xml"
log "starting clickhouse-server on $host:$http_port (http) / $tcp_port (native)"
(cd "$JETCRON_HOME/clickhouse" && start_bg clickhouse "$LOG_DIR/clickhouse.out" "$bin" --config-file="$conf_dir/config.xml")
wait_for "clickhouse-server" 60 curl -sf "http://127.0.0.1:$http_port/ping"
log "clickhouse-server ready: http://$host:$http_port"
