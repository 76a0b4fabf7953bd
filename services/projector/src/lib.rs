//! The projector: copies run events from `JETCRON_RUNS` (durable consumer
//! `projector`) into ClickHouse `jetcron.run_events`, and the job events
//! (`job.rejected`, `fire.missed`) stored in the same stream into
//! `jetcron.job_events`. ClickHouse
//! itself keeps the latest state per run from there (`jetcron.run_state`).
//!
//! It fetches a batch (bounded by size and time), inserts it, and acks the
//! messages only after ClickHouse accepted them: while ClickHouse is away the
//! batch stays unacked and is retried with backoff, so nothing is lost and
//! JetStream holds the backlog. Delivery is at least once; rows carry
//! `event_id` and every table and query dedups on it, so a replay does not
//! change answers. A fetched batch is decoded into rows by subject
//! ([`batch`]). What cannot be stored ([`insert`] tells a refusal from an
//! outage) is parked in the dead letter stream ([`dead_letter`]) and counted.
//!
//! Owns: the `projector` consumer and the rows of `jetcron.run_events` and
//! `jetcron.job_events`; applies the ClickHouse DDL at start.

pub mod batch;
pub mod dead_letter;
pub mod insert;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, message::AckKind};
use futures::StreamExt as _;
use jetcron_core::subjects;
use jetcron_io::clickhouse_schema::{self, ClickHouseOptions};
use jetcron_io::job_feed::FirstRead;
use jetcron_io::readiness::Readiness;
use jetcron_io::retry::{LogLimiter, RetryDelay};
use jetcron_io::tasks::{ServiceTasks, TaskKind};
use jetcron_io::topology::{self, Need, TopologyOptions};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use batch::{Batch, Decoded, Row};

/// A batch of job revisions is this many times smaller than one of run
/// events. Revisions come one at a time, except after a bulk load: a
/// million `nats kv put`s are a million revisions, each with its whole
/// definition, and two batches of 20,000 of them (one stored while the
/// next is read) raised `jetcron all`'s peak by about 90 MB at a million
/// jobs (docs/benchmarks.md).
const REVISIONS_PER_BATCH_DIVISOR: usize = 10;

/// Projector settings.
#[derive(Debug, Clone)]
pub struct ProjectorConfig {
    pub clickhouse: ClickHouseOptions,
    /// Most events per insert.
    pub batch_size: usize,
    /// Longest wait to fill a batch.
    pub batch_wait: Duration,
    /// Durable consumer name; a new name replays the stream from its start.
    pub consumer: String,
    /// Ack wait of the consumer (set when a projector starts): a batch
    /// ClickHouse has not taken by then is handed out again, and the
    /// duplicates collapse on `event_id`. It also bounds how late the events
    /// of a fetch lost on the way (its NATS node killed) reach ClickHouse:
    /// at 2 minutes, the leader-kill chaos test waited 90 s for runs that
    /// came after (issue 39).
    pub ack_wait: Duration,
    pub topology: TopologyOptions,
    /// Told when the topology is verified (`/readyz`).
    pub readiness: Readiness,
    /// Project every job's revisions only once this has been delivered: in
    /// `jetcron all`, the first read of the process's job feed. A bucket
    /// filled while jetcron was down (a million `nats kv put`s) is as many
    /// revisions to project, and projecting them beside the first read
    /// took half of the start's CPU, nats-server's and jetcron's, before
    /// the ticker's first due event (docs/benchmarks.md).
    pub job_revisions_after: Option<FirstRead>,
}

impl ProjectorConfig {
    pub fn new(clickhouse: ClickHouseOptions) -> Self {
        Self {
            clickhouse,
            batch_size: 20_000,
            batch_wait: Duration::from_millis(200),
            consumer: subjects::PROJECTOR_CONSUMER.to_string(),
            ack_wait: Duration::from_secs(30),
            topology: TopologyOptions::default(),
            readiness: Readiness::default(),
            job_revisions_after: None,
        }
    }
}

/// What the projector has done, for metrics and logs.
#[derive(Debug, Default)]
pub struct ProjectorCounters {
    /// Events stored in ClickHouse.
    pub stored: AtomicU64,
    /// Events parked in the dead letter stream.
    pub parked: AtomicU64,
    /// Inserts that failed on an outage and were retried.
    pub insert_retries: AtomicU64,
    /// Batches stored.
    pub batches: AtomicU64,
}

/// Run the projector until `shutdown` is cancelled.
pub async fn run(
    config: ProjectorConfig,
    client: async_nats::Client,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run_counted(config, client, Arc::default(), shutdown).await
}

