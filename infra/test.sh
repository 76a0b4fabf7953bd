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
# chdb (current ClickHouse in-process) for the dashboard test (tests/grafana_dashboards.rs);
# python3 is there since install-nats.sh; same PEP 668 fallback as there.
if ! python3 -c 'import chdb' 2>/dev/null; then
  log "pip install chdb"
  python3 -m pip install -q "chdb==4.4.0" 2>/dev/null \
    || python3 -m pip install -q --break-system-packages "chdb==4.4.0" \
    || die "cannot install chdb"
fi
# aiosmtpd: the real SMTP server the alert tests send mail to (tests/alerts.rs).
if ! python3 -c 'import aiosmtpd' 2>/dev/null; then
  log "pip install aiosmtpd"
  python3 -m pip install -q "aiosmtpd==1.4.6" 2>/dev/null \
    || python3 -m pip install -q --break-system-packages "aiosmtpd==1.4.6" \
    || die "cannot install aiosmtpd"
fi
# Schemathesis: fuzzes the gateway from its /openapi.json (tests/openapi_schemathesis.rs,
# with infra/schemathesis/); the hooks are written against this version.
if [ "$(python3 -c 'import schemathesis; print(schemathesis.__version__)' 2>/dev/null)" != 4.32.5 ]; then
  log "pip install schemathesis"
  python3 -m pip install -q "schemathesis==4.32.5" 2>/dev/null \
    || python3 -m pip install -q --break-system-packages "schemathesis==4.32.5" \
    || die "cannot install schemathesis"
fi
# Debian's Chromium and its WebDriver for the console's browser tests
# (tests/console_browser.rs); nothing downloads a browser of its own.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  apt_install chromium chromium-driver
fi
# The fault tests (services/testkit/tests/faults.rs): libfaketime for skewed
# clocks; iproute2 and iptables for partitions (network namespaces, as root).
if [ ! -e "/usr/lib/$(uname -m)-linux-gnu/faketime/libfaketime.so.1" ] \
  || ! command -v ip >/dev/null || ! command -v iptables-restore >/dev/null; then
  apt_install libfaketime iproute2 iptables
fi
# zsh and fish check the completion scripts of `jetcron completion`
# (tests/cli_client.rs); bash is there already.
if ! command -v zsh >/dev/null || ! command -v fish >/dev/null; then
  apt_install zsh fish
fi
# Node.js packages the tests run or inject (infra/node/package.json): npm's
# oidc-provider, a real OpenID Connect provider for the console's sign-in
# tests, and axe-core for its accessibility checks. Debian's nodejs and npm
# when there is no node; a node already there (nodesource) is used as is.
if ! command -v node >/dev/null; then
  apt_install nodejs npm
elif ! command -v npm >/dev/null; then
  apt_install npm
fi
node_dir="$JETCRON_HOME/node"
if ! cmp -s "$INFRA_DIR/node/package-lock.json" "$node_dir/package-lock.json" \
  || [ ! -d "$node_dir/node_modules/oidc-provider" ]; then
  log "npm ci (infra/node: oidc-provider, axe-core)"
  mkdir -p "$node_dir"
  cp "$INFRA_DIR/node/package.json" "$INFRA_DIR/node/package-lock.json" "$node_dir/"
  (cd "$node_dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null) \
    || die "npm ci in $node_dir failed"
fi
export JETCRON_NODE_MODULES="$node_dir/node_modules"
cd "$REPO_DIR"
# nextest runs each test in its own process and ends with one summary line;
# plain cargo test is the fallback where nextest is not installed.
if cargo nextest --version >/dev/null 2>&1; then
  log "cargo nextest run --workspace"
  cargo nextest run --workspace --locked --no-fail-fast
else
  log "cargo test --workspace (cargo-nextest not installed)"
  cargo test --workspace --locked --no-fail-fast
fi
# The release build's regression guard runs apart: ./infra/smoke.sh (CI
# runs both, .ci/run).
