//! The NATS topology every service relies on: created when missing,
//! verified when present, and waited for while a cluster forms.
//!
//! Each service calls the `ensure_*` functions for what it touches, so any
//! start order works and a fresh server needs no setup step. On a cluster
//! several processes start at once, the meta leader may still be elected and
//! R3 streams need their peers: an `ensure_*` call then fails with a timeout,
//! "no responders" or "insufficient resources". [`Converging`] retries it with
//! growing, jittered waits until it succeeds or the process is asked to stop;
//! only a [`TopologyError::Mismatch`] ends it, because no retry can change it.
//!
//! A stream or bucket that exists is checked against what jetcron would make
//! ([`verify`]): fewer replicas than asked for, another retention or storage,
//! missing subjects are a mismatch, named with what differs and how to move
//! on (`jetcron migrate`, docs/operations.md). Limits an operator may have
//! tuned (age, history, duplicate window) are only logged.
//!
//! A service declares what it needs as data ([`Need`], one list per
//! service) and [`Converging::ensure_needs`] makes or verifies it all in
//! one place; its own consumers it ensures one by one with
//! [`Converging::ensure`].
//!
//! Layout: [`parts`] makes each stream and bucket, [`consumers`] the
//! durable consumers, [`verify`] compares what exists with what jetcron
//! would make, [`converging`] retries while a cluster forms, [`needs`]
//! is the list a service declares.

mod consumers;
mod converging;
mod needs;
mod parts;
mod verify;

pub use consumers::{ensure_consumer, ensure_consumer_acking_within, update_consumer};
pub use converging::Converging;
pub use needs::{Ensured, Need};
pub use parts::*;

use std::time::Duration;

use async_nats::jetstream;
use jetcron_core::subjects;

/// Knobs of the topology; defaults suit one machine.
#[derive(Debug, Clone)]
pub struct TopologyOptions {
    /// Replicas of streams and bucket (1 on one server, 3 on a cluster).
    pub replicas: usize,
    /// Window in which `JETCRON_DUE` drops a second publish with the same `Nats-Msg-Id`.
    pub due_duplicate_window: Duration,
    /// How long run events stay in `JETCRON_RUNS` (ClickHouse keeps the history).
    pub runs_max_age: Duration,
    /// Revisions kept per job in `jetcron_jobs` (the audit log).
    pub jobs_history: i64,
    /// How long a kill request (and a claim nobody refreshes) stays in `jetcron_running`.
    pub running_max_age: Duration,
}

impl Default for TopologyOptions {
    fn default() -> Self {
        Self {
            replicas: 1,
            due_duplicate_window: Duration::from_secs(10 * 60),
            runs_max_age: Duration::from_secs(7 * 24 * 3600),
            jobs_history: 64,
            running_max_age: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Why a stream, bucket or consumer is not (yet) as a service needs it.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// It exists with settings jetcron cannot work with; retrying will not help.
    #[error("{0}")]
    Mismatch(String),
    /// Anything else: an election, no responders, a timeout, a stream that a
    /// process with more permissions has not created yet. Worth retrying.
    #[error("{what}: {source:#}")]
    Unavailable {
        what: String,
        #[source]
        source: anyhow::Error,
    },
}

impl TopologyError {
    /// A failure of `what` that may pass.
    pub fn unavailable(what: impl Into<String>, source: impl Into<anyhow::Error>) -> Self {
        Self::Unavailable {
            what: what.into(),
            source: source.into(),
        }
    }
}

pub type Result<T, E = TopologyError> = std::result::Result<T, E>;

/// The JetStream context for topology requests: a stream without a leader
/// does not answer, and a short timeout retries sooner.
pub fn context(client: async_nats::Client) -> jetstream::Context {
    jetstream::context::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(client)
}

/// How long a request that makes the server go through a whole stream may
/// take: creating a consumer that starts at every key's last value (the
/// watch of `jetcron_jobs`, a pass over it). The server works out every
/// key's last sequence before it answers. At ten million jobs that took
/// longer than the 2 s of [`context`]; each retry asked again while the
/// server still worked on the earlier requests, and the watch never
/// started (nats-server 2.15.1 at 110 % CPU in `allLastSeqsLocked`).
pub const WHOLE_STREAM_TIMEOUT: Duration = Duration::from_secs(300);

/// The JetStream context for requests that go through a whole stream
/// ([`WHOLE_STREAM_TIMEOUT`]).
pub fn whole_stream_context(client: async_nats::Client) -> jetstream::Context {
    jetstream::context::ContextBuilder::new()
        .timeout(WHOLE_STREAM_TIMEOUT)
        .build(client)
}

/// Every stream jetcron makes: its KV buckets (`KV_<bucket>`), its object
/// store (`OBJ_<bucket>`) and its streams. `jetcron migrate` moves each to
/// another replica count, so one left out stays behind and the services
/// that want the new count refuse it; a stream added above belongs here.
pub fn stream_names() -> Vec<String> {
    let buckets = [
        subjects::JOBS_BUCKET,
        subjects::TICKER_BUCKET,
        subjects::RUNNING_BUCKET,
        subjects::CHANNELS_BUCKET,
        subjects::INCIDENTS_BUCKET,
        subjects::TOKENS_BUCKET,
        subjects::POLICIES_BUCKET,
        subjects::BINDINGS_BUCKET,
        subjects::SESSIONS_BUCKET,
        subjects::USERS_BUCKET,
        subjects::SIGN_INS_BUCKET,
    ]
    .map(|bucket| format!("KV_{bucket}"));
    let streams = [
        subjects::DUE_STREAM,
        subjects::RUNS_STREAM,
        subjects::NOTIFY_STREAM,
        subjects::DEAD_LETTER_STREAM,
    ]
    .map(str::to_string);
    buckets
        .into_iter()
        .chain([format!("OBJ_{}", subjects::TICKER_SNAPSHOTS_BUCKET)])
        .chain(streams)
        .collect()
}

/// Whether a stream lookup failed because there is no such stream.
pub fn is_not_found(error: &jetstream::context::GetStreamError) -> bool {
    matches!(
        error.kind(),
        jetstream::context::GetStreamErrorKind::JetStream(ref e)
            if e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}
