//! Which shards' jobs this replica holds.
//!
//! A replica needs the jobs of the shards it owns, not every job: three
//! replicas of ten million jobs should each hold about a third. So:
//!
//! - **At a start** every shard is held. The whole bucket is read once
//!   anyway, and ownership takes shards only after that read; the replicas
//!   of a cold start then hand shards to each other until each has its
//!   share, and a shard handed over that is still held is planned at once.
//! - **Once ownership has not changed for `quiet_for`** (two lease TTLs), the
//!   jobs of shards owned elsewhere are dropped. Until every shard has a
//!   snapshot in the store, the quiet must also last twice this replica's
//!   own read of the bucket (see [`Holdings::synced`]).
//! - **A shard acquired later whose jobs are not held** is loaded by a pass
//!   over the bucket that decodes only the keys of the shards it loads
//!   ([`jetcron_io::job_feed::read_current_of`]). The feed's entries of
//!   those shards wait meanwhile, and the shard is planned once the pass is
//!   in. The lease does not wait: the shard's watermark stays where the
//!   last owner left it until the plan exists, so a takeover costs the
//!   pass's time in lateness and loses nothing.
//!
//! Order: a pass read every change up to its `read_to`, and the feed may be
//! behind or ahead of it. The feed's entries of a loaded shard at or below
//! `read_to` are in what the pass read already and are skipped (a delete
//! the feed is late with must not remove a job the pass read after it); the
//! others are applied in the feed's order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use jetcron_io::job_feed::JobEntry;

use crate::shards::{shard_of, SHARDS};

/// What an acquisition says about where its shard resumes (see
/// [`crate::ownership::OwnershipChange::Acquired`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Acquisition {
    pub done: DateTime<Utc>,
    pub emitted_before: DateTime<Utc>,
    /// When it was acquired: the time a pass takes is not part of the
    /// outage, and must not turn late fires into misfires.
    pub acquired_at: DateTime<Utc>,
}

/// A pass's number, to match its result with the shards it loads.
pub type PassId = u64;

#[derive(Debug)]
enum Holding {
    /// Its jobs are in the book; the feed's entries at or below `floor`
    /// are older than what the book holds.
    Kept {
        floor: u64,
    },
    /// Read by pass `pass` (`None`: not started yet); the feed's entries
    /// wait in `waiting`; planned from `plan_from` once loaded, if still
    /// owned.
    Loading {
        pass: Option<PassId>,
        waiting: Vec<Arc<JobEntry>>,
        plan_from: Option<Acquisition>,
    },
    Dropped,
}

/// What to do with an entry of the feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Its shard is held: apply it.
    Apply,
    /// Older than what its shard's pass read: skip it.
    Stale,
    /// Its shard is being loaded: kept until the pass is in.
    Waiting,
    /// Its shard's jobs are not held here.
    NotHeld,
}

/// A shard whose pass is in.
#[derive(Debug)]
pub struct Loaded {
    pub shard: u32,
    /// The feed's entries that came meanwhile, newer than the pass, in order.
    pub waiting: Vec<Arc<JobEntry>>,
    /// Plan it from here (`None`: lost while it loaded).
    pub plan_from: Option<Acquisition>,
}

/// The holding of every shard.
#[derive(Debug)]
pub struct Holdings {
    shards: Vec<Holding>,
    passes: PassId,
    quiet_for: Duration,
    /// Twice the first read of the bucket: the quiet waited for while a
    /// shard taken later may cost a pass over the whole bucket.
    quiet_while_unsnapshotted: Duration,
    /// Every shard has a snapshot: a shard taken later costs a read of it.
    every_shard_snapshotted: bool,
    /// The last ownership change, or when the bucket was loaded.
    changed_at: Instant,
    started_at: Instant,
    /// Whether the feed has read the whole bucket once (ownership takes
    /// shards only after that, so nothing is dropped before).
    synced: bool,
}

