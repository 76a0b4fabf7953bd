//! Which shards a replica takes and which it gives up in one round of
//! [`crate::ownership`]: a pure function of what the replica saw (each
//! shard record's state, how long it has been unchanged by this replica's
//! monotonic clock, its server age) and of the lease timing. The ownership
//! task reads the bucket, asks here, and writes what was decided.
//!
//! The rules:
//! - the fair share is `ceil(SHARDS / live replicas)`;
//! - a shard is taken when it has no record, an unreadable one, a free one
//!   (released by its owner) or a stale one (unchanged past
//!   [`LeaseOptions::stale_after`], or older than three TTLs by the server's
//!   clock: its owner died); only up to the share, except a shard nobody
//!   took for `stale_after` (orphaned), which is taken beyond it;
//! - above the share, one shard (the highest) is given up per round, and
//!   only once no released shard is still waiting for a taker and not within
//!   two TTLs of taking orphans (no give-and-take-back loop).

use std::time::Duration;

use crate::lease_options::LeaseOptions;
use crate::shards::SHARDS;

/// What a shard's record looked like this round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    /// No record: the shard was never owned.
    Missing,
    /// A record that does not decode.
    Unreadable,
    /// A record without owner: released, waiting for a taker.
    Free,
    /// A record with an owner.
    Held,
}

/// One shard as this replica saw it.
#[derive(Debug, Clone, Copy)]
pub struct ShardSeen {
    pub state: RecordState,
    /// Since its revision last changed, by this replica's monotonic clock.
    pub unchanged_for: Duration,
    /// Now minus the record's server timestamp.
    pub server_age: Duration,
}

/// How a shard is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Create its first record, watermark now.
    Create,
    /// Overwrite an unreadable record, watermark now.
    Overwrite,
    /// Take over the record, with its watermark.
    TakeOver,
}

/// A shard this replica should try to take, in shard order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub shard: u32,
    pub take: Take,
    /// Taken even when the share is full: nobody took it for a while.
    pub beyond_share: bool,
}

/// The fair share of each of `live` replicas.
pub fn fair_share(live: u32) -> usize {
    SHARDS.div_ceil(live.max(1)) as usize
}

/// The shards to try to take, given what was seen of each (`seen[shard]`)
/// and which this replica owns.
pub fn candidates(
    seen: &[ShardSeen],
    owns: impl Fn(u32) -> bool,
    options: &LeaseOptions,
) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (shard, s) in (0..SHARDS).zip(seen) {
        if owns(shard) {
            continue;
        }
        let orphaned = options.is_stale(s.unchanged_for);
        let take = match s.state {
            RecordState::Missing => Take::Create,
            RecordState::Unreadable => Take::Overwrite,
            RecordState::Free => Take::TakeOver,
            RecordState::Held if orphaned || s.server_age > options.ttl * 3 => Take::TakeOver,
            RecordState::Held => continue,
        };
        out.push(Candidate {
            shard,
            take,
            beyond_share: orphaned && s.state != RecordState::Missing,
        });
    }
    out
}

/// Whether a replica that owns `owned` shards takes `candidate` now: up
/// to its `share`, and an orphan ([`Candidate::beyond_share`]) beyond it.
pub fn takes(candidate: &Candidate, owned: usize, share: usize) -> bool {
    owned < share || candidate.beyond_share
}

/// The shard to give up this round, if any. A shard not planned here yet
/// (its jobs still being loaded) goes first: its fires wait for a load
/// wherever it goes, while a planned one handed on would make its new
/// owner load it (a pass over the whole bucket: about 50 s at ten million
/// jobs) and its fires wait that long.
pub fn to_release(
    owned: &[u32],
    planned: impl Fn(u32) -> bool,
    share: usize,
    any_free: bool,
    since_orphans_taken: Option<Duration>,
    options: &LeaseOptions,
) -> Option<u32> {
    if owned.len() <= share || any_free {
        return None;
    }
    if since_orphans_taken.is_some_and(|d| d < options.ttl * 2) {
        return None;
    }
    owned
        .iter()
        .copied()
        .max_by_key(|shard| (!planned(*shard), *shard))
}

