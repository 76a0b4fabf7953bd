//! The test harness: real servers, real processes, cleaned up on drop.
//!
//! - [`NatsServer`] starts `nats-server -js` on a free port with a temporary
//!   store; [`NatsCluster`] starts three (or `n`) of them routed into one
//!   JetStream cluster, each node killable and restartable on its store; [`ClickHouseServer`] starts `clickhouse-server` with a generated
//!   config on free ports with a temporary data dir. Dropping either kills the
//!   process and removes its files (as nats.rs' own harness does).
//! - [`Stack`] runs the jetcron services in-process against them, started by
//!   the same `run` functions `jetcron all` uses, and offers the user-level
//!   actions tests are written in: put a job, read runs over HTTP.
//! - [`grafana`] expands and runs every panel of the Grafana dashboards as
//!   Grafana and its ClickHouse plugin would; [`chdb`] runs queries on a
//!   current ClickHouse.
//! - [`JetcronProcess`] runs a `jetcron` subcommand as its own OS process,
//!   to SIGKILL and restart as operators would.
//! - [`deployment`] runs the clustered form as separate processes (three
//!   nodes, two tickers, two executors, a projector, a gateway) with jobs
//!   whose target it records, for fault tests and the fault benchmark;
//!   the faults themselves are [`JetcronProcess::pause`],
//!   [`NatsCluster::pause`], [`NatsCluster::partition`] and
//!   [`faketime_env`], beside SIGKILL and restart.
//! - [`nats_jwt`] issues operator, account and user JWTs and `.creds` files
//!   (what `nsc` does) for a [`NatsServer`] in operator mode.
//!
//! - [`SmtpServer`] runs aiosmtpd, a real SMTP server, into a Maildir.
//! - [`Browser`] drives Debian's headless Chromium through `chromedriver`
//!   (WebDriver), for the console's browser tests.
//!
//! Binaries are found on `PATH` (or `JETCRON_NATS_SERVER`,
//! `JETCRON_CLICKHOUSE_SERVER`); `infra/test.sh` installs them.

mod browser;
pub mod chdb;
mod clickhouse_server;
mod cluster_network;
pub mod deployment;
pub mod grafana;
mod nats_cluster;
pub mod nats_jwt;
mod nats_server;
mod oidc_provider;
mod process;
mod skewed_clock;
mod smtp_server;
pub mod stack;
mod stall;
mod wait;

pub use browser::Browser;
pub use clickhouse_server::ClickHouseServer;
pub use nats_cluster::NatsCluster;
pub use nats_jwt::{NatsAccount, NatsOperator};
pub use nats_server::NatsServer;
pub use oidc_provider::{node_modules, OidcClient, OidcProvider};
pub use process::{last_logged_number, without_colour_codes, JetcronProcess};
/// The HTTP client tests use (`Stack::http`), re-exported for its types.
pub use reqwest;
pub use skewed_clock::faketime_env;
pub use smtp_server::{ReceivedMail, SmtpServer};
pub use stack::{
    fast_leases, instant, test_executor_config, wait_for_nats_api, Stack, StackOptions, API_TOKEN,
};
pub use wait::wait_until;

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port on 127.0.0.1")
}

/// Show service logs in test output when `RUST_LOG` is set.
pub fn init_test_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// Find an executable: the env override, then `PATH`, then extra places.
fn find_binary(env: &str, name: &str, extra: &[std::path::PathBuf]) -> std::path::PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return path.into();
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(extra.iter().cloned())
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} not found on PATH (set {env}, or run infra/test.sh which installs it)")
        })
}
