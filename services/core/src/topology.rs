//! The NATS topology every service relies on, created idempotently at start.
//!
//! Each service calls the `ensure_*` functions for what it touches, so any
//! start order works and a fresh server needs no setup step. Existing streams
//! and buckets are left as they are (an operator may have tuned them, e.g. to
//! R3 when they added cluster nodes).

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, kv, stream};

use crate::subjects;

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

/// The job definitions bucket.
///
/// Made as the stream `nats kv add` would make (`KV_jetcron_jobs` on
/// `$KV.jetcron_jobs.>`, one message per revision, direct gets), except that
/// it refuses rollups and purges: the bucket's history is the audit log, so
/// `nats kv purge` (a rollup) and `nats stream purge` are refused for every
/// user; `nats kv del` leaves a delete marker and the history stays. An admin
/// who must erase a definition edits the stream first. A bucket made by an
/// older jetcron (with rollups allowed) is used as it is.
pub async fn ensure_jobs_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> anyhow::Result<kv::Store> {
    if let Ok(store) = js.get_key_value(subjects::JOBS_BUCKET).await {
        return Ok(store);
    }
    let stream_name = format!("KV_{}", subjects::JOBS_BUCKET);
    js.get_or_create_stream(jobs_bucket_stream(&stream_name, options))
        .await
        .with_context(|| format!("create KV bucket {}", subjects::JOBS_BUCKET))?;
    js.get_key_value(subjects::JOBS_BUCKET)
        .await
        .with_context(|| format!("open KV bucket {}", subjects::JOBS_BUCKET))
}

/// The stream of the jobs bucket: KV conventions, no rollup, no purge.
fn jobs_bucket_stream(name: &str, options: &TopologyOptions) -> stream::Config {
    stream::Config {
        name: name.to_string(),
        description: Some(
            "jetcron job definitions (key = job id); history is the audit log".into(),
        ),
        subjects: vec![format!("$KV.{}.>", subjects::JOBS_BUCKET)],
        max_messages_per_subject: options.jobs_history.max(1),
        // The server refuses bigger values, `nats kv put` included.
        max_message_size: crate::job::MAX_DEFINITION_BYTES as i32,
        storage: stream::StorageType::File,
        num_replicas: options.replicas.max(1),
        discard: stream::DiscardPolicy::New,
        allow_direct: true,
        allow_rollup: false,
        deny_delete: true,
        deny_purge: true,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    }
}

/// The tickers' coordination bucket: one key per shard (owner, lease,
/// watermark) and one per live replica. History 1: only the latest matters.
pub async fn ensure_ticker_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> anyhow::Result<kv::Store> {
    if let Ok(store) = js.get_key_value(subjects::TICKER_BUCKET).await {
        return Ok(store);
    }
    js.create_key_value(kv::Config {
        bucket: subjects::TICKER_BUCKET.to_string(),
        description: "jetcron ticker shard leases and fired-up-to watermarks".into(),
        history: 1,
        storage: stream::StorageType::File,
        num_replicas: options.replicas,
        ..Default::default()
    })
    .await
    .with_context(|| format!("create KV bucket {}", subjects::TICKER_BUCKET))
}

