//! The NATS topology every service relies on: created when missing,
//! verified when present, and waited for while a cluster forms.
//!
//! Each service calls the `ensure_*` functions for what it touches, so any
//! start order works and a fresh server needs no setup step. On a cluster
//! several processes start at once, the meta leader may still be elected and
//! R3 streams need their peers: an `ensure_*` call then fails with a timeout,
//! "no responders" or "insufficient resources". [`converge`] retries it with
//! growing, jittered waits until it succeeds or the process is asked to stop;
//! only a [`TopologyError::Mismatch`] ends it, because no retry can change it.
//!
//! A stream or bucket that exists is checked against what jetcron would make
//! ([`check`]): fewer replicas than asked for, another retention or storage,
//! missing subjects are a mismatch, named with what differs and how to move
//! on (`jetcron migrate`, docs/operations.md). Limits an operator may have
//! tuned (age, history, duplicate window) are only logged.

use std::future::Future;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv, stream};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::readiness::Readiness;
use crate::retry::{LogLimiter, RetryDelay};
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

/// A service waiting for its topology, one stream, bucket or consumer at a
/// time: each [`Converging::ensure`] is retried on its own (100 ms doubling
/// to 5 s, jittered) until it succeeds, returns a mismatch, or `shutdown` is
/// cancelled, so what is already there is not asked again while another
/// stream is still electing. Meanwhile `readiness` says what the service
/// waits for and why; [`Converging::ready`] marks it ready and logs it.
pub struct Converging<'a> {
    service: &'a str,
    readiness: &'a Readiness,
    shutdown: &'a CancellationToken,
    started: Instant,
    log: LogLimiter,
}

impl<'a> Converging<'a> {
    pub fn start(
        service: &'a str,
        readiness: &'a Readiness,
        shutdown: &'a CancellationToken,
    ) -> Self {
        readiness.waiting(service, "NATS topology");
        Self {
            service,
            readiness,
            shutdown,
            started: Instant::now(),
            log: LogLimiter::per_10s(),
        }
    }

    /// Retry `ensure` until it succeeds (`Some`), returns a mismatch
    /// (`Err`), or shutdown is asked for (`None`).
    pub async fn ensure<T, F, Fut>(&mut self, mut ensure: F) -> anyhow::Result<Option<T>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut delay = RetryDelay::nats();
        loop {
            match ensure().await {
                Ok(value) => return Ok(Some(value)),
                Err(TopologyError::Mismatch(message)) => {
                    self.readiness.waiting(self.service, message.clone());
                    return Err(anyhow::anyhow!(message));
                }
                Err(e) => {
                    self.readiness
                        .waiting(self.service, format!("NATS topology: {e}"));
                    if let Some(failures) = self.log.admit() {
                        warn!(
                            service = self.service,
                            failures,
                            waited_ms = self.started.elapsed().as_millis() as u64,
                            error = %e,
                            "NATS topology not available yet, retrying (a cluster electing, \
                             or a stream only an admin may create)"
                        );
                    }
                }
            }
            if delay.sleep(self.shutdown).await {
                return Ok(None);
            }
        }
    }

    /// Everything is there: say so.
    pub fn ready(self) {
        self.readiness.ready(self.service);
        info!(
            service = self.service,
            waited_ms = self.started.elapsed().as_millis() as u64,
            "ready: NATS topology verified"
        );
    }
}

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

/// What jetcron needs of a stream (or a bucket's stream), beside its name.
#[derive(Debug, Clone)]
struct Wanted<'a> {
    /// "stream JETCRON_DUE", "KV bucket jetcron_jobs".
    what: String,
    config: &'a stream::Config,
    /// Subjects that must be captured (a subset of `config.subjects`).
    subjects: Vec<String>,
}

