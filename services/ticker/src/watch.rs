//! Turning the entries of `jetcron_jobs` (from the process's
//! [`JobFeed`](jetcron_io::job_feed)) into job changes.
//!
//! The feed starts with the last value of every key, then follows updates;
//! if its watch breaks (NATS away, server restart) it is opened again, and
//! the plan's revision check makes the re-delivered values harmless. A value
//! that does not validate is logged with every problem and unschedules the
//! key: the bucket is the source of truth, and its current value is not a
//! runnable job. It is also published as a `job.rejected` event
//! ([`jetcron_core::job_events`]), so the author of a bad `nats kv put` can
//! find out in the history; every replica does so, and the event id derived
//! from (key, revision) makes that one event.

use std::collections::VecDeque;
use std::sync::Arc;

use jetcron_core::job_events::JobRejected;
use jetcron_io::job_events;
use jetcron_io::job_feed::{FeedEvent, FeedReceiver, JobEntry, Written};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// What the ticker learns from the bucket.
#[derive(Debug)]
pub enum JobChange {
    /// A valid definition ([`JobEntry::valid`] is `Some`).
    Put(Arc<JobEntry>),
    Removed {
        job_id: String,
    },
    /// Every value present when the watch opened has been delivered.
    Synced,
    /// About this many keys are coming (the bucket's, deleted included).
    Expect {
        keys: usize,
    },
}

/// Rejections waiting to be published; beyond this the watch does not wait
/// for them (they are derived from the bucket, which keeps the values).
const REJECTION_QUEUE: usize = 1024;

/// Follow the feed until `shutdown`, sending changes to `changes` and
/// publishing a `job.rejected` event for every value that does not validate.
pub async fn watch_jobs(
    feed: FeedReceiver,
    js: async_nats::jetstream::Context,
    changes: mpsc::Sender<JobChange>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (rejections, queue) = mpsc::channel(REJECTION_QUEUE);
    let publisher = tokio::spawn(publish_rejections(js, queue));
    follow(feed, changes, rejections, shutdown).await;
    publisher.abort();
    Ok(())
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
    mut feed: FeedReceiver,
    changes: mpsc::Sender<JobChange>,
    rejections: mpsc::Sender<JobRejected>,
    shutdown: CancellationToken,
) {
    let mut dropped_rejections = 0u64;
    let mut synced = false;
    // Changes the ticker's loop has not taken yet, once the bucket is
    // loaded: the feed is shared with the catalog and the chain index,
    // and a ticker busy taking a shard over must not hold them back.
    let mut waiting: VecDeque<JobChange> = VecDeque::new();
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            permit = changes.reserve(), if !waiting.is_empty() => {
                let Ok(permit) = permit else { return };
                if let Some(change) = waiting.pop_front() {
                    permit.send(change);
                }
                continue;
            }
            event = feed.recv() => event,
        };
        let change = match event {
            None => {
                warn!("job feed ended");
                return;
            }
            // A reopened watch delivers everything again: only the first
            // sync means the bucket is loaded.
            Some(FeedEvent::Opened { keys }) => JobChange::Expect { keys },
            Some(FeedEvent::Synced) if synced => continue,
            Some(FeedEvent::Synced) => {
                synced = true;
                JobChange::Synced
            }
            Some(FeedEvent::Entry(entry)) => {
                let Some((change, rejected)) = to_change(entry) else {
                    continue;
                };
                if let Some(rejected) = rejected {
                    if rejections.try_send(rejected).is_err() {
                        dropped_rejections += 1;
                        if dropped_rejections.is_power_of_two() {
                            warn!(dropped_rejections, "job.rejected events not recorded: too many invalid values at once (the bucket keeps them)");
                        }
                    }
                }
                change
            }
        };
        if synced {
            // In order: behind what is waiting, or straight on.
            if waiting.is_empty() {
                match changes.try_send(change) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(change)) => waiting.push_back(change),
                    Err(mpsc::error::TrySendError::Closed(_)) => return,
                }
            } else {
                waiting.push_back(change);
            }
            continue;
        }
        // While the bucket loads, the feed waits for the ticker: a million
        // decoded definitions are not queued here.
        tokio::select! {
            _ = shutdown.cancelled() => return,
            sent = changes.send(change) => if sent.is_err() { return },
        }
    }
}

fn to_change(entry: Arc<JobEntry>) -> Option<(JobChange, Option<JobRejected>)> {
    Some(match &entry.written {
        Written::Valid(_) => (JobChange::Put(entry), None),
        Written::Removed => {
            debug!(job_id = %entry.key, revision = entry.revision, "job deleted");
            let job_id = entry.key.clone();
            (JobChange::Removed { job_id }, None)
        }
        // Not decoded: a feed for chain indexes only, never the ticker's.
        Written::NotChained => return None,
        Written::Invalid { value, problems } => {
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
                value,
                problems.clone(),
                entry.written_at,
            );
            let job_id = entry.key.clone();
            (JobChange::Removed { job_id }, Some(rejected))
        }
    })
}
