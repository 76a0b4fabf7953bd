#!/usr/bin/env bash
# Shared helpers for the infra scripts. Source it; do not run it.
# Reads: JETCRON_HOME (default: <repo>/.local) — where data, logs and pid files live.

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$INFRA_DIR/.." && pwd)"
JETCRON_HOME="${JETCRON_HOME:-$REPO_DIR/.local}"
RUN_DIR="$JETCRON_HOME/run"
LOG_DIR="$JETCRON_HOME/log"
NATS_SERVER_VERSION="2.15.1"
mkdir -p "$RUN_DIR" "$LOG_DIR"

log() { printf '\033[1m[jetcron]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Run apt-get update at most once per script run.
APT_UPDATED=0
apt_install() {
  if [ "$APT_UPDATED" = 0 ]; then
    log "apt-get update"
    apt-get update -qq >/dev/null || die "apt-get update failed"
    APT_UPDATED=1
  fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null || die "apt-get install $* failed"
}

# Poll a command until it succeeds or TIMEOUT seconds pass.
wait_for() {
  local what="$1" timeout="$2"; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "$what not ready after ${timeout}s"
    sleep 0.2
  done
}

# Path of nats-server: PATH first, then the Python scripts dir the wheel installs into.
find_nats_server() {
  local scripts
  if command -v nats-server >/dev/null 2>&1; then command -v nats-server; return; fi
  scripts="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)"
  if [ -n "$scripts" ] && [ -x "$scripts/nats-server" ]; then echo "$scripts/nats-server"; return; fi
  return 1
}

# Is the process in pid file NAME alive?
is_running() {
  local pidfile="$RUN_DIR/$1.pid"
  [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

# Start a background process, recording its pid: start_bg NAME LOGFILE CMD...
start_bg() {
  local name="$1" logfile="$2"; shift 2
  nohup "$@" >>"$logfile" 2>&1 &
  echo $! >"$RUN_DIR/$name.pid"
}

# Stop the process in pid file NAME: SIGTERM, wait up to WAIT seconds (default 10), then SIGKILL.
stop_pid() {
  local name="$1" pidfile="$RUN_DIR/$1.pid" wait_s="${2:-10}" pid
  [ -f "$pidfile" ] || return 0
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((wait_s * 5))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name did not stop in ${wait_s}s, killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pidfile"
}
