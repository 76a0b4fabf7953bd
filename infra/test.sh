#!/usr/bin/env bash
# Install what the tests need (nats-server, clickhouse-server) and run every test.
# Tests start their own servers on free ports; nothing needs to be running.
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "$0")/lib.sh"

nats_bin="$("$INFRA_DIR/install-nats.sh")"
clickhouse_bin="$("$INFRA_DIR/install-clickhouse.sh")"
export JETCRON_NATS_SERVER="$nats_bin"
export JETCRON_CLICKHOUSE_SERVER="$clickhouse_bin"
cd "$REPO_DIR"
log "cargo test --workspace"
cargo test --workspace --locked
