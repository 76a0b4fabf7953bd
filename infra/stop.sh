#!/usr/bin/env bash
# Stop what infra/up.sh started: stop.sh [jetcron] [clickhouse] [nats] (default: all, in that order).
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "$0")/lib.sh"

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(jetcron clickhouse nats)
for name in "${names[@]}"; do
  # jetcron finishes running attempts for up to its shutdown grace (30 s by default).
  if [ "$name" = jetcron ]; then stop_pid "$name" 45; else stop_pid "$name"; fi
done