/// The due events stream: a work queue, each due event consumed once per pool.
pub async fn ensure_due_stream(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> anyhow::Result<stream::Stream> {
    js.get_or_create_stream(stream::Config {
        name: subjects::DUE_STREAM.to_string(),
        description: Some("jetcron due events: one per (job, scheduled time)".into()),
        subjects: vec![subjects::DUE_SUBJECTS.to_string()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: options.due_duplicate_window,
        num_replicas: options.replicas,
        ..Default::default()
    })
    .await
    .with_context(|| format!("create stream {}", subjects::DUE_STREAM))
}

/// The run events stream, read by the projector (and anyone curious); it
/// also holds the job events `job.rejected` and `fire.missed`. A stream made
/// by an older jetcron, without those subjects, gets them added.
pub async fn ensure_runs_stream(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> anyhow::Result<stream::Stream> {
    let wanted = [
        subjects::RUNS_SUBJECTS,
        subjects::JOB_REJECTED_SUBJECT,
        subjects::FIRE_MISSED_SUBJECT,
    ];
    let stream = js
        .get_or_create_stream(stream::Config {
            name: subjects::RUNS_STREAM.to_string(),
            description: Some(
                "jetcron run events (every step of every run) and job.rejected".into(),
            ),
            subjects: wanted.iter().map(ToString::to_string).collect(),
            retention: stream::RetentionPolicy::Limits,
            storage: stream::StorageType::File,
            max_age: options.runs_max_age,
            duplicate_window: Duration::from_secs(120),
            num_replicas: options.replicas,
            ..Default::default()
        })
        .await
        .with_context(|| format!("create stream {}", subjects::RUNS_STREAM))?;
    let mut config = stream.cached_info().config.clone();
    let missing: Vec<_> = wanted
        .iter()
        .filter(|w| !config.subjects.iter().any(|s| s == *w))
        .collect();
    if !missing.is_empty() {
        config
            .subjects
            .extend(missing.iter().map(|s| s.to_string()));
        // Needs STREAM.UPDATE, which only the admin role has (infra/nats):
        // without it the stream works as before, and the events of the
        // missing subjects are refused until an admin starts a service once.
        if let Err(e) = js.update_stream(config).await {
            tracing::warn!(
                stream = subjects::RUNS_STREAM,
                missing = ?missing,
                error = %e,
                "cannot add subjects to the stream; start any jetcron service once as admin"
            );
        }
    }
    Ok(stream)
}

/// Events the projector could not store, with the reason in a header.
pub async fn ensure_dead_letter_stream(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> anyhow::Result<stream::Stream> {
    js.get_or_create_stream(stream::Config {
        name: subjects::DEAD_LETTER_STREAM.to_string(),
        description: Some("jetcron events the projector could not store, and why".into()),
        subjects: vec![subjects::DEAD_LETTER_SUBJECTS.to_string()],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        max_age: Duration::from_secs(30 * 86_400),
        duplicate_window: Duration::from_secs(120),
        num_replicas: options.replicas,
        ..Default::default()
    })
    .await
    .with_context(|| format!("create stream {}", subjects::DEAD_LETTER_STREAM))
}

/// Runs in progress: overlap claims and kill requests. Claims carry their own
/// expiry (refreshed while the run goes on); the bucket's age limit only
/// sweeps what nobody will read again.
pub async fn ensure_running_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> anyhow::Result<kv::Store> {
    if let Ok(store) = js.get_key_value(subjects::RUNNING_BUCKET).await {
        return Ok(store);
    }
    js.create_key_value(kv::Config {
        bucket: subjects::RUNNING_BUCKET.to_string(),
        description: "jetcron runs in progress: overlap claims and kill requests".into(),
        history: 1,
        max_age: options.running_max_age,
        storage: stream::StorageType::File,
        num_replicas: options.replicas,
        ..Default::default()
    })
    .await
    .with_context(|| format!("create KV bucket {}", subjects::RUNNING_BUCKET))
}

/// Failure notifications waiting for delivery: a work queue, so a webhook
/// that is down gets JetStream's redelivery with backoff like a due event.
pub async fn ensure_notify_stream(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> anyhow::Result<stream::Stream> {
    js.get_or_create_stream(stream::Config {
        name: subjects::NOTIFY_STREAM.to_string(),
        description: Some("jetcron failure notifications waiting for delivery".into()),
        subjects: vec![subjects::NOTIFY_SUBJECTS.to_string()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: options.due_duplicate_window,
        max_age: options.runs_max_age,
        num_replicas: options.replicas,
        ..Default::default()
    })
    .await
    .with_context(|| format!("create stream {}", subjects::NOTIFY_STREAM))
}
