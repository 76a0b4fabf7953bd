//! Shard snapshots ([`crate::snapshot_format`]) in the object store
//! `jetcron_ticker_snapshots`: the owner of a planned shard writes one when
//! the shard changed, at most every `every`; a replica taking a shard over
//! reads it ([`crate::load`]).
//!
//! Writes happen on the ticker's loop only when nothing is due within the
//! lookahead (as planning does), one shard at a time: encoding a shard of
//! 625,000 jobs holds the loop for tens of milliseconds, and the object's
//! put runs in a task of its own. A failed put is retried at the next turn.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::object_store::{
    GetErrorKind, InfoErrorKind, ObjectInfo, ObjectMetadata, ObjectStore,
};
use async_nats::jetstream::stream;
use jetcron_core::schedule::shared_lines::SharedLines;
use tokio::io::AsyncReadExt as _;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::book::Book;
use crate::shards::SHARDS;
use crate::snapshot_format::{self, ShardSnapshot};

/// Default of how often a changed shard is written again.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(30);

/// Objects this large have their buffers given back to the system as soon
/// as they are written (a shard of about 20,000 jobs).
const GIVE_BACK_AFTER_BYTES: usize = 1 << 20;

/// The most room made for an object before it is read (its size is what
/// the store says; a bigger object still reads, growing as it comes).
const PRESIZE_AT_MOST: usize = 1 << 30;

/// The name of `shard`'s object in the store.
pub fn object_name(shard: u32) -> String {
    format!("shard-{shard:02}")
}

/// The object's metadata key naming its snapshot format.
const FORMAT_KEY: &str = "format";
/// The object's metadata key naming the creation time of the jobs bucket it
/// was written for (Unix nanoseconds, as in its header).
const BUCKET_CREATED_KEY: &str = "bucket_created";

/// The store, and what its snapshots must match.
#[derive(Clone)]
pub struct SnapshotStore {
    store: ObjectStore,
    /// The jobs bucket stream's creation time (Unix nanoseconds).
    bucket_created: i64,
}

/// A snapshot could not be used; the pass reads the bucket instead.
#[derive(Debug)]
pub enum Unusable {
    /// None was written for this shard.
    Missing,
    /// One exists and is refused (why).
    Refused(anyhow::Error),
}

impl Unusable {
    /// Say why the jobs are read from the whole bucket instead, `when`.
    pub fn log(&self, when: &str) {
        match self {
            Unusable::Missing => {
                info!(when, "a shard has no snapshot: reading the whole bucket");
            }
            Unusable::Refused(e) => {
                warn!(when, error = %format!("{e:#}"), "shard snapshots not used: reading the whole bucket");
            }
        }
    }
}

impl SnapshotStore {
    /// `store`, for the jobs bucket whose stream is described by `jobs`.
    /// `None` when that bucket may lose values (deletes, purges or rollups
    /// allowed: a bucket made by an older jetcron): replaying its changes
    /// over a snapshot would then not give its current values.
    pub fn new(store: ObjectStore, jobs: &stream::Info) -> Option<Self> {
        let config = &jobs.config;
        if !(config.deny_delete && config.deny_purge && !config.allow_rollup) {
            warn!("the jobs bucket allows deletes, purges or rollups: shard snapshots are off, a shard taken over is read from the whole bucket");
            return None;
        }
        Some(Self {
            store,
            bucket_created: jobs.created.timestamp_nanos_opt().unwrap_or_default(),
        })
    }

    pub fn bucket_created(&self) -> i64 {
        self.bucket_created
    }

    /// Replace `shard`'s object with `pieces`, in order.
    pub async fn write(&self, shard: u32, pieces: Vec<bytes::Bytes>) -> anyhow::Result<()> {
        let pieces = futures::stream::iter(pieces.into_iter().map(Ok::<_, std::io::Error>));
        let mut reader = tokio_util::io::StreamReader::new(pieces);
        let described = ObjectMetadata {
            name: object_name(shard),
            metadata: self.metadata(),
            ..Default::default()
        };
        self.store
            .put(described, &mut reader)
            .await
            .with_context(|| format!("write the snapshot of shard {shard}"))?;
        Ok(())
    }

