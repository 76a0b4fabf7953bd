#!/usr/bin/env bash
# The regression guard (loadtest/src/smoke.rs): a short end-to-end benchmark
# of the release build that fails when runs/s, CPU per run or the
# target-call p99 is far below the figures recorded in loadtest/smoke.json.
# CI runs it after ./infra/test.sh (.ci/run); it installs the servers it
# needs the same way.
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "$0")/lib.sh"

JETCRON_NATS_SERVER="$("$INFRA_DIR/install-nats.sh")"
JETCRON_CLICKHOUSE_SERVER="$("$INFRA_DIR/install-clickhouse.sh")"
export JETCRON_NATS_SERVER JETCRON_CLICKHOUSE_SERVER
cd "$REPO_DIR"
log "e2e-bench smoke (release build)"
cargo build --release --locked -p jetcron -p jetcron-loadtest
./target/release/e2e-bench smoke