#[cfg(test)]
mod cluster_properties;

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> LeaseOptions {
        LeaseOptions::default()
    }

    fn seen(state: RecordState, unchanged_for: Duration) -> ShardSeen {
        ShardSeen {
            state,
            unchanged_for,
            server_age: unchanged_for,
        }
    }

    #[test]
    fn the_share_is_the_shards_over_the_live_replicas_rounded_up() {
        assert_eq!(fair_share(0), SHARDS as usize);
        assert_eq!(fair_share(1), SHARDS as usize);
        assert_eq!(fair_share(2), (SHARDS as usize).div_ceil(2));
        assert_eq!(fair_share(SHARDS * 2), 1);
    }

    #[test]
    fn only_free_missing_unreadable_and_stale_shards_are_taken() {
        let o = options();
        let fresh = Duration::from_millis(500);
        // A round a few milliseconds short of `stale_after` still counts.
        let stale = o.stale_after() - Duration::from_millis(3);
        assert!(!o.is_stale(o.stale_after() - o.renew_every / 5));
        let mut view = vec![seen(RecordState::Held, fresh); SHARDS as usize];
        view[0] = seen(RecordState::Missing, Duration::ZERO);
        view[1] = seen(RecordState::Unreadable, fresh);
        view[2] = seen(RecordState::Free, fresh);
        view[3] = seen(RecordState::Held, stale);
        view[4] = seen(RecordState::Free, stale);
        // Held and fresh by this replica's clock, but written long ago by the
        // server's: its owner died before this replica started watching.
        view[5] = ShardSeen {
            server_age: o.ttl * 4,
            ..seen(RecordState::Held, fresh)
        };
        view[6] = seen(RecordState::Held, stale);
        let got = candidates(&view, |shard| shard == 6, &o);
        let take = |shard, take, beyond_share| Candidate {
            shard,
            take,
            beyond_share,
        };
        assert_eq!(
            got,
            [
                take(0, Take::Create, false),
                take(1, Take::Overwrite, false),
                take(2, Take::TakeOver, false),
                take(3, Take::TakeOver, true),
                take(4, Take::TakeOver, true),
                take(5, Take::TakeOver, false),
            ]
        );
    }

    #[test]
    fn one_shard_is_given_up_at_a_time_and_not_right_after_taking_orphans() {
        let o = options();
        let owned = [3, 9, 1];
        let all = |_: u32| true;
        assert_eq!(to_release(&owned, all, 2, false, None, &o), Some(9));
        assert_eq!(
            to_release(&owned, all, 3, false, None, &o),
            None,
            "within the share"
        );
        assert_eq!(
            to_release(&owned, all, 2, true, None, &o),
            None,
            "a released shard waits for a taker"
        );
        assert_eq!(
            to_release(&owned, all, 2, false, Some(o.ttl), &o),
            None,
            "orphans taken a TTL ago"
        );
        assert_eq!(
            to_release(&owned, |shard| shard != 1, 2, false, None, &o),
            Some(1),
            "a shard still loading goes before planned ones"
        );
        assert_eq!(
            to_release(&owned, all, 2, false, Some(o.ttl * 3), &o),
            Some(9)
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn any_state() -> impl Strategy<Value = RecordState> {
            prop_oneof![
                Just(RecordState::Missing),
                Just(RecordState::Unreadable),
                Just(RecordState::Free),
                Just(RecordState::Held),
            ]
        }

        /// What a replica may see of one shard: any state, unchanged for
        /// up to four stale times, written up to four TTLs ago.
        fn any_seen() -> impl Strategy<Value = ShardSeen> {
            (any_state(), 0u64..20_000, 0u64..20_000).prop_map(|(state, unchanged, age)| {
                ShardSeen {
                    state,
                    unchanged_for: Duration::from_millis(unchanged),
                    server_age: Duration::from_millis(age),
                }
            })
        }

        fn any_view() -> impl Strategy<Value = Vec<ShardSeen>> {
            proptest::collection::vec(any_seen(), SHARDS as usize)
        }

        proptest! {
            #[test]
            fn the_share_covers_every_shard_and_no_more_than_one_replica_over(live in 1u32..100) {
                let share = fair_share(live);
                prop_assert!(share * live as usize >= SHARDS as usize);
                prop_assert!((share - 1) * (live as usize) < SHARDS as usize);
            }

            #[test]
            fn candidates_are_shards_not_owned_that_nobody_holds_alive(
                view in any_view(),
                owned in proptest::collection::btree_set(0u32..SHARDS, 0..8),
            ) {
                let o = options();
                let got = candidates(&view, |shard| owned.contains(&shard), &o);
                // In shard order, each once.
                prop_assert!(got.windows(2).all(|w| w[0].shard < w[1].shard));
                for candidate in &got {
                    prop_assert!(!owned.contains(&candidate.shard), "owned: {candidate:?}");
                    let seen = view[candidate.shard as usize];
                    let alive = seen.state == RecordState::Held
                        && !o.is_stale(seen.unchanged_for)
                        && seen.server_age <= o.ttl * 3;
                    prop_assert!(!alive, "held by a live owner: {candidate:?} {seen:?}");
                    // Beyond the share only what sat unchanged past the stale time.
                    prop_assert!(!candidate.beyond_share || o.is_stale(seen.unchanged_for));
                }
                // And every shard not owned and not held alive is offered.
                let offered = got.len();
                let takeable = (0..SHARDS)
                    .filter(|shard| !owned.contains(shard))
                    .filter(|&shard| {
                        let seen = view[shard as usize];
                        seen.state != RecordState::Held
                            || o.is_stale(seen.unchanged_for)
                            || seen.server_age > o.ttl * 3
                    })
                    .count();
                prop_assert_eq!(offered, takeable);
            }

            #[test]
            fn a_release_is_one_owned_shard_only_above_the_share(
                owned in proptest::collection::btree_set(0u32..SHARDS, 0..(SHARDS as usize)),
                loading in proptest::collection::btree_set(0u32..SHARDS, 0..4),
                share in 0usize..(SHARDS as usize),
                any_free in any::<bool>(),
                orphans_ago in proptest::option::of(0u64..30_000),
            ) {
                let o = options();
                let owned: Vec<u32> = owned.into_iter().collect();
                let since = orphans_ago.map(Duration::from_millis);
                let planned = |shard: u32| !loading.contains(&shard);
                let got = to_release(&owned, planned, share, any_free, since, &o);
                let may = owned.len() > share
                    && !any_free
                    && since.is_none_or(|d| d >= o.ttl * 2);
                prop_assert_eq!(got.is_some(), may);
                if let Some(shard) = got {
                    prop_assert!(owned.contains(&shard));
                    // A shard still loading goes first, the highest of a kind.
                    let same_kind: Vec<u32> = owned
                        .iter()
                        .copied()
                        .filter(|s| planned(*s) == planned(shard))
                        .collect();
                    prop_assert_eq!(Some(&shard), same_kind.iter().max());
                    if planned(shard) {
                        prop_assert!(owned.iter().all(|s| planned(*s)));
                    }
                }
            }
        }
    }
}
