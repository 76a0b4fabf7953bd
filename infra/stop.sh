#!/usr/bin/env bash
# Stop the processes recorded in $JETCRON_HOME/run/*.pid: SIGTERM, then SIGKILL
# if still alive after the wait (10 s; 45 s for jetcron, whose executor lets
# running attempts finish for up to 30 s).
# Usage: stop.sh [jetcron] [clickhouse] [nats]   (default: all, in that order)
# Reads: JETCRON_HOME (<repo>/.local).
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(jetcron clickhouse nats)
for name in "${names[@]}"; do
  case "$name" in
    jetcron) stop_pid jetcron 45 ;;
    clickhouse | nats) stop_pid "$name" 10 ;;
    *) die "unknown name '$name' (expected: jetcron clickhouse nats)" ;;
  esac
done
