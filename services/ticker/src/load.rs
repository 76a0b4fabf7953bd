//! The pass that loads the jobs of shards acquired but not held
//! ([`crate::shard_holdings`]), run beside the ticker's loop.
//!
//! - **From snapshots** when every shard of the pass has a usable one
//!   ([`crate::snapshot_store`]): each shard's jobs as its last owner wrote them,
//!   then only the bucket's changes after the oldest snapshot's revision,
//!   each applied to its shard when it is newer than that shard's snapshot.
//! - **Otherwise from the whole bucket:** every key's current value, only
//!   the keys of its shards decoded, each job kept in its held form at once
//!   (a whole definition is about five times larger: taking half of ten
//!   million jobs over must not need their definitions all at once).
//!
//! It retries until it has read what it needs (the shards stay unplanned
//! meanwhile, their watermark where the last owner left it) or the ticker
//! stops.
//!
//! The pass hands over each shard's table whole ([`FirePlan`], its jobs
//! held, no fire planned), built here rather than on the ticker's loop:
//! putting 2.5 million jobs into the book one by one held the loop for
//! about 1.9 s at a takeover of ten million, longer than the lookahead,
//! and the survivor's own fires waited meanwhile.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream::kv::Operation;
use compact_str::CompactString;
use futures::StreamExt as _;
use jetcron_core::schedule::shared_lines::SharedLines;
use jetcron_io::job_feed::{self, JobEntry, Needs};
use jetcron_io::retry::RetryDelay;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::compact_job::HeldJob;
use crate::plan::FirePlan;
use crate::shard_holdings::PassId;
use crate::shards::{shard_of, SHARDS};
use crate::snapshot_store::{cpu_bound_here, SnapshotStore, Unusable};

/// A read of the changes after a snapshot that gets nothing for this long
/// has stalled (the pass then reads the whole bucket).
const CATCH_UP_STALLED_AFTER: Duration = Duration::from_secs(30);

/// A pass's result.
#[derive(Debug)]
pub struct ShardPass {
    pub pass: PassId,
    pub shards: Vec<u32>,
    /// The table of each of `shards`: its valid jobs, held, not planned.
    pub tables: Vec<(u32, FirePlan)>,
    /// The ids of the paused jobs among them.
    pub paused: Vec<CompactString>,
    /// Every change up to this revision is in `tables`.
    pub read_to: u64,
    /// From the pass's start to its end, retries included.
    pub took: Duration,
    /// `Some` when the jobs came from the shards' snapshots (and the
    /// changes after them) rather than from the whole bucket: the shards
    /// whose jobs are exactly those of their stored snapshot (no change
    /// after it), not written again until they change.
    pub as_snapshots: Option<Vec<u32>>,
}

/// What a pass reads with and where it hands its result: one per ticker,
/// each pass spawned with a clone ([`Loader::start`]).
#[derive(Clone)]
pub(crate) struct Loader {
    pub(crate) client: async_nats::Client,
    pub(crate) lines: SharedLines,
    /// Where a pass looks for its shards' snapshots first.
    pub(crate) snapshots: Option<SnapshotStore>,
    pub(crate) done: mpsc::Sender<ShardPass>,
    pub(crate) stop: CancellationToken,
}

impl Loader {
    /// Start pass `pass` over `shards`, beside the ticker's loop.
    pub(crate) fn start(&self, pass: PassId, shards: Vec<u32>) {
        info!(?shards, "loading the jobs of shards taken over");
        tokio::spawn(load_shards(self.clone(), pass, shards));
    }
}

/// Read the jobs of `shards` for pass `pass` and hand them to the loader's
/// `done`.
async fn load_shards(loader: Loader, pass: PassId, shards: Vec<u32>) {
    let Loader {
        client,
        lines,
        snapshots,
        done: passes,
        stop,
    } = loader;
    let started = Instant::now();
    let read = tokio::select! {
        _ = stop.cancelled() => return,
        read = read_shards(&client, &lines, snapshots.as_ref(), &shards) => read,
    };
    let Read {
        mut tables,
        read_to,
        as_snapshots,
    } = read;
    let paused = tables
        .iter()
        .flat_map(|(_, table)| table.jobs())
        .filter(|job| job.paused)
        .map(|job| job.id.clone())
        .collect();
    let tables = shards
        .iter()
        .map(|&shard| (shard, tables.take(shard)))
        .collect();
    let _ = passes
        .send(ShardPass {
            pass,
            shards,
            tables,
            paused,
            read_to,
            took: started.elapsed(),
            as_snapshots,
        })
        .await;
}

/// What a pass read.
struct Read {
    tables: Tables,
    read_to: u64,
    /// As [`ShardPass::as_snapshots`].
    as_snapshots: Option<Vec<u32>>,
}

/// The jobs of `shards` and the revision read to, from their snapshots if
/// they all have one, else from the whole bucket, retried until it is read.
async fn read_shards(
    client: &async_nats::Client,
    lines: &SharedLines,
    snapshots: Option<&SnapshotStore>,
    shards: &[u32],
) -> Read {
    if let Some(store) = snapshots {
        match from_snapshots(client, store, lines, shards).await {
            Ok(read) => return read,
            Err(unusable) => unusable.log("taking shards over"),
        }
    }
    let mut delay = RetryDelay::new(Duration::from_millis(500), Duration::from_secs(10));
    loop {
        let mut tables = Tables::default();
        let read = job_feed::read_current_of(
            client,
            lines,
            |key| shards.contains(&shard_of(key)),
            |entry| {
                let Some(job) = entry.valid() else { return };
                tables.hold(HeldJob::of(job, entry.revision, entry.written_at));
            },
        )
        .await;
        match read {
            Ok(read_to) => {
                return Read {
                    tables,
                    read_to,
                    as_snapshots: None,
                }
            }
            Err(e) => {
                warn!(?shards, error = %format!("{e:#}"), "cannot read the jobs of shards taken over, retrying");
                tokio::time::sleep(delay.next_delay()).await;
            }
        }
    }
}

