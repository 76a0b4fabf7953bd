//! Handing the entries of `jetcron_jobs` (from the process's
//! [`JobFeed`](jetcron_io::job_feed)) to the ticker's loop, and publishing
//! the rejections among them.
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
//!
//! A valid definition its namespace's target policy refuses
//! ([`jetcron_core::policy`]; one put past the API with a direct `nats kv
//! put`) is published as `job.rejected` the same way, naming every refused
//! field. It stays scheduled: the executors refuse each of its fires
//! (recorded as a failed run, never called) for as long as the policy
//! refuses it, and run it from the first fire after the policy allows it,
//! without a put.

use std::collections::VecDeque;

use jetcron_core::job_events::JobRejected;
use std::sync::Arc;

use jetcron_io::job_events;
use jetcron_io::job_feed::{FeedEvent, FeedReceiver, JobEntry, Written};
use jetcron_io::policy_book::PolicyBook;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Rejections waiting to be published; beyond this the watch does not wait
/// for them (they are derived from the bucket, which keeps the values).
const REJECTION_QUEUE: usize = 1024;

/// Follow the feed until `shutdown`, handing its events to `changes` (the
/// first sync only) and publishing a `job.rejected` event for every value
/// that does not validate or that its namespace's policy (`policies`)
/// refuses.
pub async fn watch_jobs(
    feed: FeedReceiver,
    js: async_nats::jetstream::Context,
    policies: Arc<PolicyBook>,
    changes: mpsc::Sender<FeedEvent>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (rejections, queue) = mpsc::channel(REJECTION_QUEUE);
    let publisher = tokio::spawn(publish_rejections(js, queue));
    let rejections = Rejections {
        queue: rejections,
        policies,
    };
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

/// Where the rejections found go, and the policies they are found by.
struct Rejections {
    queue: mpsc::Sender<JobRejected>,
    policies: Arc<PolicyBook>,
}

async fn follow(
    mut feed: FeedReceiver,
    changes: mpsc::Sender<FeedEvent>,
    rejections: Rejections,
    shutdown: CancellationToken,
) {
    let mut dropped_rejections = 0u64;
    let mut synced = false;
    // Changes the ticker's loop has not taken yet, once the bucket is
    // loaded: a ticker busy taking a shard over does not hold its feed
    // back (nor, where a feed is shared, its other readers).
    let mut waiting: VecDeque<FeedEvent> = VecDeque::new();
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
            Some(FeedEvent::Synced) if synced => continue,
            Some(FeedEvent::Synced) => {
                synced = true;
                FeedEvent::Synced
            }
            Some(FeedEvent::Entries(entries)) => {
                for entry in entries.iter() {
                    let rejected =
                        rejection_of(entry).or_else(|| policy_refusal(entry, &rejections.policies));
                    if let Some(rejected) = rejected {
                        if rejections.queue.try_send(rejected).is_err() {
                            dropped_rejections += 1;
                            if dropped_rejections.is_power_of_two() {
                                warn!(dropped_rejections, "job.rejected events not recorded: too many invalid values at once (the bucket keeps them)");
                            }
                        }
                    }
                }
                FeedEvent::Entries(entries)
            }
            Some(opened @ FeedEvent::Opened { .. }) => opened,
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

/// The `job.rejected` event of a valid definition its namespace's policy
/// refuses (logged with every refusal); `None` for any other entry.
fn policy_refusal(entry: &JobEntry, policies: &PolicyBook) -> Option<JobRejected> {
    let job = entry.valid()?;
    let refusals = policies.refusals(&job.spec);
    if refusals.is_empty() {
        return None;
    }
    let text: Vec<String> = refusals.iter().map(ToString::to_string).collect();
    warn!(
        job_id = %entry.key,
        revision = entry.revision,
        refusals = %text.join("; "),
        "job definition refused by its namespace's target policy: its fires will not be called"
    );
    // The value is not kept; its size is the definition's, encoded again.
    let encoded = serde_json::to_vec(&job.spec).unwrap_or_default();
    Some(JobRejected::from_kv(
        &entry.key,
        entry.revision,
        &encoded,
        refusals,
        entry.written_at,
    ))
}

/// The `job.rejected` event of a value that does not validate (logged with
/// every problem); `None` for any other entry.
fn rejection_of(entry: &JobEntry) -> Option<JobRejected> {
    let Written::Invalid { value, problems } = &entry.written else {
        return None;
    };
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    warn!(
        job_id = %entry.key,
        revision = entry.revision,
        problems = %text.join("; "),
        "invalid job definition in bucket, not scheduled"
    );
    Some(JobRejected::from_kv(
        &entry.key,
        entry.revision,
        value,
        problems.clone(),
        entry.written_at,
    ))
}
