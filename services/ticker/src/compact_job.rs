//! A job as the ticker holds it: when it fires and which revision of its
//! definition a fire carries, not the definition itself.
//!
//! A ticker holds every job of the shards it holds ([`crate::shard_holdings`]),
//! so what it keeps per job decides how many jobs fit: a whole
//! parsed definition cost about 1,100 bytes, this about a fifth of that.
//! The definition a due event carries is read back by revision when the
//! fire is published ([`crate::definitions`]), and kept only for jobs that
//! fire again soon.

use chrono::{DateTime, Utc};
use compact_str::CompactString;
use jetcron_core::job::ValidJob;
use jetcron_core::schedule::fire_times::Timing;

use crate::millis::Millis;
use crate::pool_name::PoolName;

#[derive(Debug, Clone)]
pub struct HeldJob {
    /// Kept in the job itself up to 24 bytes (most ids): an `Arc<str>` was
    /// a pointer here and a 32-byte allocation beside it.
    pub id: CompactString,
    /// Its pool's number (4 bytes, beside `paused` in one word).
    pub pool: PoolName,
    pub paused: bool,
    pub timing: Timing,
    /// KV revision of the definition (its sequence in the bucket's stream).
    pub revision: u64,
    /// When this revision was written (server time), down to its
    /// millisecond: schedules fire on whole milliseconds, so no scheduled
    /// time lies between the two. The one thing it moves is a takeover's
    /// choice between firing every late fire and the misfire policy
    /// (`now - from <= late_threshold` in `FirePlan::recover_in`), by
    /// under a millisecond at the threshold.
    pub defined_at: Millis,
}

impl HeldJob {
    /// The held form of `job` at `revision` (written at `defined_at`),
    /// under the id its definition names (a valid definition's id is its
    /// key: validation fills it in or refuses another).
    pub fn of(job: &ValidJob, revision: u64, defined_at: DateTime<Utc>) -> Self {
        Self {
            id: CompactString::from(job.spec.id.as_str()),
            pool: PoolName::of(&job.pool),
            paused: job.spec.paused,
            timing: job.timing(),
            revision,
            defined_at: Millis::of(defined_at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_job_stays_small() {
        // An id of up to 24 bytes in place, pool number and flag, 32-byte
        // timing, revision, instant; held in its shard's table beside its
        // plan (`plan::PlannedJob`).
        assert_eq!(std::mem::size_of::<HeldJob>(), 80);
        assert!(
            std::mem::size_of::<Timing>() <= 32,
            "{}",
            std::mem::size_of::<Timing>()
        );
    }
}