/// [`run`], counting into `counters`.
pub async fn run_counted(
    config: ProjectorConfig,
    client: async_nats::Client,
    counters: Arc<ProjectorCounters>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let js = jetstream::new(client);
    let wanted = &config.topology;
    let tjs = topology::context(js.client());
    let mut converging = topology::Converging::start(
        jetcron_io::readiness::PROJECTOR,
        &config.readiness,
        &shutdown,
    );
    let needs = [Need::RunsStream, Need::DeadLetterStream, Need::JobsBucket];
    let Some(ensured) = converging.ensure_needs(&tjs, wanted, &needs).await? else {
        return Ok(());
    };
    let stream = ensured.stream(Need::RunsStream)?;
    let jobs = ensured.bucket(Need::JobsBucket)?;
    let Some(consumer) = converging
        .ensure(|| {
            let config = consumer_config(
                &config,
                &config.consumer,
                "jetcron projector into ClickHouse",
            );
            topology::ensure_consumer_acking_within(&stream, config)
        })
        .await?
    else {
        return Ok(());
    };
    let Some(revisions) = converging
        .ensure(|| {
            let config = consumer_config(
                &config,
                subjects::PROJECTOR_JOBS_CONSUMER,
                "jetcron projector: every revision of a job, with its author, into ClickHouse",
            );
            topology::ensure_consumer_acking_within(&jobs.stream, config)
        })
        .await?
    else {
        return Ok(());
    };
    converging.ready();
    let clickhouse = config.clickhouse.client();
    clickhouse_schema::prepare_when_possible(&clickhouse, config.clickhouse.schema, &shutdown)
        .await;
    info!(batch_size = config.batch_size, consumer = %config.consumer, "projector started");

    // Sampled beside the loop: while ClickHouse is down the loop waits on a
    // batch that cannot be stored, and that is when the backlog matters.
    let mut tasks = ServiceTasks::default();
    let sampling = sample_backlog(consumer.clone(), shutdown.clone());
    tasks.spawn(TaskKind::Abort, "backlog sampler", async move {
        sampling.await;
        Ok(())
    });
    let projecting = Projecting {
        config: &config,
        clickhouse: &clickhouse,
        js: &js,
        counters: &counters,
        shutdown: &shutdown,
    };
    tokio::join!(
        projecting.project(&consumer, "run events", config.batch_size),
        projecting.project_revisions(&revisions),
    );
    info!("projector stopped");
    Ok(())
}

/// The settings of a durable consumer of the projector named `name`.
fn consumer_config(config: &ProjectorConfig, name: &str, description: &str) -> pull::Config {
    pull::Config {
        durable_name: Some(name.to_string()),
        description: Some(description.into()),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: config.ack_wait,
        max_deliver: -1,
        max_ack_pending: (config.batch_size * 4).max(1000) as i64,
        ..Default::default()
    }
}

/// What the projection of one consumer works with.
struct Projecting<'a> {
    config: &'a ProjectorConfig,
    clickhouse: &'a clickhouse::Client,
    js: &'a jetstream::Context,
    counters: &'a Arc<ProjectorCounters>,
    shutdown: &'a CancellationToken,
}

impl Projecting<'_> {
    /// [`Self::project`] the job revisions, once
    /// [`ProjectorConfig::job_revisions_after`] allows.
    async fn project_revisions(&self, consumer: &jetstream::consumer::PullConsumer) {
        if let Some(first_read) = self.config.job_revisions_after.clone() {
            tokio::select! {
                _ = first_read.delivered() => {}
                _ = self.shutdown.cancelled() => return,
            }
            debug!("every job is loaded: job revisions are projected from here");
        }
        let batch_size = (self.config.batch_size / REVISIONS_PER_BATCH_DIVISOR).max(1);
        self.project(consumer, "job revisions", batch_size).await;
    }

    /// Store what `consumer` hands out until the stop, then what is left
    /// of it within [`DRAIN_LIMIT`]; `what` names its events in logs.
    async fn project(
        &self,
        consumer: &jetstream::consumer::PullConsumer,
        what: &str,
        batch_size: usize,
    ) {
        let Projecting {
            config,
            clickhouse,
            js,
            counters,
            shutdown,
        } = *self;
        let mut storing: Option<tokio::task::JoinHandle<bool>> = None;
        // While the consumer has no leader every fetch fails at once: wait longer
        // each time, and say so once in a while.
        let mut delay = RetryDelay::nats();
        let mut failures = LogLimiter::per_10s();
        while !shutdown.is_cancelled() {
            // `batch`, not `fetch`: a fetch returns at once with what is there,
            // which made one insert per loop however short (a dozen a second at
            // 1,000 runs/s, and ClickHouse 18.16 spent half a core creating part
            // files); a batch waits for `batch_size` events or `batch_wait`.
            let fetched = consumer
                .batch()
                .max_messages(batch_size)
                .expires(config.batch_wait.max(Duration::from_millis(100)))
                .messages()
                .await;
            let fetched = match fetched {
                Ok(fetched) => {
                    delay.reset();
                    failures.reset();
                    fetched
                }
                Err(e) => {
                    if let Some(failures) = failures.admit() {
                        warn!(error = %e, failures, "cannot fetch {what}, retrying");
                    }
                    if delay.sleep(shutdown).await {
                        break;
                    }
                    continue;
                }
            };
            // Read to the batch's end even when asked to stop (it ends within
            // `batch_wait`): events the server handed to this batch and left
            // unread would wait out the ack wait, out of the drain's reach.
            let batch = collect(fetched, js, counters).await;
            if batch.is_empty() {
                continue;
            }
            // One batch is stored while the next is fetched and decoded.
            if !finish(storing.take()).await {
                stopped_unsaved();
                return;
            }
            let (clickhouse, js, counters, shutdown) = (
                clickhouse.clone(),
                js.clone(),
                Arc::clone(counters),
                shutdown.clone(),
            );
            storing = Some(tokio::spawn(async move {
                store(&clickhouse, &js, batch, &counters, &shutdown).await
            }));
        }
        if !finish(storing.take()).await {
            stopped_unsaved();
            return;
        }
        drain(consumer, config, clickhouse, js, counters, what).await;
    }
}

