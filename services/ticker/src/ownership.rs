//! Shard ownership: leases in the `jetcron_ticker` bucket, so each shard has
//! one publishing ticker and standbys take over when it dies.
//!
//! Every `renew_every` a replica (1) writes its heartbeat `replica.<id>`,
//! (2) reads every shard record, (3) renews the shards it owns by a
//! compare-and-swap that also stores the shard's current watermark, (4) counts
//! live replicas (heartbeats that changed within `ttl`) to get its fair share
//! `ceil(SHARDS / live)`, releases shards above it and acquires free or stale
//! ones below it (which ones is decided by the pure [`crate::share`]). A
//! record is stale when its revision has not changed for
//! [`LeaseOptions::stale_after`] (`ttl − 2 × renew_every`) as seen by this
//! replica's own monotonic clock (no cross-host clock comparison), or when its
//! server timestamp is older than `3 × ttl`: a dead owner's shards are taken
//! over within `ttl` of its death. Only a replica that has loaded the job
//! bucket writes a heartbeat, so one that is still starting (or dies while
//! starting) never lowers the others' share.
//!
//! An owner publishes for a shard only while its last successful renewal is
//! younger than `ttl / 2` ([`Leases::is_valid`]): it stops before any standby
//! can consider the lease expired. Two exceptions, both bounded far below the
//! due stream's duplicate window, so that `Nats-Msg-Id` dedup covers any
//! overlap:
//! - the lease bucket cannot be written (its leader is being elected): nobody
//!   can take a shard over then, so the owner keeps publishing for up to
//!   [`LeaseOptions::outage_grace`] after its last renewal, and standbys do not
//!   count the time they could not write as the owner's silence;
//! - the owner cannot get due events stored for [`LeaseOptions::publish_stall_limit`]
//!   while it holds shards (its connection is bad, not the cluster): it hands
//!   its shards and its heartbeat over and sits out one TTL, so that a replica
//!   that can publish takes over.
//!
//! Here the task's rounds (heartbeat, renewals, releases); in `acquire` how
//! a shard is taken; in `leases` the [`Leases`] the ticker's loop reads.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream::kv::{self, UpdateErrorKind};
use chrono::{DateTime, Utc};
use futures::TryStreamExt as _;
use jetcron_core::clock::Clock;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::shards::{replica_key, shard_key, ShardRecord, SHARDS};
use crate::share::{self, RecordState, ShardSeen};

pub use crate::lease_options::LeaseOptions;
pub use leases::Leases;

mod acquire;
mod leases;

/// What the ticker loop learns from ownership.
#[derive(Debug, Clone, PartialEq)]
pub enum OwnershipChange {
    /// This replica now owns `shard`; its fires are stored up to `done`, and
    /// the previous owner emitted nothing scheduled after `emitted_before`.
    Acquired {
        shard: u32,
        done: DateTime<Utc>,
        emitted_before: DateTime<Utc>,
    },
    /// This replica no longer owns `shard`.
    Lost { shard: u32 },
    /// A round is over: what it changed has been said (the shards acquired
    /// in one round are loaded together).
    RoundEnded,
}

struct Owned {
    revision: u64,
    /// When the last successful write of the record started.
    renewed_at: Instant,
}

struct Seen {
    revision: u64,
    since: Instant,
}

impl Seen {
    /// Record that `key` is at `revision` now; returns since when it has been
    /// at that revision (as seen by this replica's monotonic clock).
    fn observe<K: std::hash::Hash + Eq>(
        seen: &mut HashMap<K, Seen>,
        key: K,
        revision: u64,
        now: Instant,
    ) -> Instant {
        let entry = seen.entry(key).or_insert(Seen {
            revision,
            since: now,
        });
        if entry.revision != revision {
            *entry = Seen {
                revision,
                since: now,
            };
        }
        entry.since
    }
}

/// The ownership task of one replica.
pub struct Ownership {
    bucket: kv::Store,
    replica_id: String,
    options: LeaseOptions,
    /// How far ahead of their time fires are published (recorded so a new
    /// owner knows which scheduled times the last one may have emitted).
    lookahead: Duration,
    /// The one clock of the ticker: watermarks, `written_at`, heartbeats and
    /// the server-age check of records (which compares it with the server's
    /// timestamps, so in production it is the wall clock). Lease ages are
    /// measured with the monotonic `Instant`, never across hosts.
    clock: Arc<dyn Clock>,
    leases: Leases,
    changes: mpsc::Sender<OwnershipChange>,
    owned: HashMap<u32, Owned>,
    shards_seen: HashMap<u32, Seen>,
    replicas_seen: HashMap<String, Seen>,
    /// After handing everything over for a publish stall: no heartbeat and no
    /// acquisition until then.
    sitting_out_until: Option<Instant>,
    /// When this replica last took an orphaned shard beyond its share: no
    /// rebalancing for a while after that (no give-and-take-back loop).
    orphans_taken_at: Option<Instant>,
    failures: jetcron_io::retry::LogLimiter,
    /// Live replicas as last counted (a round whose listing is slow uses it).
    live_replicas: u32,
    /// Shards and heartbeat were handed over for an untrusted clock.
    clock_sat_out: bool,
}

