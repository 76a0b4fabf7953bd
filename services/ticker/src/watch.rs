//! Turning the `jetcron_jobs` KV watch into job changes.
//!
//! The watch starts with the last value of every key, then follows updates;
//! if it breaks (NATS away, server restart) it is opened again, and the plan's
//! revision check makes the re-delivered values harmless. A value that does not
//! validate is logged with every problem and unschedules the key: the bucket is
//! the source of truth, and its current value is not a runnable job. It is also
//! published as a `job.rejected` event ([`jetcron_core::job_events`]), so the
//! author of a bad `nats kv put` can find out in the history; every replica
//! does so, and the event id derived from (key, revision) makes that one event.

use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation};
use chrono::{DateTime, Utc};
use futures::StreamExt as _;

use jetcron_core::job::{parse_written_with, ValidJob};
use jetcron_core::job_events::JobRejected;
use jetcron_core::schedule_lines::SharedLines;
use jetcron_io::job_events;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// What the ticker learns from the bucket.
#[derive(Debug)]
pub enum JobChange {
    /// A valid definition at `revision`, written at `defined_at` (server time).
    Put {
        job: Box<ValidJob>,
        revision: u64,
        defined_at: DateTime<Utc>,
    },
    Removed {
        job_id: String,
    },
    /// Every value present when the watch opened has been delivered.
    Synced,
}

/// Rejections waiting to be published; beyond this the watch does not wait
/// for them (they are derived from the bucket, which keeps the values).
const REJECTION_QUEUE: usize = 1024;

/// Follow the bucket until `shutdown`, sending changes to `changes` and
/// publishing a `job.rejected` event for every value that does not validate.
pub async fn watch_jobs(
    jobs: kv::Store,
    js: async_nats::jetstream::Context,
    lines: SharedLines,
    changes: mpsc::Sender<JobChange>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (rejections, queue) = mpsc::channel(REJECTION_QUEUE);
    let publisher = tokio::spawn(publish_rejections(js, queue));
    let result = follow(jobs, lines, changes, rejections, shutdown).await;
    publisher.abort();
    result
}

async fn publish_rejections(
    js: async_nats::jetstream::Context,
    mut queue: mpsc::Receiver<JobRejected>,
) {
    while let Some(event) = queue.recv().await {
        if let Err(e) = job_events::publish(&js, &event).await {
            warn!(job_id = ?event.job_id, revision = ?event.revision, error = %format!("{e:#}"), "cannot record job.rejected");
        }
    }
}

async fn follow(
    jobs: kv::Store,
    schedules: SharedLines,
    changes: mpsc::Sender<JobChange>,
    rejections: mpsc::Sender<JobRejected>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut dropped_rejections = 0u64;
    let mut synced = false;
    loop {
        // An empty bucket delivers nothing: it is loaded as soon as we know that.
        if !synced && bucket_is_empty(&jobs).await {
            synced = true;
            if changes.send(JobChange::Synced).await.is_err() {
                return Ok(());
            }
        }
        let mut entries = match jobs.watch_with_history(">").await {
            Ok(entries) => entries,
            Err(e) => {
                warn!(error = %e, "cannot watch job bucket, retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        loop {
            let entry = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                entry = entries.next() => entry,
            };
            let entry = match entry {
                Some(Ok(entry)) => entry,
                Some(Err(e)) => {
                    warn!(error = %e, "job watch broke, reopening");
                    break;
                }
                None => {
                    warn!("job watch ended, reopening");
                    break;
                }
            };
            let caught_up = entry.seen_current;
            let (change, rejected) = to_change(entry, &schedules);
            if let Some(rejected) = rejected {
                if rejections.try_send(rejected).is_err() {
                    dropped_rejections += 1;
                    if dropped_rejections.is_power_of_two() {
                        warn!(dropped_rejections, "job.rejected events not recorded: too many invalid values at once (the bucket keeps them)");
                    }
                }
            }
            if changes.send(change).await.is_err() {
                return Ok(());
            }
            if caught_up && !synced {
                synced = true;
                if changes.send(JobChange::Synced).await.is_err() {
                    return Ok(());
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

fn to_change(entry: kv::Entry, schedules: &SharedLines) -> (JobChange, Option<JobRejected>) {
    let change = match entry.operation {
        Operation::Delete | Operation::Purge => {
            debug!(job_id = %entry.key, revision = entry.revision, "job deleted");
            JobChange::Removed { job_id: entry.key }
        }
        Operation::Put => {
            match parse_written_with(&entry.value, Some(&entry.key), entry.created, &mut |line| {
                schedules.parse(line)
            }) {
                Ok(job) => JobChange::Put {
                    job: Box::new(job),
                    revision: entry.revision,
                    defined_at: entry.created,
                },
                Err(problems) => {
                    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
                    warn!(
                        job_id = %entry.key,
                        revision = entry.revision,
                        problems = %text.join("; "),
                        "invalid job definition in bucket, not scheduled"
                    );
                    let rejected = JobRejected::from_kv(
                        &entry.key,
                        entry.revision,
                        &entry.value,
                        problems,
                        entry.created,
                    );
                    return (JobChange::Removed { job_id: entry.key }, Some(rejected));
                }
            }
        }
    };
    (change, None)
}

async fn bucket_is_empty(jobs: &kv::Store) -> bool {
    let mut stream = jobs.stream.clone();
    match stream.info().await {
        Ok(info) => info.state.messages == 0,
        Err(_) => false,
    }
}
