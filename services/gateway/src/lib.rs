//! The gateway: jetcron's front door, over NATS and HTTP.
//!
//! - The NATS micro service `jetcron` ([`nats_api`]) takes job writes:
//!   `jetcron.api.jobs.put` validates a definition and stores it in
//!   `jetcron_jobs`; `trigger` and `backfill` ([`manual_runs`]) publish due
//!   events by hand; `jetcron.api.runs.kill` stops a run ([`run_control`]);
//!   `jetcron.api.schedules.preview` shows a line's next fires
//!   ([`schedule_requests`]). Several gateways share the service's queue group.
//! - The axum HTTP server ([`http`]) answers reads: job definitions from the
//!   bucket (the source of truth), runs from ClickHouse ([`run_history`],
//!   every read bounded in time by [`clickhouse_reads`]),
//!   pool queues from `JETCRON_DUE` ([`pools`]), each read one typed
//!   operation of [`read_requests`]; it also takes job writes
//!   (the same operations as NATS), kills, schedule previews and the
//!   completion reports of asynchronous targets.
//! - The operator console ([`console`]) serves HTML pages at `/` and `/ui/`
//!   on the same port, built from the same operations; its job table reads
//!   the in-memory [`job_catalog`].
//! - A periodic scan ([`missed_fire_scan`]) records missed fires (scheduled
//!   times with no run past a grace period) as `fire.missed` job events, so
//!   ClickHouse and Grafana have them.
//!
//! The gateway starts even while ClickHouse is away (`/readyz` says so), and
//! applies the ClickHouse DDL once it can. A slow or hung ClickHouse holds
//! nothing but history: history reads answer `503 history_unavailable` within
//! `--clickhouse-timeout`, and answers built around a definition go out
//! without their history part ([`clickhouse_reads`]). Every "now" comes from the
//! injected clock ([`GatewayState::clock`]).

pub mod channel_requests;
pub mod clickhouse_reads;
pub mod console;
pub mod http;
pub mod job_catalog;
pub mod job_pass;
pub mod job_requests;
pub mod job_store;
pub mod limits;
pub mod manual_runs;
pub mod missed_fire_scan;
pub mod missed_gauge;
pub mod nats_api;
pub mod pools;
pub mod query_catalog;
pub mod read_requests;
pub mod rejections;
pub mod request_body;
pub mod run_control;
pub mod run_history;
pub mod run_list;
pub mod schedule_requests;
mod service;
pub mod stats;

pub use service::run;
use std::sync::Arc;

use jetcron_core::clock::Clock;
use jetcron_io::clickhouse_schema::ClickHouseOptions;
use jetcron_io::readiness::Readiness;
use jetcron_io::topology::TopologyOptions;

/// Gateway settings.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub clickhouse: ClickHouseOptions,
    pub topology: TopologyOptions,
    /// Bearer tokens of the HTTP API.
    pub http_auth: http::auth::HttpAuth,
    pub limits: limits::Limits,
    /// Every service of this process, for `/readyz`; the gateway registers itself.
    pub readiness: Readiness,
    /// Base URL of a Grafana with jetcron's dashboards, linked from the console.
    pub grafana_url: Option<String>,
    /// Parsed schedule lines, shared with the other services of the process.
    pub lines: jetcron_core::schedule_lines::SharedLines,
    /// The process's one read of the jobs bucket (its own by default).
    pub jobs_feed: jetcron_io::job_feed::JobFeed,
}

/// What request handlers share.
pub struct GatewayState {
    pub nats: async_nats::Client,
    pub js: async_nats::jetstream::Context,
    pub jobs: job_store::JobStore,
    /// `jetcron_channels`: alert channels.
    pub channels: channel_requests::ChannelStore,
    /// One small row per job, for the console's table and the job limit.
    pub catalog: job_catalog::JobCatalog,
    pub runs: run_history::RunHistory,
    /// `jetcron_running`: kill requests.
    pub running: async_nats::jetstream::kv::Store,
    pub http_auth: http::auth::HttpAuth,
    pub limits: limits::Limits,
    /// Missed fires of the last hour, for `/metrics`.
    pub missed: missed_gauge::MissedGauge,
    /// Every service of this process, for `/readyz`.
    pub readiness: Readiness,
    /// Every "now" of the gateway.
    pub clock: Arc<dyn Clock>,
    /// Base URL of Grafana, for the console's links.
    pub grafana_url: Option<String>,
}
