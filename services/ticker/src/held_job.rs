//! A job as the ticker holds it: when it fires and which revision of its
//! definition a fire carries, not the definition itself.
//!
//! A ticker holds every job of the shards it holds ([`crate::holding`]),
//! so what it keeps per job decides how many jobs fit: a whole
//! parsed definition cost about 1,100 bytes, this about a fifth of that.
//! The definition a due event carries is read back by revision when the
//! fire is published ([`crate::definitions`]), and kept only for jobs that
//! fire again soon.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use compact_str::CompactString;
use jetcron_core::job::fire_times::Timing;
use jetcron_core::job::ValidJob;

#[derive(Debug, Clone)]
pub struct HeldJob {
    /// Kept in the job itself up to 24 bytes (most ids): an `Arc<str>` was
    /// a pointer here and a 32-byte allocation beside it.
    pub id: CompactString,
    /// Shared by the jobs of one pool; a thin pointer (8 bytes, not the
    /// 16 of an `Arc<str>`).
    pub pool: Arc<String>,
    pub timing: Timing,
    pub paused: bool,
    /// KV revision of the definition (its sequence in the bucket's stream).
    pub revision: u64,
    /// When this revision was written (server time).
    pub defined_at: DateTime<Utc>,
}

impl HeldJob {
    pub fn new(
        job: &ValidJob,
        id: CompactString,
        pool: Arc<String>,
        revision: u64,
        defined_at: DateTime<Utc>,
    ) -> Self {
        Self {
            id,
            pool,
            timing: job.timing(),
            paused: job.spec.paused,
            revision,
            defined_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_job_stays_small() {
        // An id of up to 24 bytes in place, pool pointer, 32-byte timing,
        // flag, revision, instant; held in its shard's table beside its
        // plan (`plan::PlannedJob`).
        assert_eq!(std::mem::size_of::<HeldJob>(), 88);
        assert!(
            std::mem::size_of::<Timing>() <= 32,
            "{}",
            std::mem::size_of::<Timing>()
        );
    }
}