/// How this replica holds shard leases: its name in the lease records, the
/// leases' timing, and how far ahead its fires are stored.
#[derive(Debug, Clone)]
pub struct ReplicaLeasing {
    pub replica_id: String,
    pub options: LeaseOptions,
    pub lookahead: Duration,
}

impl Ownership {
    pub fn new(
        bucket: kv::Store,
        replica: ReplicaLeasing,
        clock: Arc<dyn Clock>,
        leases: Leases,
        changes: mpsc::Sender<OwnershipChange>,
    ) -> Self {
        let ReplicaLeasing {
            replica_id,
            options,
            lookahead,
        } = replica;
        Self {
            bucket,
            replica_id,
            options,
            lookahead,
            clock,
            leases,
            changes,
            owned: HashMap::new(),
            shards_seen: HashMap::new(),
            replicas_seen: HashMap::new(),
            sitting_out_until: None,
            orphans_taken_at: None,
            failures: jetcron_io::retry::LogLimiter::per_10s(),
            live_replicas: 1,
            clock_sat_out: false,
        }
    }

    /// Run until `shutdown`; acquire nothing until `ready` is true (the job
    /// bucket is loaded, so recovery sees every job). Releases everything on exit.
    pub async fn run(
        mut self,
        mut ready: watch::Receiver<bool>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let mut ticks = tokio::time::interval(self.options.renew_every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = ticks.tick() => {}
                changed = ready.changed() => {
                    // The ticker's loop is gone (it failed to start): nothing
                    // to own shards for.
                    if changed.is_err() {
                        break;
                    }
                }
            }
            let is_ready = *ready.borrow();
            match self.round(is_ready).await {
                Ok(()) => self.failures.reset(),
                Err(e) => {
                    // The lease bucket cannot be written (its leader is being
                    // elected, or this connection is down). Nobody can take a
                    // shard over through it meanwhile: keep publishing for a
                    // while, and do not count this time as others' silence.
                    let now = Instant::now();
                    self.ride_out_outage(now);
                    if let Some(failures) = self.failures.admit() {
                        warn!(error = %format!("{e:#}"), failures, "ticker ownership round failed");
                    }
                }
            }
            // Never waits: a busy loop must not hold renewals back, and a
            // later round's end says the same. Room stays for a round's
            // acquisitions and losses, which are sent waiting.
            if self.changes.capacity() > SHARDS as usize {
                let _ = self.changes.try_send(OwnershipChange::RoundEnded);
            }
        }
        self.release_all().await;
        let _ = self.bucket.delete(replica_key(&self.replica_id)).await;
        Ok(())
    }

    async fn round(&mut self, ready: bool) -> anyhow::Result<()> {
        let now = Instant::now();
        if !self.leases.clock_trusted() {
            self.sit_out_for_the_clock().await;
            return Ok(());
        }
        self.clock_sat_out = false;
        if let Some(until) = self.sitting_out_until {
            if now < until {
                return Ok(());
            }
            self.sitting_out_until = None;
        }
        let stalled_for = self.leases.publish_failing_for(now);
        if !self.owned.is_empty() && stalled_for > self.options.publish_stall_limit {
            self.hand_over(stalled_for).await;
            return Ok(());
        }
        if ready {
            self.bucket
                .put(
                    replica_key(&self.replica_id),
                    jetcron_core::time_format::rfc3339_millis(self.clock.now()).into(),
                )
                .await?;
        }
        // All records at once: a round's length adds to a takeover's.
        let entries = futures::future::try_join_all(
            (0..SHARDS).map(|shard| self.bucket.entry(shard_key(shard))),
        )
        .await?;
        let mut records = HashMap::new();
        for (shard, entry) in (0..SHARDS).zip(entries) {
            if let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) {
                Seen::observe(&mut self.shards_seen, shard, entry.revision, now);
                records.insert(shard, entry);
            }
        }
        self.renew(&records).await;
        // Counted after the renewals: listing the heartbeats is the slowest
        // request of a round.
        let live = self.count_live_replicas(now).await?;
        let share = share::fair_share(live);
        let seen = self.view_of_shards(&records, now);
        self.release_above(share, &seen, now).await;
        if ready {
            self.acquire_up_to(share, &records, &seen, now).await;
        }
        Ok(())
    }

    /// Each shard as this replica sees it now (for [`share::candidates`]).
    fn view_of_shards(&self, records: &HashMap<u32, kv::Entry>, now: Instant) -> Vec<ShardSeen> {
        let wall_now = self.clock.now();
        (0..SHARDS)
            .map(|shard| {
                let unchanged_for = self
                    .shards_seen
                    .get(&shard)
                    .map_or(Duration::ZERO, |s| now.duration_since(s.since));
                let Some(entry) = records.get(&shard) else {
                    return ShardSeen {
                        state: RecordState::Missing,
                        unchanged_for,
                        server_age: Duration::ZERO,
                    };
                };
                let state = match serde_json::from_slice::<ShardRecord>(&entry.value) {
                    Err(_) => RecordState::Unreadable,
                    Ok(record) if record.owner.is_empty() => RecordState::Free,
                    Ok(_) => RecordState::Held,
                };
                ShardSeen {
                    state,
                    unchanged_for,
                    server_age: (wall_now - entry.created).to_std().unwrap_or_default(),
                }
            })
            .collect()
    }

    async fn count_live_replicas(&mut self, now: Instant) -> anyhow::Result<u32> {
        // The listing is a consumer delivering every key: nothing bounds it
        // by itself, and a round that hangs renews nothing. Slow is not an
        // outage (the renewals before it went through): the last count
        // stands, and the round goes on.
        let listing = tokio::time::timeout(self.options.renew_every, async {
            anyhow::Ok(
                self.bucket
                    .keys()
                    .await?
                    .try_collect::<Vec<String>>()
                    .await?,
            )
        })
        .await;
        let Ok(keys) = listing else {
            debug!(
                after_ms = self.options.renew_every.as_millis() as u64,
                live = self.live_replicas,
                "listing the lease bucket's keys timed out, the last count of live replicas stands"
            );
            return Ok(self.live_replicas);
        };
        let keys = keys.context("list the lease bucket's keys")?;
        let mut live = 0;
        for key in keys.iter().filter(|k| k.starts_with("replica.")) {
            let Some(entry) = self.bucket.entry(key.as_str()).await? else {
                continue;
            };
            let since = Seen::observe(&mut self.replicas_seen, key.clone(), entry.revision, now);
            let silent_for = now.duration_since(since);
            if !self.options.is_stale(silent_for) {
                live += 1;
            } else if silent_for > self.options.ttl * 10 {
                // A replica that died long ago: forget its heartbeat (unless
                // it came back meanwhile, which the revision tells).
                let _ = self
                    .bucket
                    .delete_expect_revision(key.as_str(), Some(entry.revision))
                    .await;
                self.replicas_seen.remove(key);
            }
        }
        self.live_replicas = live.max(1);
        Ok(self.live_replicas)
    }

    /// The lease bucket cannot be written: keep owned shards valid up to
    /// `outage_grace` after their last renewal, and restart every silence
    /// this replica measures (it could not have seen a renewal either).
    fn ride_out_outage(&mut self, now: Instant) {
        for (shard, owned) in &self.owned {
            self.leases
                .extend(*shard, owned.renewed_at + self.options.outage_grace);
        }
        for seen in self
            .shards_seen
            .values_mut()
            .chain(self.replicas_seen.values_mut())
        {
            seen.since = now;
        }
    }

    /// Publishing has failed for `stalled_for` while others may be able to:
    /// release every shard (with its watermark), withdraw the heartbeat so
    /// the others' share covers them at once, and sit out one TTL.
    async fn hand_over(&mut self, stalled_for: Duration) {
        warn!(
            stalled_ms = stalled_for.as_millis() as u64,
            shards = self.owned.len(),
            "due events not stored for too long, handing shards to other replicas"
        );
        self.release_every_shard().await;
        let _ = self.bucket.delete(replica_key(&self.replica_id)).await;
        self.leases.set_publish_failing_since(None);
        self.sitting_out_until = Some(Instant::now() + self.options.ttl);
    }

    /// Release every shard held (with its watermark), telling the loop.
    async fn release_every_shard(&mut self) {
        let shards: Vec<u32> = self.owned.keys().copied().collect();
        for shard in shards {
            self.release(shard).await;
            let _ = self.changes.send(OwnershipChange::Lost { shard }).await;
        }
    }

    /// This host's clock is not trusted ([`ClockCheck`]): hand every shard
    /// and the heartbeat over (once), and take none until it is.
    async fn sit_out_for_the_clock(&mut self) {
        if self.clock_sat_out {
            return;
        }
        if !self.owned.is_empty() {
            warn!(
                shards = self.owned.len(),
                "this host's clock cannot be trusted, handing shards to other replicas until it can"
            );
        }
        self.release_every_shard().await;
        if self
            .bucket
            .delete(replica_key(&self.replica_id))
            .await
            .is_ok()
        {
            self.clock_sat_out = true;
        }
    }

    fn record_bytes(&self, owner: &str, done: DateTime<Utc>) -> bytes::Bytes {
        let horizon = self.options.publish_horizon() + self.lookahead;
        let record = ShardRecord {
            owner: owner.to_string(),
            done,
            written_at: Some(self.clock.now()),
            lease_ttl_ms: u64::try_from(self.options.ttl.as_millis()).ok(),
            emitted_horizon_ms: u64::try_from(horizon.as_millis()).ok(),
        };
        serde_json::to_vec(&record).unwrap_or_default().into()
    }

    async fn renew(&mut self, records: &HashMap<u32, kv::Entry>) {
        let shards: Vec<u32> = self.owned.keys().copied().collect();
        for shard in shards {
            let Some(owned) = self.owned.get(&shard) else {
                continue;
            };
            let current = records.get(&shard);
            let stolen = current.is_none_or(|entry| entry.revision != owned.revision);
            if stolen {
                self.lose(shard, "record changed under us").await;
                continue;
            }
            let previous_done = current
                .and_then(|e| serde_json::from_slice::<ShardRecord>(&e.value).ok())
                .map(|r| r.done);
            let Some(done) = self.leases.watermark(shard).or(previous_done) else {
                continue;
            };
            let started = Instant::now();
            let value = self.record_bytes(&self.replica_id, done);
            match self
                .bucket
                .update(shard_key(shard), value, owned.revision)
                .await
            {
                Ok(revision) => {
                    self.owned.insert(
                        shard,
                        Owned {
                            revision,
                            renewed_at: started,
                        },
                    );
                    self.leases.grant(shard, started + self.options.ttl / 2);
                }
                Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                    self.lose(shard, "lease taken by another replica").await;
                }
                Err(e) => {
                    // Not a conflict: the bucket did not answer. Nobody else
                    // can write the record meanwhile either.
                    let renewed_at = owned.renewed_at;
                    self.leases
                        .extend(shard, renewed_at + self.options.outage_grace);
                    debug!(shard, error = %e, "cannot renew shard lease");
                }
            }
        }
    }

    /// Hand shards above the fair share to the others, one per round and
    /// only once the last one handed over was taken: a replica that joined
    /// and died at once must not leave several shards without an owner.
    /// After taking a dead replica's shards it waits two TTLs first, so a
    /// replica that comes back and dies again costs one shard's takeover.
    async fn release_above(&mut self, share: usize, seen: &[ShardSeen], now: Instant) {
        let any_free = seen.iter().any(|s| s.state == RecordState::Free);
        let owned: Vec<u32> = self.owned.keys().copied().collect();
        let since_orphans = self.orphans_taken_at.map(|at| now.duration_since(at));
        let planned = |shard| self.leases.is_planned(shard);
        let Some(shard) = share::to_release(
            &owned,
            planned,
            share,
            any_free,
            since_orphans,
            &self.options,
        ) else {
            return;
        };
        self.release(shard).await;
        let _ = self.changes.send(OwnershipChange::Lost { shard }).await;
        info!(shard, share, "shard released to rebalance");
    }

    /// Give `shard` up: stop publishing for it, then write its final
    /// watermark with no owner so another replica takes it at once.
    async fn release(&mut self, shard: u32) {
        let Some(owned) = self.owned.remove(&shard) else {
            return;
        };
        let done = self.leases.watermark(shard);
        self.leases.revoke(shard);
        let Some(done) = done else {
            return;
        };
        let value = self.record_bytes("", done);
        match self
            .bucket
            .update(shard_key(shard), value, owned.revision)
            .await
        {
            Ok(_) => debug!(shard, "shard released"),
            Err(e) => warn!(shard, error = %e, "cannot release shard (it will expire)"),
        }
    }

    async fn lose(&mut self, shard: u32, why: &str) {
        self.owned.remove(&shard);
        self.leases.revoke(shard);
        warn!(shard, why, "shard lost");
        let _ = self.changes.send(OwnershipChange::Lost { shard }).await;
    }

    async fn release_all(&mut self) {
        let shards: Vec<u32> = self.owned.keys().copied().collect();
        for shard in shards {
            self.release(shard).await;
        }
    }
}
