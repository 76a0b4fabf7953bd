#!/usr/bin/env bash
# Stop the processes recorded in $JETCRON_HOME/run/*.pid: SIGTERM, then SIGKILL
# if still alive after the wait (10 s; 45 s for jetcron, whose executor lets
# running attempts finish for up to 30 s).
# Usage: stop.sh [jetcron] [clickhouse] [nats]   (default: all, in that order;
#   jetcron and nats include the processes of `up.sh --cluster`: the tickers
#   first, then executors, projector and gateway; nodes n1-n3)
# Reads: JETCRON_HOME (<repo>/.local).
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(jetcron clickhouse nats)
for name in "${names[@]}"; do
  case "$name" in
    jetcron)
      stop_pid jetcron 45
      for service in ticker-1 ticker-2 executor-1 executor-2 projector gateway; do
        stop_pid "$service" 45
      done
      ;;
    clickhouse) stop_pid clickhouse 10 ;;
    nats)
      stop_pid nats 10
      for node in n1 n2 n3; do stop_pid "$node" 10; done
      ;;
    *) die "unknown name '$name' (expected: jetcron clickhouse nats)" ;;
  esac
done
