//! The rules of [`super`] played by several replicas over one simulated
//! lease bucket, round after round, as `ownership`'s rounds play them
//! (renew what is owned, count the live replicas, give up above the
//! share, take up to it), in an order that changes every round. The
//! bucket is written by one replica at a time, as the compare-and-swaps
//! make it; time moves a renewal interval per round; a replica that dies
//! stops writing.
//!
//! What the rules promise, and what these properties hold them to:
//! - a shard is never owned by two live replicas, and a dead replica's
//!   shards are all taken within a TTL of its death;
//! - once membership stops changing, every shard has a live owner, none
//!   holds more than its fair share, and further rounds move nothing (no
//!   give-and-take-back loop);
//! - a replica joining moves only the surplus above the new share: exactly
//!   that many shards change owner, each leaving a replica above it.
//!
//! Not promised, so not tested: shares balanced within one. Sixteen shards
//! over five replicas is a share of four, and four replicas holding four
//! each leave the fifth none.

use std::collections::BTreeSet;
use std::time::Duration;

use proptest::prelude::*;

use super::*;

/// A shard's record in the simulated bucket.
#[derive(Debug, Clone, Copy)]
struct Record {
    /// `None`: released, waiting for a taker.
    owner: Option<usize>,
    /// The round it was last written in.
    written_in: u32,
}

#[derive(Debug, Default)]
struct Replica {
    alive: bool,
    /// The round of its last heartbeat; `None` before its first round.
    beat_in: Option<u32>,
    owned: BTreeSet<u32>,
    /// The round it last took an orphan beyond its share.
    orphans_taken_in: Option<u32>,
}

struct Cluster {
    options: LeaseOptions,
    records: Vec<Option<Record>>,
    replicas: Vec<Replica>,
    round: u32,
    rng: fastrand::Rng,
}

