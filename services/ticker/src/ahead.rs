//! Fires stored ahead of their time, until they are due: with a lookahead,
//! a due event is in `JETCRON_DUE` (and usually held by an executor) up to
//! `lookahead` before its publish instant. When the job is deleted or paused
//! meanwhile, those fires must not run: the ticker that stored them
//! remembers them here and kills them by run id (the `kill.<run_id>` marker
//! the executor checks before it starts an attempt).
//!
//! Only the shard's owner knows what it stored; a fire it stored before it
//! lost the shard and that is deleted a moment later still runs (a race of
//! at most one lookahead, documented in docs/schedules.md).

use std::collections::VecDeque;

use chrono::{DateTime, Utc};

/// Fires stored before their publish instant, oldest instant first.
#[derive(Debug, Default)]
pub struct AheadFires {
    fires: VecDeque<AheadFire>,
}

#[derive(Debug, Clone, PartialEq)]
struct AheadFire {
    fire_at: DateTime<Utc>,
    job_id: String,
    scheduled_at: DateTime<Utc>,
}

impl AheadFires {
    /// Remember a fire stored at `now`, if its instant is still to come.
    pub fn stored(
        &mut self,
        job_id: &str,
        scheduled_at: DateTime<Utc>,
        fire_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) {
        if fire_at <= now {
            return;
        }
        let fire = AheadFire {
            fire_at,
            job_id: job_id.to_string(),
            scheduled_at,
        };
        // Batches are stored in publish order, so this is almost always a push.
        let at = self.fires.partition_point(|f| f.fire_at <= fire_at);
        self.fires.insert(at, fire);
    }

    /// Forget the fires whose instant has come (they are starting, or ran).
    pub fn prune(&mut self, now: DateTime<Utc>) {
        while self.fires.front().is_some_and(|f| f.fire_at <= now) {
            self.fires.pop_front();
        }
    }

    /// Take the scheduled times of `job_id` stored ahead and not due yet.
    pub fn take_job(&mut self, job_id: &str, now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        self.prune(now);
        let mut taken = Vec::new();
        self.fires.retain(|f| {
            if f.job_id == job_id {
                taken.push(f.scheduled_at);
                false
            } else {
                true
            }
        });
        taken
    }

    pub fn len(&self) -> usize {
        self.fires.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fires.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, s)
            .single()
            .expect("instant")
    }

    #[test]
    fn only_fires_still_to_come_are_kept_and_taken_per_job() {
        let mut ahead = AheadFires::default();
        ahead.stored("a", at(1), at(1), at(5));
        assert!(ahead.is_empty(), "already due when stored");
        ahead.stored("a", at(6), at(6), at(5));
        ahead.stored("b", at(7), at(7), at(5));
        ahead.stored("a", at(8), at(9), at(5));
        assert_eq!(ahead.len(), 3);
        assert_eq!(ahead.take_job("a", at(6)), vec![at(8)], "6 is due at 6");
        assert_eq!(ahead.take_job("a", at(6)), Vec::<DateTime<Utc>>::new());
        ahead.prune(at(7));
        assert!(ahead.is_empty());
    }

    #[test]
    fn out_of_order_stores_stay_sorted_for_pruning() {
        let mut ahead = AheadFires::default();
        ahead.stored("late", at(20), at(20), at(0));
        ahead.stored("early", at(10), at(10), at(0));
        ahead.prune(at(15));
        assert_eq!(ahead.take_job("late", at(15)), vec![at(20)]);
    }
}
