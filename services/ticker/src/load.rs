//! The pass that loads the jobs of shards acquired but not held
//! ([`crate::holding`]), run beside the ticker's loop: it reads every key's
//! current value, decodes only the keys of its shards, and keeps each job
//! in its held form at once (a whole definition is about five times
//! larger: taking half of ten million jobs over must not need their
//! definitions all at once). It retries until it has read the bucket (the
//! shards stay unplanned meanwhile, their watermark where the last owner
//! left it) or the ticker stops.

use std::time::{Duration, Instant};

use jetcron_core::schedule_lines::SharedLines;
use jetcron_io::job_feed;
use jetcron_io::retry::RetryDelay;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::held_job::HeldJob;
use crate::holding::PassId;
use crate::shards::shard_of;

/// A pass's result.
#[derive(Debug)]
pub struct ShardPass {
    pub pass: PassId,
    pub shards: Vec<u32>,
    /// The valid jobs of `shards`.
    pub jobs: Vec<HeldJob>,
    /// Every change up to this revision is in `jobs`.
    pub read_to: u64,
    /// From the pass's start to its end, retries included.
    pub took: Duration,
}

/// Read the jobs of `shards` for pass `pass` and hand them to `passes`.
pub async fn load_shards(
    client: async_nats::Client,
    lines: SharedLines,
    pass: PassId,
    shards: Vec<u32>,
    passes: mpsc::Sender<ShardPass>,
    stop: CancellationToken,
) {
    let started = Instant::now();
    let mut delay = RetryDelay::new(Duration::from_millis(500), Duration::from_secs(10));
    loop {
        let mut jobs = Vec::new();
        let read = job_feed::read_current_of(
            &client,
            &lines,
            |key| shards.contains(&shard_of(key)),
            |entry| {
                let Some(job) = entry.valid() else { return };
                jobs.push(HeldJob::of(job, entry.revision, entry.written_at));
            },
        );
        let read = tokio::select! {
            _ = stop.cancelled() => return,
            read = read => read,
        };
        match read {
            Ok(read_to) => {
                let took = started.elapsed();
                let _ = passes
                    .send(ShardPass {
                        pass,
                        shards,
                        jobs,
                        read_to,
                        took,
                    })
                    .await;
                return;
            }
            Err(e) => {
                warn!(?shards, error = %format!("{e:#}"), "cannot read the jobs of shards taken over, retrying");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(delay.next_delay()) => {}
                }
            }
        }
    }
}