    /// Whether every shard has an object written for this jobs bucket in
    /// this build's format (by any replica), as its metadata says: the
    /// writer's own copy of the bucket's creation time and of the format,
    /// compared exactly, so no clock is compared with another's and an
    /// object an upgrade will refuse does not count. Whether each one reads
    /// back is found at its read, which reads the bucket instead when it
    /// does not.
    pub async fn every_shard_written(&self) -> anyhow::Result<bool> {
        for shard in 0..SHARDS {
            let info = match self.store.info(object_name(shard)).await {
                Ok(info) => info,
                Err(e) if e.kind() == InfoErrorKind::NotFound => return Ok(false),
                Err(e) => {
                    return Err(anyhow::Error::new(e))
                        .with_context(|| format!("look up the snapshot of shard {shard}"))
                }
            };
            if !self.written_for_this_bucket(&info) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// What an object written here says of itself: this build's format and
    /// this jobs bucket.
    fn metadata(&self) -> HashMap<String, String> {
        HashMap::from([
            (FORMAT_KEY.to_owned(), snapshot_format::FORMAT.to_string()),
            (
                BUCKET_CREATED_KEY.to_owned(),
                self.bucket_created.to_string(),
            ),
        ])
    }

    /// Whether `info` describes a live object whose metadata says what an
    /// object written here would ([`Self::metadata`]).
    fn written_for_this_bucket(&self, info: &ObjectInfo) -> bool {
        !info.deleted
            && self
                .metadata()
                .iter()
                .all(|(key, value)| info.metadata.get(key) == Some(value))
    }

    /// `shard`'s snapshot, decoded with `lines`, if there is a usable one.
    pub async fn read(&self, shard: u32, lines: &SharedLines) -> Result<ShardSnapshot, Unusable> {
        let mut object = match self.store.get(object_name(shard)).await {
            Ok(object) => object,
            Err(e) if e.kind() == GetErrorKind::NotFound => return Err(Unusable::Missing),
            Err(e) => return Err(Unusable::Refused(anyhow::Error::new(e).context("open"))),
        };
        // Room for the whole object at once: grown chunk by chunk, a shard
        // of 62,500 jobs left about twice its size freed behind it.
        let mut bytes = Vec::with_capacity(object.info.size.min(PRESIZE_AT_MOST));
        object
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| Unusable::Refused(anyhow::Error::new(e).context("read")))?;
        let decoded = decode_here(&bytes, lines).map_err(Unusable::Refused)?;
        if decoded.header.bucket_created != self.bucket_created {
            return Err(Unusable::Refused(anyhow::anyhow!(
                "written for an earlier jobs bucket of the same name"
            )));
        }
        Ok(decoded)
    }
}

/// Decode `bytes` on this thread ([`cpu_bound_here`]).
fn decode_here(bytes: &[u8], lines: &SharedLines) -> anyhow::Result<ShardSnapshot> {
    cpu_bound_here(|| snapshot_format::decode(bytes, lines))
}

/// Run `work` (a shard's worth of jobs: a few hundred milliseconds at
/// 625,000 jobs) on this thread, handing this worker's other tasks to the
/// others meanwhile where the runtime has others. Not on a thread of the
/// blocking pool: the jobs are allocated where they are then held and
/// freed, and mimalloc gives a page back only through the thread that
/// allocated it.
pub(crate) fn cpu_bound_here<T>(work: impl FnOnce() -> T) -> T {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// What the loop keeps to write snapshots. Its instants are tokio's, as
/// the stop's deadline is: the pacing and the deadline follow one clock
/// (the runtime's, which a test can pause).
pub struct SnapshotWriter {
    store: Option<SnapshotStore>,
    every: Duration,
    /// Shards changed since their last snapshot (or never written here).
    changed: [bool; SHARDS as usize],
    /// Shards whose held jobs are those of their stored snapshot.
    as_snapshot: [bool; SHARDS as usize],
    last_write: [Option<Instant>; SHARDS as usize],
    /// The last write of any shard: writes are spread over `every`
    /// ([`Self::gap`]), so that a start's first snapshots of every shard
    /// do not come in one burst. Freed memory stays with the process for
    /// the allocator's purge delay (5 s), and sixteen buffers freed within
    /// it were as many MB more at the peak of a million-job start.
    last_any_write: Option<Instant>,
    /// The highest revision of the feed's entries the loop has taken: every
    /// change up to it is in the held shards' jobs.
    applied_to: u64,
    /// The write out: its shard, its size, its put.
    writing: Option<(u32, usize, JoinHandle<anyhow::Result<()>>)>,
}

impl SnapshotWriter {
    /// Writes to `store` at most every `every` per shard; none when
    /// `store` is `None`.
    pub fn new(store: Option<SnapshotStore>, every: Duration) -> Self {
        Self {
            store,
            every,
            changed: [false; SHARDS as usize],
            as_snapshot: [false; SHARDS as usize],
            last_write: [None; SHARDS as usize],
            last_any_write: None,
            applied_to: 0,
            writing: None,
        }
    }

    /// The least time between two writes: every shard once per `every`.
    fn gap(&self) -> Duration {
        self.every / SHARDS
    }

    /// An entry of the feed at `revision` was taken.
    pub fn applied(&mut self, revision: u64) {
        self.applied_to = self.applied_to.max(revision);
    }

    /// `shard`'s jobs changed (an entry applied, a pass loaded).
    pub fn changed(&mut self, shard: u32) {
        self.changed[shard as usize] = true;
        self.as_snapshot[shard as usize] = false;
    }

    /// `shard` is planned here: written at the next turn unless its jobs
    /// are those of its snapshot (a start that loaded them from it), so
    /// that a shard taken over always gets one.
    pub fn planned(&mut self, shard: u32) {
        if !self.as_snapshot[shard as usize] {
            self.changed[shard as usize] = true;
        }
    }

    /// The jobs of `shards` were loaded from their snapshots with no change
    /// since (a start, a pass): they are not written again until they
    /// change, whatever this replica saw of them before (a replica that
    /// held every shard once marked them all changed).
    pub fn loaded_as_written(&mut self, shards: impl IntoIterator<Item = u32>) {
        for shard in shards {
            self.as_snapshot[shard as usize] = true;
            self.changed[shard as usize] = false;
        }
    }

    /// Write one planned shard that changed and was not written for
    /// `every`, unless a write is still out. Call when the loop is idle.
    pub fn step(&mut self, book: &Book) {
        // Called at every idle turn of the loop: nothing is cloned or
        // allocated unless a shard is written.
        if self.store.is_none() {
            return;
        }
        if self
            .writing
            .as_ref()
            .is_some_and(|(_, _, task)| !task.is_finished())
        {
            return;
        }
        if let Some((shard, bytes, task)) = self.writing.take() {
            // A large object's buffers are freed: give them back now
            // rather than after the allocator's purge delay (5 s), which
            // kept a few writes' worth resident at a million jobs. Not for
            // small ones: a give-back makes every worker collect.
            if bytes >= GIVE_BACK_AFTER_BYTES {
                jetcron_allocator::give_back_freed_memory();
            }
            let ended = match futures::FutureExt::now_or_never(task) {
                Some(joined) => put_of(joined),
                None => Err(anyhow::anyhow!("the task did not end")),
            };
            self.written(shard, ended);
        }
        let now = Instant::now();
        let Some(shard) = self.next_to_write(book, now) else {
            return;
        };
        let Some(store) = self.store.clone() else {
            return;
        };
        let Some(pieces) = self.encode(shard, book, now, store.bucket_created()) else {
            return;
        };
        let bytes = pieces.iter().map(bytes::Bytes::len).sum();
        self.writing = Some((
            shard,
            bytes,
            tokio::spawn(async move { store.write(shard, pieces).await }),
        ));
    }

    /// The shard to write at `now`, if any: the lowest planned one that
    /// changed and was not written for `every`, once `every/16` has passed
    /// since the last write of any shard.
    fn next_to_write(&self, book: &Book, now: Instant) -> Option<u32> {
        if self
            .last_any_write
            .is_some_and(|at| now.duration_since(at) < self.gap())
        {
            return None;
        }
        (0..SHARDS).find(|&shard| {
            self.changed[shard as usize]
                && book.is_planned(shard)
                && self.last_write[shard as usize]
                    .is_none_or(|at| now.duration_since(at) >= self.every)
        })
    }

    /// At a graceful stop, before the shards are released: the write out
    /// is awaited, then every planned shard that changed since its last
    /// snapshot is written, whatever `every`, all within `within`. The next
    /// owner (or this replica restarted) then reads each shard's snapshot
    /// and no change after it, instead of up to `every` of changes, or the
    /// whole bucket for a shard not written yet (a stop in the first
    /// `every` after a start).
    pub async fn write_changed_before_stop(&mut self, book: &Book, within: Duration) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let deadline = Instant::now() + within;
        if let Some((shard, _, task)) = self.writing.take() {
            let ended = match tokio::time::timeout_at(deadline, task).await {
                Ok(joined) => put_of(joined),
                Err(_) => Err(anyhow::anyhow!("not written within {within:?} of the stop")),
            };
            self.written(shard, ended);
        }
        let shards: Vec<u32> = (0..SHARDS)
            .filter(|&shard| self.changed[shard as usize] && book.is_planned(shard))
            .collect();
        let mut written = 0;
        for &shard in &shards {
            let Some(pieces) = self.encode(shard, book, Instant::now(), store.bucket_created())
            else {
                continue;
            };
            let ended = match tokio::time::timeout_at(deadline, store.write(shard, pieces)).await {
                Ok(put) => put,
                Err(_) => Err(anyhow::anyhow!("not written within {within:?} of the stop")),
            };
            let ok = ended.is_ok();
            self.written(shard, ended);
            if !ok {
                break;
            }
            written += 1;
        }
        if !shards.is_empty() {
            info!(
                written,
                changed = shards.len(),
                "shard snapshots written at the stop"
            );
        }
    }

    /// A put of `shard` ended: a failed one leaves the shard changed (tried
    /// again at a later turn; at a stop, its next owner replays more).
    fn written(&mut self, shard: u32, ended: anyhow::Result<()>) {
        if let Err(e) = ended {
            warn!(
                shard,
                error = %format!("{e:#}"),
                "cannot write a shard snapshot"
            );
            self.changed[shard as usize] = true;
        }
    }

    /// `shard`'s jobs as a snapshot, the shard then counted as written at
    /// `now`; `None` (and not tried again before `every`) if they cannot
    /// be encoded.
    fn encode(
        &mut self,
        shard: u32,
        book: &Book,
        now: Instant,
        bucket_created: i64,
    ) -> Option<Vec<bytes::Bytes>> {
        let started = Instant::now();
        let jobs: Vec<_> = book.shard(shard).collect();
        let first = self.last_write[shard as usize].is_none();
        let pieces = match snapshot_format::encode(
            shard,
            self.applied_to,
            bucket_created,
            jobs.iter().copied(),
        ) {
            Ok(pieces) => pieces,
            Err(e) => {
                warn!(shard, error = %format!("{e:#}"), "cannot encode a shard snapshot");
                self.last_write[shard as usize] = Some(now);
                return None;
            }
        };
        let bytes: usize = pieces.iter().map(bytes::Bytes::len).sum();
        debug!(
            shard,
            jobs = jobs.len(),
            bytes,
            read_to = self.applied_to,
            encode_ms = started.elapsed().as_millis() as u64,
            "writing a shard snapshot"
        );
        if first {
            info!(
                shard,
                jobs = jobs.len(),
                bytes,
                "first snapshot of a shard planned here"
            );
        }
        self.mark_written(shard, now);
        Some(pieces)
    }

    /// `shard` counts as written at `now` (its put may still fail).
    fn mark_written(&mut self, shard: u32, now: Instant) {
        self.last_write[shard as usize] = Some(now);
        self.changed[shard as usize] = false;
        self.last_any_write = Some(now);
    }
}

/// How the put of a write task ended.
fn put_of(joined: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    joined
        .map_err(|e| anyhow::anyhow!("the task failed: {e}"))
        .and_then(|put| put)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: Duration = Duration::from_secs(16);

    fn planned(shards: &[u32]) -> Book {
        let mut book = Book::default();
        for &shard in shards {
            let table = book.take_to_plan(shard);
            book.put_planned(shard, table);
        }
        book
    }

    #[test]
    fn only_planned_changed_shards_are_written_one_per_gap_and_each_once_per_every() {
        let mut writer = SnapshotWriter::new(None, EVERY);
        let book = planned(&[2, 5, 9]);
        let t0 = Instant::now();
        assert_eq!(writer.next_to_write(&book, t0), None, "nothing changed");
        for shard in [1, 5, 9] {
            writer.changed(shard);
        }
        // Shard 1 changed but is not planned here.
        assert_eq!(writer.next_to_write(&book, t0), Some(5));
        writer.mark_written(5, t0);
        // Within the gap (every/16 = 1 s), nothing else goes.
        assert_eq!(
            writer.next_to_write(&book, t0 + Duration::from_millis(999)),
            None
        );
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(writer.next_to_write(&book, t1), Some(9));
        writer.mark_written(9, t1);
        // Shard 5 changed again: not before `every` after its last write.
        writer.changed(5);
        assert_eq!(
            writer.next_to_write(&book, t0 + Duration::from_secs(15)),
            None
        );
        assert_eq!(writer.next_to_write(&book, t0 + EVERY), Some(5));
    }

    #[test]
    fn a_shard_is_written_once_planned_unless_it_is_as_its_snapshot() {
        let mut writer = SnapshotWriter::new(None, EVERY);
        let book = planned(&[3, 4]);
        let t0 = Instant::now();
        // A replica that held every shard once marked them all changed;
        // shard 3 is then loaded as its snapshot holds it, shard 4 is not.
        writer.changed(3);
        writer.changed(4);
        writer.loaded_as_written([3]);
        writer.planned(3);
        writer.planned(4);
        assert_eq!(writer.next_to_write(&book, t0), Some(4));
        writer.mark_written(4, t0);
        assert_eq!(writer.next_to_write(&book, t0 + EVERY), None);
        // A change to shard 3 makes it due.
        writer.changed(3);
        assert_eq!(writer.next_to_write(&book, t0 + EVERY), Some(3));
        // A shard planned here that was not loaded from its snapshot gets
        // one even with no change seen.
        let mut fresh = SnapshotWriter::new(None, EVERY);
        fresh.planned(4);
        assert_eq!(fresh.next_to_write(&book, t0), Some(4));
    }
}