/// Compare an existing stream with what jetcron would create: `Err` with
/// every blocking difference, `Ok` with the tolerated ones.
fn check(existing: &stream::Config, wanted: &Wanted<'_>) -> Result<Vec<String>> {
    let want = wanted.config;
    let mut blocking = Vec::new();
    let mut tolerated = Vec::new();
    let replicas = existing.num_replicas.max(1);
    if replicas < want.num_replicas.max(1) {
        blocking.push(format!(
            "{} replica(s), this process wants {} (--replicas / JETCRON_REPLICAS)",
            replicas, want.num_replicas
        ));
    }
    if existing.retention != want.retention {
        blocking.push(format!(
            "retention {:?}, jetcron needs {:?}",
            existing.retention, want.retention
        ));
    }
    if existing.storage != want.storage {
        blocking.push(format!(
            "storage {:?}, jetcron needs {:?}",
            existing.storage, want.storage
        ));
    }
    let missing: Vec<&String> = wanted
        .subjects
        .iter()
        .filter(|s| !existing.subjects.contains(s))
        .collect();
    if !missing.is_empty() {
        blocking.push(format!("no subject {missing:?}"));
    }
    if !want.duplicate_window.is_zero() && existing.duplicate_window < want.duplicate_window {
        tolerated.push(format!(
            "duplicate window {:?} (jetcron makes {:?})",
            existing.duplicate_window, want.duplicate_window
        ));
    }
    if existing.max_age != want.max_age {
        tolerated.push(format!(
            "max age {:?} (jetcron makes {:?})",
            existing.max_age, want.max_age
        ));
    }
    // The server stores "no limit" as -1 where a config says 0.
    let per_subject = |n: i64| (n > 0).then_some(n);
    if per_subject(existing.max_messages_per_subject) != per_subject(want.max_messages_per_subject)
    {
        tolerated.push(format!(
            "{} messages per subject (jetcron makes {})",
            existing.max_messages_per_subject, want.max_messages_per_subject
        ));
    }
    if blocking.is_empty() {
        return Ok(tolerated);
    }
    let replicas_only = blocking.len() == 1 && replicas < want.num_replicas.max(1);
    let how = if replicas_only {
        format!(
            "to give the existing streams and buckets {} replicas run `jetcron migrate --replicas {}` \
             against the cluster (docs/operations.md, \"From one node to three\"), or start this \
             process with --replicas {replicas}",
            want.num_replicas, want.num_replicas
        )
    } else {
        "it was not made by jetcron or by an incompatible version: move it aside \
         (`nats stream rm`, after a backup) or point jetcron at another account"
            .to_string()
    };
    Err(TopologyError::Mismatch(format!(
        "{} exists with settings jetcron cannot use: {}; {how}",
        wanted.what,
        blocking.join("; ")
    )))
}

/// Log what an operator changed (once per process start).
fn log_tolerated(what: &str, tolerated: &[String]) {
    if !tolerated.is_empty() {
        info!(what, differences = %tolerated.join("; "), "using existing settings");
    }
}