/// The decoded rows of one fetch, read to its end (the server's expiry, or
/// the client's a few seconds past it when the server is gone);
/// completion reports are acked and poison parked on the way.
async fn collect(
    mut fetched: jetstream::consumer::pull::Batch,
    js: &jetstream::Context,
    counters: &ProjectorCounters,
) -> Batch {
    let mut batch = Batch::default();
    while let Some(next) = fetched.next().await {
        let message = match next {
            Ok(m) => m,
            Err(e) => {
                debug!(error = %e, "fetch ended early");
                break;
            }
        };
        match batch::decode(&message) {
            Decoded::Row(row) => batch.entries.push((row, message)),
            Decoded::Skip => {
                if let Err(e) = message.ack().await {
                    warn!(error = %e, "cannot ack completion report");
                }
            }
            Decoded::Poison(reason) => park(js, &message, &reason, counters).await,
        }
    }
    batch
}

/// After a shutdown request, store what is already in the stream (in
/// `jetcron all` the executors stopped first, so this is every run event of
/// the process) for at most [`DRAIN_LIMIT`], so ClickHouse is complete when
/// the process exits. What is left stays in the stream for the next start.
async fn drain(
    consumer: &jetstream::consumer::Consumer<pull::Config>,
    config: &ProjectorConfig,
    clickhouse: &clickhouse::Client,
    js: &jetstream::Context,
    counters: &ProjectorCounters,
    what: &str,
) {
    let limit = CancellationToken::new();
    let _timer = tokio_util::task::AbortOnDropHandle::new(tokio::spawn({
        let limit = limit.clone();
        async move {
            tokio::time::sleep(DRAIN_LIMIT).await;
            limit.cancel();
        }
    }));
    let mut stored = 0;
    while !limit.is_cancelled() {
        let Ok(fetched) = consumer
            .fetch()
            .max_messages(config.batch_size)
            .expires(Duration::from_millis(200))
            .messages()
            .await
        else {
            break;
        };
        let batch = collect(fetched, js, counters).await;
        if batch.is_empty() {
            break;
        }
        stored += batch.len();
        if !store(clickhouse, js, batch, counters, &limit).await {
            break;
        }
    }
    if stored > 0 {
        info!(
            events = stored,
            "stored the {what} that arrived while stopping"
        );
    }
}

/// Set `jetcron_projector_backlog` (events pending or unacked on the
/// consumer) every [`BACKLOG_SAMPLE_EVERY`] until shutdown.
async fn sample_backlog(
    mut consumer: jetstream::consumer::PullConsumer,
    shutdown: CancellationToken,
) {
    loop {
        match consumer.info().await {
            Ok(info) => metrics::gauge!("jetcron_projector_backlog")
                .set((info.num_pending + info.num_ack_pending as u64) as f64),
            Err(e) => debug!(error = %e, "cannot sample the projector backlog"),
        }
        if sleep_or_shutdown(BACKLOG_SAMPLE_EVERY, &shutdown).await {
            return;
        }
    }
}

