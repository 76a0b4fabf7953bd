//! The gateway: jetcron's front door, over NATS and HTTP.
//!
//! - The NATS micro service `jetcron` ([`nats_api`]) takes job writes:
//!   `jetcron.api.jobs.put` validates a definition and stores it in
//!   `jetcron_jobs`; `trigger` and `backfill` ([`runs::manual`]) publish due
//!   events by hand; `jetcron.api.runs.kill` stops a run ([`runs::control`]);
//!   `jetcron.api.schedules.preview` shows a line's next fires
//!   ([`jobs::schedule_preview`]). Several gateways share the service's queue
//!   group.
//! - The axum HTTP server ([`http`]) answers reads: job definitions from the
//!   bucket (the source of truth), runs from ClickHouse ([`runs::history`],
//!   every read bounded in time by [`sql::reads`]), pool queues from
//!   `JETCRON_DUE` ([`runs::pools`]), each read one typed operation
//!   ([`jobs::reads`], [`runs::reads`], [`runs::stats`], ...); it also takes
//!   job writes (the same operations as NATS), kills, schedule previews and
//!   the completion reports of asynchronous targets.
//! - The operator console ([`console`]) serves HTML pages at `/` and `/ui/`
//!   on the same port, built from the same operations; its job table reads
//!   the in-memory [`jobs::catalog`].
//! - A periodic scan ([`missed_fires::scan`]) records missed fires (scheduled
//!   times with no run past a grace period) as `fire.missed` job events, so
//!   ClickHouse and Grafana have them.
//!
//! The gateway starts even while ClickHouse is away (`/readyz` says so), and
//! applies the ClickHouse DDL once it can. A slow or hung ClickHouse holds
//! nothing but history: history reads answer `503 history_unavailable` within
//! `--clickhouse-timeout`, and answers built around a definition go out
//! without their history part ([`sql::reads`]). Every "now" comes from the
//! injected clock ([`GatewayState::clock`]).
//!
//! # Layout
//!
//! Rooms by noun, a folder each, whose `mod.rs` says why it exists; an
//! operation is a function from a typed request to a typed answer or an
//! `ApiError`, and every door calls the same one:
//! - [`jobs`]: definitions in `jetcron_jobs`: the bucket's operations
//!   (`store`), a stored definition as shown (`stored`), the other job
//!   operations (`requests`), a job's detail and history (`reads`), the
//!   in-memory table (`catalog`), one read of every definition (`pass`),
//!   rejected definitions (`rejections`), schedule previews
//!   (`schedule_preview`);
//! - [`runs`]: run history and steering: the read operations (`reads`,
//!   `stats`, the console's `figures`), runs from their events (`history`)
//!   and across jobs (`listing`), manual runs (`manual`), kills and
//!   completion reports (`control`), pools (`pools`), how far ClickHouse is
//!   complete (`projection`);
//! - [`missed_fires`]: which fires had no run (`count`), recorded by a
//!   periodic `scan`, counted by a `gauge`;
//! - [`channels`]: alert channels (`requests`, `store`);
//! - [`tokens`]: scoped API tokens (`record`, `store`, `requests`);
//! - [`policies`]: the namespaces' target policies;
//! - [`bindings`]: role bindings of people and groups per namespace;
//! - [`audited`]: writes that carry their author's headers (who changed
//!   what);
//! - [`sql`]: every statement sent to ClickHouse (one file per table) and
//!   the bounded reads that send them; the query catalog.
//!
//! The doors, each turning requests into those operations:
//! - [`nats_api`]: the NATS micro service;
//! - [`http`]: the HTTP API (one route table, the OpenAPI document built
//!   from it, bearer tokens);
//! - [`console`]: the HTML pages over the same operations (no SQL of its
//!   own).
//!
//! Shared by the doors and the operations:
//! - [`caller`]: who calls and what their grants allow (checked by the
//!   operations);
//! - [`request_body`]: a body as a typed request, and a put's
//!   `expected_revision`;
//! - [`read_params`]: the read operations' parameters, checked;
//! - [`limits`]: the configured limits.
//!
//! The service itself, `service` ([`run`]): its topology while health
//! answers, the state every request shares, its background tasks by what
//! stopping means, the NATS API's watch and the HTTP server.

pub mod audited;
pub mod bindings;
pub mod caller;
pub mod channels;
pub mod console;
pub mod http;
pub mod jobs;
pub mod limits;
pub mod missed_fires;
pub mod nats_api;
pub mod people;
pub mod policies;
pub mod read_params;
pub mod request_body;
pub mod runs;
mod service;
pub mod sql;
pub mod tokens;

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
    /// The read of the jobs bucket the catalog follows (its own by default;
    /// in `jetcron all` shared with the chain index, after the ticker's).
    pub jobs_feed: jetcron_io::job_feed::JobFeed,
    /// The identity provider people sign in with (`--oidc-*`), if any.
    pub oidc: Option<people::provider::ProviderSettings>,
}

/// What request handlers share.
pub struct GatewayState {
    pub nats: async_nats::Client,
    pub js: async_nats::jetstream::Context,
    pub jobs: jobs::store::JobStore,
    /// `jetcron_channels`: alert channels.
    pub channels: channels::store::ChannelStore,
    /// `jetcron_tokens`: the scoped API tokens.
    pub tokens: tokens::store::TokenStore,
    /// `jetcron_policies`: the namespaces' target policies.
    pub policies: policies::PolicyStore,
    /// `jetcron_bindings`: who holds which role in a namespace.
    pub bindings: bindings::BindingStore,
    /// `jetcron_sessions`: the console's sessions.
    pub sessions: console::session::SessionStore,
    /// `jetcron_sign_ins`: sign-ins waiting for the identity provider.
    pub pending_sign_ins: console::pending_sign_ins::PendingSignIns,
    /// `jetcron_users`: local users and their password hashes.
    pub local_users: people::local_users::LocalUsers,
    /// Password sign-ins counted against their limits.
    pub sign_in_guard: people::sign_in_limits::SignInGuard,
    /// The bindings, followed in memory: a person's grants.
    pub bound_roles: Arc<people::bound_roles::BoundRoles>,
    /// The identity provider people sign in with, if there is one.
    pub provider: Option<Arc<people::provider::Provider>>,
    /// One small row per job, for the console's table and the job limit.
    pub catalog: jobs::catalog::JobCatalog,
    pub runs: runs::history::RunHistory,
    /// `jetcron_running`: kill requests.
    pub running: async_nats::jetstream::kv::Store,
    pub http_auth: http::auth::HttpAuth,
    pub limits: limits::Limits,
    /// Missed fires of the last hour, for `/metrics`.
    pub missed: missed_fires::gauge::MissedGauge,
    /// Every service of this process, for `/readyz`.
    pub readiness: Readiness,
    /// Every "now" of the gateway.
    pub clock: Arc<dyn Clock>,
    /// Base URL of Grafana, for the console's links.
    pub grafana_url: Option<String>,
}
