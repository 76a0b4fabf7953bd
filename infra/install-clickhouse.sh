#!/usr/bin/env bash
# Install Debian's clickhouse-server and clickhouse-client unless present.
# The system service is not used: start-clickhouse.sh runs a private server.
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "$0")/lib.sh"

if [ ! -x /usr/sbin/clickhouse-server ] && ! command -v clickhouse-server >/dev/null 2>&1; then
  apt_install clickhouse-server clickhouse-client
fi
command -v clickhouse-server || echo /usr/sbin/clickhouse-server
