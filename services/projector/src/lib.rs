//! The projector: copies run events from `JETCRON_RUNS` (durable consumer
//! `projector`) into ClickHouse `jetcron.run_events`, and the `job.rejected`
//! events stored in the same stream into `jetcron.job_events`.
//!
//! It fetches a batch (bounded by size and time), inserts it in one
//! `INSERT`, and acks the messages only after ClickHouse accepted the insert:
//! if ClickHouse is away the batch stays unacked and is retried with backoff,
//! so nothing is lost and JetStream holds the backlog. Delivery is at least
//! once; rows carry `event_id` and every query dedups on it, so a replay does
//! not change answers. An event that cannot be decoded is terminated and
//! logged rather than retried forever.
//!
//! Owns: the `projector` consumer and the rows of `jetcron.run_events`;
//! applies the ClickHouse DDL at start.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::pull, message::AckKind};
use futures::StreamExt as _;
use jetcron_core::clickhouse_schema::{self, ClickHouseOptions, JobEventRow, RunEventRow};
use jetcron_core::events::RunEvent;
use jetcron_core::job_events::JobRejected;
use jetcron_core::subjects;
use jetcron_core::topology::{self, TopologyOptions};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// Projector settings.
#[derive(Debug, Clone)]
pub struct ProjectorConfig {
    pub clickhouse: ClickHouseOptions,
    /// Most events per insert.
    pub batch_size: usize,
    /// Longest wait to fill a batch.
    pub batch_wait: Duration,
    pub topology: TopologyOptions,
}

impl ProjectorConfig {
    pub fn new(clickhouse: ClickHouseOptions) -> Self {
        Self {
            clickhouse,
            batch_size: 5_000,
            batch_wait: Duration::from_millis(200),
            topology: TopologyOptions::default(),
        }
    }
}

/// Run the projector until `shutdown` is cancelled.
pub async fn run(
    config: ProjectorConfig,
    client: async_nats::Client,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let js = jetstream::new(client);
    let stream = topology::ensure_runs_stream(&js, &config.topology).await?;
    let consumer = stream
        .get_or_create_consumer(
            subjects::PROJECTOR_CONSUMER,
            pull::Config {
                durable_name: Some(subjects::PROJECTOR_CONSUMER.to_string()),
                description: Some("jetcron projector into ClickHouse".into()),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(120),
                max_deliver: -1,
                max_ack_pending: (config.batch_size * 4).max(1000) as i64,
                ..Default::default()
            },
        )
        .await
        .context("create consumer projector")?;
    let clickhouse = config.clickhouse.client();
    apply_schema_with_retry(&clickhouse, &shutdown).await;
    info!(batch_size = config.batch_size, "projector started");

    while !shutdown.is_cancelled() {
        let batch = consumer
            .fetch()
            .max_messages(config.batch_size)
            .expires(config.batch_wait.max(Duration::from_millis(100)))
            .messages()
            .await;
        let mut batch = match batch {
            Ok(batch) => batch,
            Err(e) => {
                warn!(error = %e, "cannot fetch run events, retrying");
                if sleep_or_shutdown(Duration::from_secs(1), &shutdown).await {
                    break;
                }
                continue;
            }
        };
        let mut messages = Vec::new();
        let mut rows = Batch::default();
        while let Some(next) = tokio::select! {
            _ = shutdown.cancelled() => None,
            next = batch.next() => next,
        } {
            let message = match next {
                Ok(m) => m,
                Err(e) => {
                    debug!(error = %e, "fetch ended early");
                    break;
                }
            };
            if message
                .subject
                .rsplit('.')
                .next()
                .is_some_and(|last| last == subjects::RUN_COMPLETE_TOKEN)
            {
                // A completion report of an asynchronous target: the executor
                // records its result as the attempt's outcome event.
                if let Err(e) = message.ack().await {
                    warn!(error = %e, "cannot ack completion report");
                }
                continue;
            }
            match rows.add(&message.subject, &message.payload) {
                Ok(()) => messages.push(message),
                Err(e) => {
                    warn!(subject = %message.subject, error = %e, "undecodable run event, terminating it");
                    if let Err(e) = message.ack_with(AckKind::Term).await {
                        warn!(error = %e, "cannot terminate poison run event");
                    }
                }
            }
        }
        if rows.is_empty() {
            continue;
        }
        // Insert until ClickHouse takes it; the messages stay unacked meanwhile.
        let mut delay = Duration::from_millis(250);
        loop {
            match insert(&clickhouse, &rows).await {
                Ok(()) => break,
                Err(e) => {
                    warn!(rows = rows.len(), error = %format!("{e:#}"), retry_in_ms = delay.as_millis() as u64, "ClickHouse insert failed");
                    if sleep_or_shutdown(delay, &shutdown).await {
                        // Unacked messages are redelivered to the next projector.
                        info!("projector stopped with an unsaved batch; it will be redelivered");
                        return Ok(());
                    }
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        }
        for message in &messages {
            if let Err(e) = message.ack().await {
                warn!(error = %e, "cannot ack projected run event (it will be projected again)");
            }
        }
        debug!(rows = rows.len(), "batch projected");
    }
    info!("projector stopped");
    Ok(())
}

/// The rows of one fetched batch, by table.
#[derive(Default)]
struct Batch {
    runs: Vec<RunEventRow>,
    jobs: Vec<JobEventRow>,
}

impl Batch {
    /// Decode one message by its subject.
    fn add(&mut self, subject: &str, payload: &[u8]) -> Result<(), serde_json::Error> {
        if subject == subjects::JOB_REJECTED_SUBJECT {
            let event: JobRejected = serde_json::from_slice(payload)?;
            self.jobs.push(JobEventRow::from(&event));
        } else {
            let event: RunEvent = serde_json::from_slice(payload)?;
            self.runs.push(RunEventRow::from(&event));
        }
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.jobs.is_empty()
    }

    fn len(&self) -> usize {
        self.runs.len() + self.jobs.len()
    }
}

/// Insert both tables' rows. A retry after a partial failure inserts run rows
/// again; both tables dedup on `event_id`, so that is harmless.
async fn insert(client: &clickhouse::Client, rows: &Batch) -> anyhow::Result<()> {
    insert_rows(client, subjects::RUN_EVENTS_TABLE, &rows.runs).await?;
    insert_rows(client, subjects::JOB_EVENTS_TABLE, &rows.jobs).await
}

async fn insert_rows<R>(client: &clickhouse::Client, table: &str, rows: &[R]) -> anyhow::Result<()>
where
    R: clickhouse::RowOwned + clickhouse::RowWrite,
{
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = client
        .insert_unescaped::<R>(table)
        .await
        .with_context(|| format!("start insert into {table}"))?;
    for row in rows {
        insert
            .write(row)
            .await
            .with_context(|| format!("write row into {table}"))?;
    }
    insert
        .end()
        .await
        .with_context(|| format!("finish insert into {table}"))
}

async fn apply_schema_with_retry(client: &clickhouse::Client, shutdown: &CancellationToken) {
    let mut delay = Duration::from_millis(250);
    loop {
        match clickhouse_schema::apply(client).await {
            Ok(()) => return,
            Err(e) => {
                warn!(error = %format!("{e:#}"), "cannot apply ClickHouse schema yet, retrying")
            }
        }
        if sleep_or_shutdown(delay, shutdown).await {
            return;
        }
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}

/// Sleep for `d`; true when shutdown came first.
async fn sleep_or_shutdown(d: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}
