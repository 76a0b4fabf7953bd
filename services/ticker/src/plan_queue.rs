//! The shards owned here, with their jobs held, that wait to be planned.
//!
//! The ticker's loop plans one queued shard between its batches of due
//! events ([`crate::replica_changes::plan_next`]), so the fires of a shard planned go
//! out while the next one is planned: at a cold start with a million jobs
//! the 16 shards took 1.1 s to plan, at ten million jobs 3-4 s each, and
//! no fire went out meanwhile. Ownership changes are still applied at once:
//! a shard lost leaves the queue, one acquired again replaces its entry.

use std::collections::BTreeMap;

use crate::shard_holdings::Acquisition;

/// Queued shards by number, each with the acquisition it is to be planned
/// from (one entry per shard: the latest acquisition stands).
#[derive(Debug, Default)]
pub(crate) struct PlanQueue {
    queued: BTreeMap<u32, Acquisition>,
}

impl PlanQueue {
    /// Queue `shard` to be planned from `acquisition`; an entry already
    /// queued for it is replaced.
    pub(crate) fn push(&mut self, shard: u32, acquisition: Acquisition) {
        self.queued.insert(shard, acquisition);
    }

    /// `shard` is no longer to be planned (lost).
    pub(crate) fn remove(&mut self, shard: u32) {
        self.queued.remove(&shard);
    }

    pub(crate) fn contains(&self, shard: u32) -> bool {
        self.queued.contains_key(&shard)
    }

    /// Take `shard` off the queue, with the acquisition it is to be
    /// planned from.
    pub(crate) fn take(&mut self, shard: u32) -> Option<Acquisition> {
        self.queued.remove(&shard)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// The queued shard with the lowest number, taken off the queue. Lowest
    /// first because a replica above its share hands on its highest
    /// unplanned shard ([`crate::share::to_release`]): the shards most
    /// likely to go elsewhere are planned last. (At a cold start a replica
    /// takes shards released by another highest first: planned in that
    /// order, the next shard to plan was the next one handed on.)
    pub(crate) fn pop_lowest(&mut self) -> Option<(u32, Acquisition)> {
        self.queued.pop_first()
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Duration};

    use super::*;

    fn acquisition(seconds_ago: i64) -> Acquisition {
        let now = DateTime::from_timestamp(1_800_000_000, 0).expect("instant");
        let at = now - Duration::seconds(seconds_ago);
        Acquisition {
            done: at,
            emitted_before: at,
            acquired_at: at,
        }
    }

    #[test]
    fn shards_are_planned_lowest_first_whatever_order_they_came_in() {
        let mut queue = PlanQueue::default();
        for shard in [15, 9, 14, 8] {
            queue.push(shard, acquisition(1));
        }
        let order: Vec<u32> = std::iter::from_fn(|| queue.pop_lowest().map(|(s, _)| s)).collect();
        assert_eq!(order, vec![8, 9, 14, 15]);
        assert!(queue.is_empty());
    }

    #[test]
    fn a_lost_shard_leaves_the_queue_and_one_acquired_again_keeps_the_latest_acquisition() {
        let mut queue = PlanQueue::default();
        let first = acquisition(60);
        let again = acquisition(1);
        queue.push(3, first);
        queue.push(5, first);
        queue.remove(3);
        assert!(!queue.contains(3));
        assert!(queue.contains(5));
        queue.push(5, again);
        let (shard, from) = queue.pop_lowest().expect("shard 5");
        assert_eq!((shard, from), (5, again), "the latest acquisition stands");
        assert_eq!(queue.pop_lowest(), None, "queued once");
    }

    #[test]
    fn a_shard_taken_out_of_turn_is_no_longer_queued() {
        let mut queue = PlanQueue::default();
        let (for_2, for_7) = (acquisition(5), acquisition(3));
        queue.push(2, for_2);
        queue.push(7, for_7);
        assert_eq!(queue.take(7), Some(for_7));
        assert_eq!(queue.take(7), None);
        assert!(!queue.contains(7));
        assert_eq!(queue.pop_lowest(), Some((2, for_2)));
    }
}
