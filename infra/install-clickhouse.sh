#!/usr/bin/env bash
# Install Debian's clickhouse-server and clickhouse-client (apt) unless
# /usr/sbin/clickhouse-server exists. Prints the server binary's path on stdout.
# The system service is not used: start-clickhouse.sh runs a private server.
# Reads: JETCRON_HOME (via lib.sh; nothing else).
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

bin=/usr/sbin/clickhouse-server
[ -x "$bin" ] || apt_install clickhouse-server clickhouse-client
[ -x "$bin" ] || die "$bin still missing after apt-get install"
echo "$bin"