impl Cluster {
    fn new(seed: u64) -> Self {
        Self {
            options: LeaseOptions::default(),
            records: vec![None; SHARDS as usize],
            replicas: Vec::new(),
            round: 0,
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    fn join(&mut self) -> usize {
        self.replicas.push(Replica {
            alive: true,
            ..Replica::default()
        });
        self.replicas.len() - 1
    }

    fn die(&mut self, replica: usize) {
        self.replicas[replica].alive = false;
    }

    fn alive(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|r| self.replicas[*r].alive)
            .collect()
    }

    /// How long ago, by the rounds, something written in `round` was.
    fn since(&self, round: u32) -> Duration {
        self.options.renew_every * (self.round - round)
    }

    /// Replicas whose heartbeat is not stale (what `count_live_replicas`
    /// counts; a dead one counts until its heartbeat is stale).
    fn live_count(&self) -> u32 {
        let live = self
            .replicas
            .iter()
            .filter_map(|r| r.beat_in)
            .filter(|beat| !self.options.is_stale(self.since(*beat)))
            .count();
        u32::try_from(live).expect("few replicas").max(1)
    }

    /// The bucket as a replica reads it at the start of its turn.
    fn view(&self) -> Vec<ShardSeen> {
        self.records
            .iter()
            .map(|record| match record {
                None => ShardSeen {
                    state: RecordState::Missing,
                    unchanged_for: Duration::ZERO,
                    server_age: Duration::ZERO,
                },
                Some(record) => ShardSeen {
                    state: match record.owner {
                        None => RecordState::Free,
                        Some(_) => RecordState::Held,
                    },
                    unchanged_for: self.since(record.written_in),
                    server_age: self.since(record.written_in),
                },
            })
            .collect()
    }

    fn write(&mut self, shard: u32, owner: Option<usize>) {
        self.records[shard as usize] = Some(Record {
            owner,
            written_in: self.round,
        });
    }

    /// One round of every live replica, in an order of its own.
    fn play_round(&mut self) {
        self.round += 1;
        let mut order = self.alive();
        self.rng.shuffle(&mut order);
        for replica in order {
            self.turn(replica);
        }
    }

    /// One replica's round, as `Ownership::round` plays it.
    fn turn(&mut self, me: usize) {
        self.replicas[me].beat_in = Some(self.round);
        let owned: Vec<u32> = self.replicas[me].owned.iter().copied().collect();
        for shard in owned {
            match self.records[shard as usize] {
                Some(Record {
                    owner: Some(owner), ..
                }) if owner == me => self.write(shard, Some(me)),
                _ => {
                    self.replicas[me].owned.remove(&shard);
                }
            }
        }
        let share = fair_share(self.live_count());
        let seen = self.view();
        self.release(me, share, &seen);
        self.acquire(me, share, &seen);
    }

    fn release(&mut self, me: usize, share: usize, seen: &[ShardSeen]) {
        let any_free = seen.iter().any(|s| s.state == RecordState::Free);
        let owned: Vec<u32> = self.replicas[me].owned.iter().copied().collect();
        let since_orphans = self.replicas[me].orphans_taken_in.map(|r| self.since(r));
        if let Some(shard) = to_release(
            &owned,
            |_| true,
            share,
            any_free,
            since_orphans,
            &self.options,
        ) {
            self.replicas[me].owned.remove(&shard);
            self.write(shard, None);
        }
    }

    fn acquire(&mut self, me: usize, share: usize, seen: &[ShardSeen]) {
        let owned = self.replicas[me].owned.clone();
        for candidate in candidates(seen, |shard| owned.contains(&shard), &self.options) {
            let holding = self.replicas[me].owned.len();
            if !takes(&candidate, holding, share) {
                continue;
            }
            if holding >= share {
                self.replicas[me].orphans_taken_in = Some(self.round);
            }
            self.replicas[me].owned.insert(candidate.shard);
            self.write(candidate.shard, Some(me));
        }
    }

    /// The live owner of each shard by its record, if it has one.
    fn owners(&self) -> Vec<Option<usize>> {
        self.records
            .iter()
            .map(|record| record.and_then(|r| r.owner))
            .map(|owner| owner.filter(|o| self.replicas[*o].alive))
            .collect()
    }

    fn counts(&self) -> Vec<(usize, usize)> {
        self.alive()
            .into_iter()
            .map(|r| (r, self.replicas[r].owned.len()))
            .collect()
    }

    /// No shard is believed owned by two live replicas, and a record's
    /// live owner believes it owns it.
    fn check_one_owner(&self) -> Result<(), TestCaseError> {
        for shard in 0..SHARDS {
            let believers: Vec<usize> = self
                .alive()
                .into_iter()
                .filter(|r| self.replicas[*r].owned.contains(&shard))
                .collect();
            prop_assert!(
                believers.len() <= 1,
                "round {}: shard {shard} owned by {believers:?}",
                self.round
            );
            if let Some(owner) = self.owners()[shard as usize] {
                prop_assert_eq!(believers, vec![owner], "shard {}", shard);
            }
        }
        Ok(())
    }

    /// Play `rounds` rounds, checking [`Cluster::check_one_owner`] after each.
    fn play(&mut self, rounds: u32) -> Result<(), TestCaseError> {
        for _ in 0..rounds {
            self.play_round();
            self.check_one_owner()?;
        }
        Ok(())
    }

    /// Every shard has a live owner, none above the share, and another
    /// stretch of rounds moves nothing.
    fn check_settled(&mut self) -> Result<(), TestCaseError> {
        let share = fair_share(u32::try_from(self.alive().len()).expect("few"));
        let owners = self.owners();
        prop_assert!(
            owners.iter().all(Option::is_some),
            "round {}: shards without a live owner: {owners:?}",
            self.round
        );
        for (replica, count) in self.counts() {
            prop_assert!(count <= share, "replica {replica} holds {count} > {share}");
        }
        self.play(2 * TTL_ROUNDS)?;
        prop_assert_eq!(self.owners(), owners, "settled shards moved");
        Ok(())
    }
}

/// Rounds in a TTL (5 s at one renewal a second).
const TTL_ROUNDS: u32 = 5;

/// Rounds the cluster gets to settle after its last change: every shard
/// given up one per round, with room for the two TTLs of quiet after
/// orphans are taken.
const SETTLE_ROUNDS: u32 = 4 * SHARDS + 4 * TTL_ROUNDS;

/// A change of membership, some rounds after the one before.
#[derive(Debug, Clone)]
enum Change {
    Join,
    /// The `n`th live replica (modulo how many there are) dies.
    Die(usize),
}

fn any_change() -> impl Strategy<Value = (u32, Change)> {
    (
        0u32..12,
        prop_oneof![Just(Change::Join), (0usize..8).prop_map(Change::Die)],
    )
}

/// A cluster of `replicas` that started together and settled.
fn settled(replicas: usize, seed: u64) -> Result<Cluster, TestCaseError> {
    let mut cluster = Cluster::new(seed);
    for _ in 0..replicas {
        cluster.join();
    }
    cluster.play(SETTLE_ROUNDS)?;
    cluster.check_settled()?;
    Ok(cluster)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn whatever_joins_and_dies_the_live_replicas_settle_on_one_owner_each_within_the_share(
        first in 1usize..6,
        changes in proptest::collection::vec(any_change(), 0..5),
        seed in any::<u64>(),
    ) {
        let mut cluster = Cluster::new(seed);
        for _ in 0..first {
            cluster.join();
        }
        for (after, change) in changes {
            cluster.play(after)?;
            match change {
                Change::Join => {
                    cluster.join();
                }
                Change::Die(n) => {
                    let alive = cluster.alive();
                    // One replica stays: nobody is left to settle otherwise.
                    if alive.len() > 1 {
                        cluster.die(alive[n % alive.len()]);
                    }
                }
            }
        }
        cluster.play(SETTLE_ROUNDS)?;
        cluster.check_settled()?;
    }

    #[test]
    fn a_replica_joining_moves_only_the_surplus_above_the_new_share(
        replicas in 1usize..8,
        seed in any::<u64>(),
    ) {
        let mut cluster = settled(replicas, seed)?;
        let before = cluster.owners();
        let counts_before = cluster.counts();
        let newcomer = cluster.join();
        cluster.play(SETTLE_ROUNDS)?;
        cluster.check_settled()?;
        let share = fair_share(u32::try_from(replicas + 1).expect("few"));
        let surplus: usize = counts_before
            .iter()
            .map(|(_, count)| count.saturating_sub(share))
            .sum();
        let after = cluster.owners();
        let moved: Vec<u32> = (0..SHARDS)
            .filter(|s| before[*s as usize] != after[*s as usize])
            .collect();
        prop_assert_eq!(moved.len(), surplus, "moved {:?}", moved);
        for shard in moved {
            let from = before[shard as usize].expect("settled");
            let held = counts_before
                .iter()
                .find(|(replica, _)| *replica == from)
                .map_or(0, |(_, count)| *count);
            prop_assert!(held > share, "shard {} left replica {} at {}", shard, from, held);
        }
        // Above the share before, at it now; and the newcomer took a part.
        for (replica, count) in cluster.counts() {
            if replica == newcomer {
                continue;
            }
            let was = counts_before
                .iter()
                .find(|(r, _)| *r == replica)
                .map_or(0, |(_, count)| *count);
            prop_assert!(count >= was.min(share), "replica {} went from {} to {}", replica, was, count);
        }
    }

    #[test]
    fn a_dead_replicas_shards_are_all_taken_within_a_ttl(
        replicas in 2usize..8,
        victim in 0usize..8,
        seed in any::<u64>(),
    ) {
        let mut cluster = settled(replicas, seed)?;
        let victim = victim % replicas;
        let orphans: Vec<u32> = cluster.replicas[victim].owned.iter().copied().collect();
        cluster.die(victim);
        cluster.play(TTL_ROUNDS)?;
        let owners = cluster.owners();
        for shard in &orphans {
            prop_assert!(
                owners[*shard as usize].is_some(),
                "shard {} of the dead replica has no owner a TTL later", shard
            );
        }
        cluster.play(SETTLE_ROUNDS)?;
        cluster.check_settled()?;
    }
}
