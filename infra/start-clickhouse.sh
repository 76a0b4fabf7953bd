#!/usr/bin/env bash
# Start a private clickhouse-server in the background as a plain process (not the
# system service), with a config generated from infra/clickhouse/; installs it
# first if needed. Idempotent: does nothing if it is already running.
# Reads: JETCRON_HOME (<repo>/.local), JETCRON_CLICKHOUSE_HOST (127.0.0.1),
#        JETCRON_CLICKHOUSE_HTTP_PORT (8123), JETCRON_CLICKHOUSE_TCP_PORT (9000).
# Data: $JETCRON_HOME/clickhouse/data  Config: $JETCRON_HOME/clickhouse/conf
# Logs: $JETCRON_HOME/log/clickhouse{,.err}.log  Pid: $JETCRON_HOME/run/clickhouse.pid
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

host="${JETCRON_CLICKHOUSE_HOST:-127.0.0.1}"
http_port="${JETCRON_CLICKHOUSE_HTTP_PORT:-8123}"
tcp_port="${JETCRON_CLICKHOUSE_TCP_PORT:-9000}"
probe_host="$host"
case "$host" in 0.0.0.0 | :: | "") probe_host=127.0.0.1 ;; esac
conf_dir="$JETCRON_HOME/clickhouse/conf"
data_dir="$JETCRON_HOME/clickhouse/data"

if is_running clickhouse; then
  log "clickhouse-server already running (pid $(cat "$RUN_DIR/clickhouse.pid"))"
  exit 0
fi
command -v curl >/dev/null || apt_install curl
bin="$("$INFRA_DIR/install-clickhouse.sh")"
for p in "$http_port" "$tcp_port"; do
  ! port_open "$probe_host" "$p" || die "port $p on $probe_host is already in use"
done

# The server runs as whoever runs this script (root included: 18.16 allows it,
# and newer servers only insist that the data directory belongs to that user,
# which holds because it is created here).
mkdir -p "$conf_dir" "$data_dir"
cp "$INFRA_DIR/clickhouse/users.xml" "$conf_dir/users.xml"
sed -e "s|@LOG_DIR@|$LOG_DIR|g" -e "s|@DATA_DIR@|$data_dir|g" -e "s|@CONF_DIR@|$conf_dir|g" \
  -e "s|@HTTP_PORT@|$http_port|g" -e "s|@TCP_PORT@|$tcp_port|g" -e "s|@HOST@|$host|g" \
  "$INFRA_DIR/clickhouse/config.xml.tmpl" >"$conf_dir/config.xml"

logfile="$LOG_DIR/clickhouse.out" # stdout/stderr; the server's own logs are next to it
log "starting clickhouse-server on $host:$http_port (http), :$tcp_port (native), logs in $LOG_DIR"
(cd "$JETCRON_HOME/clickhouse" && start_bg clickhouse "$logfile" "$bin" --config-file="$conf_dir/config.xml")
wait_started clickhouse 60 "$LOG_DIR/clickhouse.err.log" curl -sf "http://$probe_host:$http_port/ping"
log "clickhouse-server ready: http://$probe_host:$http_port"