/// Wait for the batch being stored; false when shutdown stopped it unsaved.
async fn finish(storing: Option<tokio::task::JoinHandle<bool>>) -> bool {
    match storing {
        None => true,
        Some(task) => task.await.unwrap_or_else(|e| {
            warn!(error = %e, "storing a batch failed; it will be redelivered");
            false
        }),
    }
}

/// Unacked messages are redelivered to the next projector.
fn stopped_unsaved() {
    info!("projector stopped with an unsaved batch; it will be redelivered");
}

/// Insert `batch` until ClickHouse takes it (parking refused rows), then ack.
/// False when shutdown came first.
async fn store(
    clickhouse: &clickhouse::Client,
    js: &jetstream::Context,
    batch: Batch,
    counters: &ProjectorCounters,
    shutdown: &CancellationToken,
) -> bool {
    let rows: Vec<&Row> = batch.entries.iter().map(|(row, _)| row).collect();
    metrics::histogram!("jetcron_projector_batch_size").record(rows.len() as f64);
    let started = std::time::Instant::now();
    let mut delay = Duration::from_millis(250);
    let refused = loop {
        let outcome = insert::insert_splitting(clickhouse, &rows).await;
        match outcome {
            // Every row of a batch refused is more likely a table that does
            // not match this build than a batch of poison: wait, loudly.
            Ok(refused) if rows.len() > 1 && refused.len() == rows.len() => {
                counters.insert_retries.fetch_add(1, Ordering::Relaxed);
                tracing::error!(rows = rows.len(), reason = %refused[0].1, "ClickHouse refused every row of the batch; retrying (check the schema)");
                if sleep_or_shutdown(delay, shutdown).await {
                    return false;
                }
                delay = (delay * 2).min(Duration::from_secs(10));
            }
            Ok(refused) => break refused,
            Err(e) => {
                counters.insert_retries.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("jetcron_projector_insert_retries_total").increment(1);
                warn!(rows = rows.len(), error = %format!("{e:#}"), retry_in_ms = delay.as_millis() as u64, "ClickHouse insert failed");
                if sleep_or_shutdown(delay, shutdown).await {
                    return false;
                }
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    };
    let mut refused_at = vec![None; rows.len()];
    for (index, reason) in refused {
        refused_at[index] = Some(reason);
    }
    let stored = rows.len() - refused_at.iter().flatten().count();
    for ((_, message), refusal) in batch.entries.iter().zip(refused_at) {
        match refusal {
            // A refusal can be passing (a merge storm misread): a few more
            // deliveries before the event is parked.
            Some(reason) if delivered(message) < REFUSALS_BEFORE_PARKING => {
                warn!(subject = %message.subject, reason, "ClickHouse refused an event; it comes back later");
                if let Err(e) = message
                    .ack_with(AckKind::Nak(Some(REFUSAL_RETRY_DELAY)))
                    .await
                {
                    warn!(error = %e, "cannot nak refused event (it comes back after ack_wait)");
                }
            }
            Some(reason) => {
                park(
                    js,
                    message,
                    &format!("refused by ClickHouse: {reason}"),
                    counters,
                )
                .await
            }
            None => {
                if let Err(e) = message.ack().await {
                    warn!(error = %e, "cannot ack projected run event (it will be projected again)");
                }
            }
        }
    }
    counters.stored.fetch_add(stored as u64, Ordering::Relaxed);
    counters.batches.fetch_add(1, Ordering::Relaxed);
    metrics::counter!("jetcron_projector_events_stored_total").increment(stored as u64);
    metrics::histogram!("jetcron_projector_store_seconds").record(started.elapsed().as_secs_f64());
    debug!(rows = stored, "batch projected");
    true
}

/// How often the backlog gauge asks the server.
const BACKLOG_SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Longest a stopping projector keeps storing what is in the stream.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Deliveries of one event ClickHouse refused before it is parked.
const REFUSALS_BEFORE_PARKING: i64 = 3;
/// Wait before a refused event is offered again.
const REFUSAL_RETRY_DELAY: Duration = Duration::from_secs(5);

fn delivered(message: &jetstream::Message) -> i64 {
    message.info().map(|i| i.delivered).unwrap_or(1)
}

async fn park(
    js: &jetstream::Context,
    message: &jetstream::Message,
    reason: &str,
    counters: &ProjectorCounters,
) {
    match dead_letter::park(js, message, reason).await {
        Ok(()) => {
            counters.parked.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("jetcron_projector_events_parked_total").increment(1);
            warn!(subject = %message.subject, reason, "event parked in the dead letter stream");
        }
        Err(e) => {
            warn!(subject = %message.subject, error = %format!("{e:#}"), "cannot park event; it will come back")
        }
    }
}

/// Sleep for `d`; true when shutdown came first.
async fn sleep_or_shutdown(d: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}
