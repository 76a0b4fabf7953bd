#!/usr/bin/env bash
# Stop what infra/up.sh started: stop.sh [jetcron] [clickhouse] [nats] (default: all, in that order).
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "$0")/lib.sh"

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(jetcron clickhouse nats)
for name in "${names[@]}"; do stop_pid "$name"; done