impl Holdings {
    /// Every shard held; jobs of shards owned elsewhere dropped once
    /// ownership stood still for `quiet_for`.
    pub fn new(quiet_for: Duration, now: Instant) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Holding::Kept { floor: 0 }).collect(),
            passes: 0,
            quiet_for,
            quiet_while_unsnapshotted: quiet_for,
            every_shard_snapshotted: false,
            changed_at: now,
            started_at: now,
            synced: false,
        }
    }

    /// Whether the jobs of `shard` are in the book.
    pub fn holds(&self, shard: u32) -> bool {
        matches!(self.shards[shard as usize], Holding::Kept { .. })
    }

    /// The bucket has been read once.
    ///
    /// Replicas started together load for about as long, and take shards
    /// only once loaded: until every shard has a snapshot, a replica waits
    /// at least twice its own load before it drops anything, so that those
    /// still loading have joined and the rebalancing is over. (Ten million
    /// jobs on three replicas of one 2-core machine load for two to four
    /// minutes; dropping after 10 s of quiet made every shard the late
    /// ones took cost a pass over the whole bucket, and the passes swamped
    /// the server.)
    pub fn synced(&mut self, now: Instant) {
        if !self.synced {
            self.synced = true;
            self.changed_at = now;
            self.quiet_while_unsnapshotted = self
                .quiet_for
                .max(now.saturating_duration_since(self.started_at) * 2);
        }
    }

    /// Every shard has a snapshot written for this bucket: a shard dropped
    /// here and taken again later is loaded from it (0.4-0.5 s a shard at
    /// ten million jobs, not a pass over the bucket), so the jobs of shards
    /// owned elsewhere go after `quiet_for` alone.
    pub fn every_shard_snapshotted(&mut self) {
        self.every_shard_snapshotted = true;
    }

    /// Every shard's jobs were read from snapshots and the changes after
    /// them, up to `read_to`: the feed's entries up to it are stale, and
    /// the bucket counts as read once (ownership may take shards).
    pub fn preloaded(&mut self, read_to: u64, now: Instant) {
        for holding in &mut self.shards {
            *holding = Holding::Kept { floor: read_to };
        }
        self.synced(now);
    }

    /// Where the feed's `entry` goes.
    pub fn route(&mut self, entry: &Arc<JobEntry>) -> Route {
        match &mut self.shards[shard_of(&entry.key) as usize] {
            Holding::Kept { floor } if entry.revision <= *floor => Route::Stale,
            Holding::Kept { .. } => Route::Apply,
            Holding::Loading { waiting, .. } => {
                waiting.push(Arc::clone(entry));
                Route::Waiting
            }
            Holding::Dropped => Route::NotHeld,
        }
    }

    /// `shard` was acquired: `Some` to plan it now (its jobs are held),
    /// `None` when it must be loaded first.
    pub fn acquired(
        &mut self,
        shard: u32,
        acquisition: Acquisition,
        now: Instant,
    ) -> Option<Acquisition> {
        self.changed_at = now;
        let holding = &mut self.shards[shard as usize];
        match holding {
            Holding::Kept { .. } => Some(acquisition),
            Holding::Loading { plan_from, .. } => {
                *plan_from = Some(acquisition);
                None
            }
            Holding::Dropped => {
                *holding = Holding::Loading {
                    pass: None,
                    waiting: Vec::new(),
                    plan_from: Some(acquisition),
                };
                None
            }
        }
    }

    /// `shard` was lost. Its jobs stay until ownership settles again (it
    /// may come back at once); a pass under way still completes.
    pub fn lost(&mut self, shard: u32, now: Instant) {
        self.changed_at = now;
        if let Holding::Loading { plan_from, .. } = &mut self.shards[shard as usize] {
            *plan_from = None;
        }
    }

    /// The shards waiting for a pass not started yet, under a new pass's
    /// number; `None` when there are none, or while a pass is under way
    /// (each pass reads the whole bucket: one at a time, and the shards
    /// acquired meanwhile share the next).
    pub fn start_pass(&mut self) -> Option<(PassId, Vec<u32>)> {
        let under_way = self
            .shards
            .iter()
            .any(|holding| matches!(holding, Holding::Loading { pass: Some(_), .. }));
        if under_way {
            return None;
        }
        let id = self.passes + 1;
        let mut shards = Vec::new();
        for (shard, holding) in (0..SHARDS).zip(self.shards.iter_mut()) {
            if let Holding::Loading {
                pass: pass @ None, ..
            } = holding
            {
                *pass = Some(id);
                shards.push(shard);
            }
        }
        if shards.is_empty() {
            return None;
        }
        self.passes = id;
        Some((id, shards))
    }

    /// Pass `pass` read every change up to `read_to`: its shards are held
    /// from now on.
    pub fn loaded(&mut self, pass: PassId, read_to: u64, now: Instant) -> Vec<Loaded> {
        self.changed_at = now;
        let mut loaded = Vec::new();
        for (shard, holding) in (0..SHARDS).zip(self.shards.iter_mut()) {
            if !matches!(holding, Holding::Loading { pass: Some(p), .. } if *p == pass) {
                continue;
            }
            let Holding::Loading {
                waiting, plan_from, ..
            } = std::mem::replace(holding, Holding::Kept { floor: read_to })
            else {
                continue;
            };
            loaded.push(Loaded {
                shard,
                waiting: waiting
                    .into_iter()
                    .filter(|entry| entry.revision > read_to)
                    .collect(),
                plan_from,
            });
        }
        loaded
    }

    /// The shards held but not `owned` once ownership stood still for
    /// `quiet_for`: they are dropped, and their jobs go.
    pub fn to_drop(&mut self, now: Instant, owned: impl Fn(u32) -> bool) -> Vec<u32> {
        let quiet_for = if self.every_shard_snapshotted {
            self.quiet_for
        } else {
            self.quiet_while_unsnapshotted
        };
        if !self.synced || now.duration_since(self.changed_at) < quiet_for {
            return Vec::new();
        }
        let mut dropped = Vec::new();
        for (shard, holding) in (0..SHARDS).zip(self.shards.iter_mut()) {
            if matches!(holding, Holding::Kept { .. }) && !owned(shard) {
                *holding = Holding::Dropped;
                dropped.push(shard);
            }
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetcron_io::job_feed::Written;

    const SETTLE: Duration = Duration::from_secs(10);

    /// Entries are written and shards acquired at this fixed instant: the
    /// holdings go by revisions and the monotonic instants passed in.
    fn at() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).expect("instant")
    }

    fn entry(key: &str, revision: u64) -> Arc<JobEntry> {
        Arc::new(JobEntry {
            key: key.to_string(),
            revision,
            written_at: at(),
            written: Written::Removed,
        })
    }

    /// A key of `shard`.
    fn key_in(shard: u32) -> String {
        (0..)
            .map(|i| format!("job-{i}"))
            .find(|key| shard_of(key) == shard)
            .expect("some key")
    }

    fn acquisition() -> Acquisition {
        let at = at();
        Acquisition {
            done: at,
            emitted_before: at,
            acquired_at: at,
        }
    }

    #[test]
    fn nothing_is_dropped_before_the_bucket_is_loaded_and_ownership_settles() {
        let start = Instant::now();
        let mut holdings = Holdings::new(SETTLE, start);
        assert!(holdings.to_drop(start + SETTLE * 3, |_| false).is_empty());
        // Loaded in a quarter of the quiet period: the quiet period stands.
        let synced_at = start + SETTLE / 4;
        holdings.synced(synced_at);
        assert!(holdings
            .to_drop(synced_at + SETTLE / 2, |_| false)
            .is_empty());
        // An acquisition restarts the wait; a held shard is planned at once.
        let acquired_at = start + SETTLE * 2;
        let taken = acquisition();
        assert_eq!(holdings.acquired(3, taken, acquired_at), Some(taken));
        assert!(holdings
            .to_drop(acquired_at + SETTLE / 2, |s| s == 3)
            .is_empty());
        let dropped = holdings.to_drop(acquired_at + SETTLE, |s| s == 3);
        assert_eq!(dropped, (0..SHARDS).filter(|s| *s != 3).collect::<Vec<_>>());
        assert!(holdings.holds(3));
        assert!(!holdings.holds(4));
        assert_eq!(holdings.route(&entry(&key_in(3), 9)), Route::Apply);
        assert_eq!(holdings.route(&entry(&key_in(4), 9)), Route::NotHeld);
    }

    #[test]
    fn a_start_from_snapshots_holds_every_shard_and_skips_what_they_hold() {
        let start = Instant::now();
        let mut holdings = Holdings::new(SETTLE, start);
        holdings.preloaded(40, start + SETTLE / 10);
        for shard in 0..SHARDS {
            assert!(holdings.holds(shard));
        }
        // The feed's read of the whole bucket: what the snapshots hold is
        // stale, what came after them applies.
        assert_eq!(holdings.route(&entry(&key_in(2), 40)), Route::Stale);
        assert_eq!(holdings.route(&entry(&key_in(2), 41)), Route::Apply);
        // Counts as the bucket read once: shards owned elsewhere go once
        // ownership settles.
        let acquired_at = start + SETTLE;
        holdings.acquired(2, acquisition(), acquired_at);
        let dropped = holdings.to_drop(acquired_at + SETTLE, |s| s == 2);
        assert_eq!(dropped.len(), SHARDS as usize - 1);
    }

    #[test]
    fn a_replica_that_loaded_long_waits_twice_its_load_before_it_drops() {
        let start = Instant::now();
        let mut holdings = Holdings::new(SETTLE, start);
        let load = Duration::from_secs(120);
        holdings.synced(start + load);
        assert!(holdings
            .to_drop(start + load + load * 2 - SETTLE, |_| false)
            .is_empty());
        assert_eq!(
            holdings.to_drop(start + load * 3, |_| false).len(),
            SHARDS as usize
        );
    }

    #[test]
    fn once_every_shard_has_a_snapshot_the_quiet_is_two_ttls_again() {
        let start = Instant::now();
        let mut holdings = Holdings::new(SETTLE, start);
        let load = Duration::from_secs(120);
        holdings.synced(start + load);
        let quiet_since = start + load + SETTLE * 2;
        holdings.acquired(4, acquisition(), quiet_since);
        assert!(holdings
            .to_drop(quiet_since + SETTLE, |s| s == 4)
            .is_empty());
        holdings.every_shard_snapshotted();
        assert!(
            holdings
                .to_drop(quiet_since + SETTLE / 2, |s| s == 4)
                .is_empty(),
            "the quiet itself still stands"
        );
        assert_eq!(
            holdings.to_drop(quiet_since + SETTLE, |s| s == 4),
            (0..SHARDS).filter(|s| *s != 4).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_dropped_shard_acquired_again_is_loaded_and_the_feed_waits_for_the_pass() {
        let start = Instant::now();
        let mut holdings = Holdings::new(SETTLE, start);
        holdings.synced(start);
        let dropped = holdings.to_drop(start + SETTLE, |_| false);
        assert_eq!(dropped.len(), SHARDS as usize);

        let at = start + SETTLE * 2;
        let taken = acquisition();
        assert_eq!(holdings.acquired(5, taken, at), None, "loaded first");
        assert_eq!(holdings.acquired(6, taken, at), None);
        let (pass, shards) = holdings.start_pass().expect("a pass");
        assert_eq!(shards, vec![5, 6]);
        assert!(holdings.start_pass().is_none(), "one pass for both");
        assert!(!holdings.holds(5));

        // The feed goes on meanwhile: before and after what the pass reads.
        let key = key_in(5);
        assert_eq!(holdings.route(&entry(&key, 40)), Route::Waiting);
        assert_eq!(holdings.route(&entry(&key, 60)), Route::Waiting);
        // Lost while loading: the pass completes, nothing is planned.
        holdings.lost(6, at);

        let loaded = holdings.loaded(pass, 50, at);
        assert_eq!(loaded.len(), 2);
        assert_eq!(loaded[0].shard, 5);
        assert_eq!(loaded[0].plan_from, Some(taken));
        let waiting: Vec<u64> = loaded[0].waiting.iter().map(|e| e.revision).collect();
        assert_eq!(waiting, vec![60], "what the pass read already is skipped");
        assert_eq!((loaded[1].shard, loaded[1].plan_from), (6, None));
        assert!(holdings.holds(5) && holdings.holds(6));

        // Later entries of the feed at or below the pass are stale.
        assert_eq!(holdings.route(&entry(&key, 50)), Route::Stale);
        assert_eq!(holdings.route(&entry(&key, 61)), Route::Apply);
        // The lost one goes once ownership settles; the owned one stays.
        assert_eq!(holdings.to_drop(at + SETTLE, |s| s == 5), vec![6]);
    }

    #[test]
    fn a_pass_result_for_shards_it_did_not_read_changes_nothing() {
        let start = Instant::now();
        let mut holdings = Holdings::new(SETTLE, start);
        holdings.synced(start);
        holdings.to_drop(start + SETTLE, |_| false);
        holdings.acquired(1, acquisition(), start + SETTLE);
        let (first, _) = holdings.start_pass().expect("a pass");
        holdings.acquired(2, acquisition(), start + SETTLE);
        assert!(holdings.start_pass().is_none(), "one pass at a time");
        let loaded = holdings.loaded(first, 10, start + SETTLE);
        assert_eq!(loaded.iter().map(|l| l.shard).collect::<Vec<_>>(), vec![1]);
        assert!(!holdings.holds(2), "still waiting for its own pass");
        assert_eq!(holdings.loaded(first, 10, start + SETTLE).len(), 0);
        let (second, shards) = holdings.start_pass().expect("the next pass");
        assert_eq!(shards, vec![2]);
        assert_eq!(holdings.loaded(second, 12, start + SETTLE).len(), 1);
        assert!(holdings.holds(2));
    }
}