/// Get `wanted` or create it, then check it.
async fn ensure_stream(js: &jetstream::Context, wanted: Wanted<'_>) -> Result<stream::Stream> {
    let stream = match js.get_stream(&wanted.config.name).await {
        Ok(stream) => stream,
        Err(e) if is_not_found(&e) => js
            .create_stream(wanted.config.clone())
            .await
            .map_err(|e| TopologyError::unavailable(format!("create {}", wanted.what), e))?,
        Err(e) => {
            return Err(TopologyError::unavailable(
                format!("look up {}", wanted.what),
                e,
            ))
        }
    };
    let tolerated = check(&stream.cached_info().config, &wanted)?;
    log_tolerated(&wanted.what, &tolerated);
    Ok(stream)
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

/// Get the KV bucket `config.bucket` or create it, then check its stream.
async fn ensure_bucket(js: &jetstream::Context, config: kv::Config) -> Result<kv::Store> {
    let what = format!("KV bucket {}", config.bucket);
    let stream_name = format!("KV_{}", config.bucket);
    let store = match js.get_stream(&stream_name).await {
        Ok(_) => js
            .get_key_value(&config.bucket)
            .await
            .map_err(|e| TopologyError::unavailable(format!("open {what}"), e))?,
        Err(e) if is_not_found(&e) => js
            .create_key_value(config.clone())
            .await
            .map_err(|e| TopologyError::unavailable(format!("create {what}"), e))?,
        Err(e) => return Err(TopologyError::unavailable(format!("look up {what}"), e)),
    };
    let wanted_config = stream::Config {
        name: stream_name,
        subjects: vec![format!("$KV.{}.>", config.bucket)],
        num_replicas: config.num_replicas,
        storage: config.storage,
        max_age: config.max_age,
        max_messages_per_subject: config.history,
        ..Default::default()
    };
    let wanted = Wanted {
        what: what.clone(),
        subjects: wanted_config.subjects.clone(),
        config: &wanted_config,
    };
    let tolerated = check(&store.stream.cached_info().config, &wanted)?;
    log_tolerated(&what, &tolerated);
    Ok(store)
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
) -> Result<kv::Store> {
    let config = jobs_bucket_stream(options);
    let what = format!("KV bucket {}", subjects::JOBS_BUCKET);
    let wanted = Wanted {
        what: what.clone(),
        subjects: config.subjects.clone(),
        config: &config,
    };
    ensure_stream(js, wanted).await?;
    js.get_key_value(subjects::JOBS_BUCKET)
        .await
        .map_err(|e| TopologyError::unavailable(format!("open {what}"), e))
}

/// The stream of the jobs bucket: KV conventions, no rollup, no purge.
fn jobs_bucket_stream(options: &TopologyOptions) -> stream::Config {
    stream::Config {
        name: format!("KV_{}", subjects::JOBS_BUCKET),
        description: Some(
            "jetcron job definitions (key = job id); history is the audit log".into(),
        ),
        subjects: vec![format!("$KV.{}.>", subjects::JOBS_BUCKET)],
        max_messages_per_subject: options.jobs_history.max(1),
        // The server refuses bigger values, `nats kv put` included.
        max_message_size: jetcron_core::job::MAX_DEFINITION_BYTES as i32,
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
) -> Result<kv::Store> {
    ensure_bucket(
        js,
        kv::Config {
            bucket: subjects::TICKER_BUCKET.to_string(),
            description: "jetcron ticker shard leases and fired-up-to watermarks".into(),
            history: 1,
            storage: stream::StorageType::File,
            num_replicas: options.replicas.max(1),
            ..Default::default()
        },
    )
    .await
}

/// The tickers' snapshots: one object per shard holding its jobs in their
/// held form, read by a replica taking the shard over instead of the whole
/// jobs bucket (`jetcron_ticker::snapshot`). Each write replaces the
/// shard's object; nothing else is kept.
pub async fn ensure_ticker_snapshots(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<jetstream::object_store::ObjectStore> {
    let bucket = subjects::TICKER_SNAPSHOTS_BUCKET;
    let what = format!("object store {bucket}");
    let stream_name = format!("OBJ_{bucket}");
    let existing = match js.get_stream(&stream_name).await {
        Ok(stream) => stream.cached_info().config.clone(),
        Err(e) if is_not_found(&e) => {
            return js
                .create_object_store(jetstream::object_store::Config {
                    bucket: bucket.to_string(),
                    description: Some(
                        "jetcron ticker: each shard's jobs, for the replica that takes it over"
                            .into(),
                    ),
                    storage: stream::StorageType::File,
                    num_replicas: options.replicas.max(1),
                    ..Default::default()
                })
                .await
                .map_err(|e| TopologyError::unavailable(format!("create {what}"), e));
        }
        Err(e) => return Err(TopologyError::unavailable(format!("look up {what}"), e)),
    };
    // An object store's stream as the client makes it: chunks and metadata.
    let wanted_config = stream::Config {
        name: stream_name,
        subjects: vec![format!("$O.{bucket}.C.>"), format!("$O.{bucket}.M.>")],
        num_replicas: options.replicas.max(1),
        storage: stream::StorageType::File,
        ..Default::default()
    };
    let wanted = Wanted {
        what: what.clone(),
        subjects: wanted_config.subjects.clone(),
        config: &wanted_config,
    };
    let tolerated = check(&existing, &wanted)?;
    log_tolerated(&what, &tolerated);
    js.get_object_store(bucket)
        .await
        .map_err(|e| TopologyError::unavailable(format!("open {what}"), e))
}

/// The due events stream: a work queue, each due event consumed once per pool.
pub async fn ensure_due_stream(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<stream::Stream> {
    let config = stream::Config {
        name: subjects::DUE_STREAM.to_string(),
        description: Some("jetcron due events: one per (job, scheduled time)".into()),
        subjects: vec![subjects::DUE_SUBJECTS.to_string()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: options.due_duplicate_window,
        num_replicas: options.replicas.max(1),
        ..Default::default()
    };
    ensure_stream(js, Wanted::stream(&config)).await
}

/// The run events stream, read by the projector (and anyone curious); it
/// also holds the job events `job.rejected` and `fire.missed`. A stream made
/// by an older jetcron, without those subjects, gets them added.
pub async fn ensure_runs_stream(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<stream::Stream> {
    let config = stream::Config {
        name: subjects::RUNS_STREAM.to_string(),
        description: Some("jetcron run events (every step of every run) and job.rejected".into()),
        subjects: [
            subjects::RUNS_SUBJECTS,
            subjects::JOB_REJECTED_SUBJECT,
            subjects::FIRE_MISSED_SUBJECT,
        ]
        .iter()
        .map(ToString::to_string)
        .collect(),
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        max_age: options.runs_max_age,
        duplicate_window: Duration::from_secs(120),
        num_replicas: options.replicas.max(1),
        ..Default::default()
    };
    // Only the run events are required; the job events' subjects are added
    // below when missing (an older jetcron made the stream).
    let wanted = Wanted {
        what: format!("stream {}", subjects::RUNS_STREAM),
        subjects: vec![subjects::RUNS_SUBJECTS.to_string()],
        config: &config,
    };
    let stream = ensure_stream(js, wanted).await?;
    let mut existing = stream.cached_info().config.clone();
    let missing: Vec<String> = config
        .subjects
        .iter()
        .filter(|w| !existing.subjects.contains(w))
        .cloned()
        .collect();
    if !missing.is_empty() {
        existing.subjects.extend(missing.iter().cloned());
        // Needs STREAM.UPDATE, which only the admin role has (infra/nats):
        // without it the stream works as before, and the events of the
        // missing subjects are refused until an admin starts a service once.
        if let Err(e) = js.update_stream(existing).await {
            warn!(
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
) -> Result<stream::Stream> {
    let config = stream::Config {
        name: subjects::DEAD_LETTER_STREAM.to_string(),
        description: Some("jetcron events the projector could not store, and why".into()),
        subjects: vec![subjects::DEAD_LETTER_SUBJECTS.to_string()],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        max_age: Duration::from_secs(30 * 86_400),
        duplicate_window: Duration::from_secs(120),
        num_replicas: options.replicas.max(1),
        ..Default::default()
    };
    ensure_stream(js, Wanted::stream(&config)).await
}

/// Runs in progress: overlap claims and kill requests. Claims carry their own
/// expiry (refreshed while the run goes on); the bucket's age limit only
/// sweeps what nobody will read again.
pub async fn ensure_running_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    ensure_bucket(
        js,
        kv::Config {
            bucket: subjects::RUNNING_BUCKET.to_string(),
            description: "jetcron runs in progress: overlap claims and kill requests".into(),
            history: 1,
            max_age: options.running_max_age,
            storage: stream::StorageType::File,
            num_replicas: options.replicas.max(1),
            ..Default::default()
        },
    )
    .await
}

/// The alert channels bucket (key = channel name), history kept like the
/// jobs bucket's so a changed channel can be traced.
pub async fn ensure_channels_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    ensure_bucket(
        js,
        kv::Config {
            bucket: subjects::CHANNELS_BUCKET.to_string(),
            description: "jetcron alert channels (key = channel name)".into(),
            history: options.jobs_history.clamp(1, 64),
            max_value_size: jetcron_core::channel::MAX_CHANNEL_BYTES as i32,
            storage: stream::StorageType::File,
            num_replicas: options.replicas.max(1),
            ..Default::default()
        },
    )
    .await
}

/// Open alert incidents (key = `<job id>.<rule>`): one value each, kept
/// until the job recovers.
pub async fn ensure_incidents_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    ensure_bucket(
        js,
        kv::Config {
            bucket: subjects::INCIDENTS_BUCKET.to_string(),
            description: "jetcron open alert incidents (key = <job id>.<rule>)".into(),
            history: 1,
            storage: stream::StorageType::File,
            num_replicas: options.replicas.max(1),
            ..Default::default()
        },
    )
    .await
}

/// Failure notifications waiting for delivery: a work queue, so a webhook
/// that is down gets JetStream's redelivery with backoff like a due event.
pub async fn ensure_notify_stream(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<stream::Stream> {
    let config = stream::Config {
        name: subjects::NOTIFY_STREAM.to_string(),
        description: Some("jetcron failure notifications waiting for delivery".into()),
        subjects: vec![subjects::NOTIFY_SUBJECTS.to_string()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: options.due_duplicate_window,
        max_age: options.runs_max_age,
        num_replicas: options.replicas.max(1),
        ..Default::default()
    };
    ensure_stream(js, Wanted::stream(&config)).await
}

/// Get the durable pull consumer `config.durable_name` of `stream`, or create it.
pub async fn ensure_consumer(
    stream: &stream::Stream,
    config: jetstream::consumer::pull::Config,
) -> Result<jetstream::consumer::PullConsumer> {
    let name = config.durable_name.clone().unwrap_or_default();
    stream
        .get_or_create_consumer(&name, config)
        .await
        .map_err(|e| {
            TopologyError::unavailable(
                format!(
                    "consumer {name} on stream {}",
                    stream.cached_info().config.name
                ),
                e,
            )
        })
}

/// A durable pull consumer with `config`, whose ack wait and `backoff` are
/// changed to `config`'s when it exists with others (jetcron's defaults
/// became shorter: they bound how late work lost with a process comes
/// back).
pub async fn ensure_consumer_acking_within(
    stream: &stream::Stream,
    config: jetstream::consumer::pull::Config,
) -> Result<jetstream::consumer::PullConsumer> {
    let mut consumer = ensure_consumer(stream, config.clone()).await?;
    let had = &consumer.cached_info().config;
    let (had_wait, had_backoff) = (had.ack_wait, had.backoff.clone());
    if had_wait != config.ack_wait || had_backoff != config.backoff {
        let (wanted, wanted_backoff) = (config.ack_wait, config.backoff.clone());
        let name = config.durable_name.clone().unwrap_or_default();
        consumer = update_consumer(stream, config).await?;
        tracing::info!(
            consumer = %name,
            from_ms = had_wait.as_millis() as u64,
            to_ms = wanted.as_millis() as u64,
            from_backoff = ?had_backoff,
            to_backoff = ?wanted_backoff,
            "changed the consumer's ack wait"
        );
    }
    Ok(consumer)
}

/// Change the settings of an existing durable pull consumer.
pub async fn update_consumer(
    stream: &stream::Stream,
    config: jetstream::consumer::pull::Config,
) -> Result<jetstream::consumer::PullConsumer> {
    let name = config.durable_name.clone().unwrap_or_default();
    stream.update_consumer(config).await.map_err(|e| {
        TopologyError::unavailable(
            format!(
                "update consumer {name} on stream {}",
                stream.cached_info().config.name
            ),
            e,
        )
    })
}

impl<'a> Wanted<'a> {
    /// A stream that must capture every subject of its configuration.
    fn stream(config: &'a stream::Config) -> Self {
        Self {
            what: format!("stream {}", config.name),
            subjects: config.subjects.clone(),
            config,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(replicas: usize) -> stream::Config {
        stream::Config {
            name: "JETCRON_DUE".into(),
            subjects: vec!["jetcron.due.>".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            duplicate_window: Duration::from_secs(600),
            num_replicas: replicas,
            ..Default::default()
        }
    }

    #[test]
    fn the_same_settings_pass_and_more_replicas_are_fine() {
        let wanted = due(3);
        assert_eq!(
            check(&due(3), &Wanted::stream(&wanted)).expect("same"),
            Vec::<String>::new()
        );
        let one = due(1);
        assert!(
            check(&due(3), &Wanted::stream(&one)).is_ok(),
            "R3 serves an R1 process"
        );
    }

    #[test]
    fn fewer_replicas_than_asked_for_name_the_migration() {
        let wanted = due(3);
        let err = check(&due(1), &Wanted::stream(&wanted)).expect_err("R1 is not R3");
        let text = err.to_string();
        assert!(
            text.starts_with("stream JETCRON_DUE exists with settings jetcron cannot use: 1 replica(s), this process wants 3"),
            "{text}"
        );
        assert!(text.contains("jetcron migrate --replicas 3"), "{text}");
        assert!(matches!(err, TopologyError::Mismatch(_)));
    }

    #[test]
    fn another_retention_or_missing_subjects_block_and_limits_are_tolerated() {
        let wanted = due(1);
        let mut limits = due(1);
        limits.retention = stream::RetentionPolicy::Limits;
        limits.subjects = vec!["other.>".into()];
        let text = check(&limits, &Wanted::stream(&wanted))
            .expect_err("not a work queue")
            .to_string();
        assert!(
            text.contains("retention Limits, jetcron needs WorkQueue"),
            "{text}"
        );
        assert!(text.contains("no subject [\"jetcron.due.>\"]"), "{text}");
        assert!(text.contains("not made by jetcron"), "{text}");

        let mut tuned = due(1);
        tuned.duplicate_window = Duration::from_secs(2);
        tuned.max_age = Duration::from_secs(3600);
        let tolerated = check(&tuned, &Wanted::stream(&wanted)).expect("tuned limits are fine");
        assert_eq!(tolerated.len(), 2, "{tolerated:?}");
    }
}