/// The jobs of `shards` from their snapshots and the bucket's changes
/// after them, and the revision every change up to which is in them.
async fn from_snapshots(
    client: &async_nats::Client,
    store: &SnapshotStore,
    lines: &SharedLines,
    shards: &[u32],
) -> Result<Read, Unusable> {
    let mut tables = Tables::default();
    let (changes, read_to) = snapshots_and_changes(client, store, lines, shards, |shard_jobs| {
        cpu_bound_here(|| tables.hold_all(shard_jobs));
    })
    .await?;
    let mut changed = [false; SHARDS as usize];
    for id in changes.keys() {
        changed[shard_of(id) as usize] = true;
    }
    let as_snapshots = shards
        .iter()
        .copied()
        .filter(|&shard| !changed[shard as usize])
        .collect();
    // Replace, add or drop the jobs that changed.
    for (id, change) in changes {
        match change {
            Some(newer) => tables.hold(newer),
            None => tables.remove(&id),
        }
    }
    Ok(Read {
        tables,
        read_to,
        as_snapshots: Some(as_snapshots),
    })
}

/// Each key changed since its shard's snapshot: its held form, or `None`
/// when its latest value is a delete or not a valid job.
pub(crate) type Changes = HashMap<CompactString, Option<HeldJob>>;

/// The jobs of `shards` from their snapshots, handed to `keep` a shard at
/// a time as each is read (not all at once), then the keys changed after
/// each shard's snapshot (read from the oldest one's revision on) and the
/// revision read to. Any shard without a usable snapshot fails the whole
/// read.
pub(crate) async fn snapshots_and_changes(
    client: &async_nats::Client,
    store: &SnapshotStore,
    lines: &SharedLines,
    shards: &[u32],
    mut keep: impl FnMut(Vec<HeldJob>),
) -> Result<(Changes, u64), Unusable> {
    let mut snapshot_at = HashMap::new();
    for &shard in shards {
        let snapshot = store.read(shard, lines).await?;
        snapshot_at.insert(shard, snapshot.header.read_to);
        keep(snapshot.jobs);
    }
    changes_after(client, &snapshot_at, lines)
        .await
        .map_err(Unusable::Refused)
}

async fn changes_after(
    client: &async_nats::Client,
    snapshot_at: &HashMap<u32, u64>,
    lines: &SharedLines,
) -> anyhow::Result<(Changes, u64)> {
    let (bucket, held) = job_feed::open_bucket(client).await?;
    let last = held.last_sequence;
    let oldest = snapshot_at.values().copied().min().unwrap_or(0);
    let newest = snapshot_at.values().copied().max().unwrap_or(0);
    anyhow::ensure!(
        newest <= last,
        "a snapshot is at revision {newest}, past the bucket's last ({last})"
    );
    let mut changes = HashMap::new();
    if last <= oldest {
        return Ok((changes, last));
    }
    let mut entries = bucket
        .watch_all_from_revision(oldest + 1)
        .await
        .context("read the job bucket's changes after the snapshots")?;
    let mut read_to = oldest;
    loop {
        let entry = tokio::time::timeout(CATCH_UP_STALLED_AFTER, entries.next())
            .await
            .context("reading the changes after the snapshots stalled")?
            .context("job bucket watch ended")?
            .context("job bucket watch")?;
        read_to = read_to.max(entry.revision);
        let caught_up = entry.delta == 0;
        let newer = snapshot_at
            .get(&shard_of(&entry.key))
            .is_some_and(|&at| entry.revision > at);
        if newer {
            let key = CompactString::from(entry.key.as_str());
            let held = match entry.operation {
                Operation::Put => {
                    let entry = JobEntry::decode(entry, Needs::Every, lines);
                    entry
                        .valid()
                        .map(|job| HeldJob::of(job, entry.revision, entry.written_at))
                }
                Operation::Delete | Operation::Purge => None,
            };
            changes.insert(key, held);
        }
        if caught_up {
            return Ok((changes, read_to));
        }
    }
}

/// The tables a pass builds, one per shard it meets.
#[derive(Default)]
struct Tables(HashMap<u32, FirePlan>);

impl Tables {
    /// Hold `job` in its shard's table, replacing what was held for its id.
    fn hold(&mut self, job: HeldJob) {
        self.0.entry(shard_of(&job.id)).or_default().hold(job);
    }

    /// Hold every job of `jobs` (one shard's, as a snapshot has them),
    /// with room made for them first.
    fn hold_all(&mut self, jobs: Vec<HeldJob>) {
        if let Some(first) = jobs.first() {
            self.0
                .entry(shard_of(&first.id))
                .or_default()
                .reserve(crate::book::with_slack(jobs.len()));
        }
        for job in jobs {
            self.hold(job);
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&u32, &FirePlan)> {
        self.0.iter()
    }

    /// Forget `job_id`.
    fn remove(&mut self, job_id: &str) {
        if let Some(table) = self.0.get_mut(&shard_of(job_id)) {
            table.remove(job_id);
        }
    }

    /// The table of `shard` (empty if no job of it was met).
    fn take(&mut self, shard: u32) -> FirePlan {
        self.0.remove(&shard).unwrap_or_default()
    }
}
