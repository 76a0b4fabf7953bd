//! What the ticker's loop and the ownership task share about each shard
//! held here: until when its lease lets this replica publish, its
//! watermark, whether it is planned here, and whether due events are being
//! stored at all. One lock, held for a look-up or a write, never across an
//! await.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use jetcron_io::clock_check::ClockCheck;

#[derive(Debug, Default)]
struct LeaseTable {
    valid_until: HashMap<u32, Instant>,
    watermarks: HashMap<u32, DateTime<Utc>>,
    /// Shards whose watermark came from a plan of this replica (not only
    /// from the record it took over).
    planned: HashSet<u32>,
    /// Since when due events of this replica fail to be stored (`None`: they are stored).
    publish_failing_since: Option<Instant>,
}

/// Shared between the ticker loop (reads validity, writes watermarks) and the
/// ownership task (writes validity, reads watermarks).
#[derive(Debug, Clone, Default)]
pub struct Leases {
    table: Arc<Mutex<LeaseTable>>,
    /// This host's clock against the servers': no lease is valid while it
    /// is not trusted.
    clock_check: ClockCheck,
}

impl Leases {
    fn lock(&self) -> std::sync::MutexGuard<'_, LeaseTable> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Leases checked against `clock_check` as well.
    pub fn with_clock_check(clock_check: ClockCheck) -> Self {
        Self {
            clock_check,
            ..Self::default()
        }
    }

    /// Whether this replica may publish fires of `shard` now: its lease is
    /// current and this host's clock is trusted.
    pub fn is_valid(&self, shard: u32) -> bool {
        self.lock()
            .valid_until
            .get(&shard)
            .is_some_and(|until| *until > Instant::now())
            && self.clock_check.trusted()
    }

    /// Whether this host's clock may be acted on now.
    pub(super) fn clock_trusted(&self) -> bool {
        self.clock_check.trusted()
    }

    /// Record that every fire of `shard` scheduled up to `done` is stored,
    /// as the shard's plan here says.
    pub fn set_watermark(&self, shard: u32, done: DateTime<Utc>) {
        let mut table = self.lock();
        table.watermarks.insert(shard, done);
        table.planned.insert(shard);
    }

    /// `shard` is planned here: handed on after the unplanned ones
    /// ([`crate::share::to_release`]). Its watermark is recorded with the
    /// loop's next [`Self::set_watermark`].
    pub fn mark_planned(&self, shard: u32) {
        self.lock().planned.insert(shard);
    }

    /// The watermark a shard taken over starts from (its last owner's).
    pub(super) fn start_from(&self, shard: u32, done: DateTime<Utc>) {
        let mut table = self.lock();
        table.watermarks.insert(shard, done);
        table.planned.remove(&shard);
    }

    pub(super) fn is_planned(&self, shard: u32) -> bool {
        self.lock().planned.contains(&shard)
    }

    pub(super) fn watermark(&self, shard: u32) -> Option<DateTime<Utc>> {
        self.lock().watermarks.get(&shard).copied()
    }

    /// The ticker loop's report: due events fail to be stored since `since`
    /// (`None`: the last batch was stored).
    pub fn set_publish_failing_since(&self, since: Option<Instant>) {
        self.lock().publish_failing_since = since;
    }

    pub(super) fn publish_failing_for(&self, now: Instant) -> Duration {
        self.lock()
            .publish_failing_since
            .map_or(Duration::ZERO, |since| now.duration_since(since))
    }

    pub(super) fn grant(&self, shard: u32, until: Instant) {
        self.lock().valid_until.insert(shard, until);
    }

    /// Keep `shard` valid until `until` unless it already is for longer.
    pub(super) fn extend(&self, shard: u32, until: Instant) {
        let mut table = self.lock();
        let current = table.valid_until.entry(shard).or_insert(until);
        *current = (*current).max(until);
    }

    pub(super) fn revoke(&self, shard: u32) {
        let mut table = self.lock();
        table.valid_until.remove(&shard);
        table.watermarks.remove(&shard);
        table.planned.remove(&shard);
    }
}
