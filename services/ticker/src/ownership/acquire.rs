//! Taking shards: which to try is [`share::candidates`]' decision and how
//! many [`share::takes`]'; here each record is written as this replica's
//! by a create or a compare-and-swap (a replica that wrote it first wins),
//! and the loop is told where the shard's fires resume.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use async_nats::jetstream::kv;
use chrono::{DateTime, Utc};
use tracing::{info, warn};

use super::{Owned, Ownership, OwnershipChange};
use crate::shards::{shard_key, ShardRecord};
use crate::share::{self, Candidate, ShardSeen, Take};

/// A shard's record written as this replica's.
struct Taken {
    revision: u64,
    /// Every fire of the shard scheduled up to this is stored.
    done: DateTime<Utc>,
    /// The previous owner emitted nothing scheduled after this.
    emitted_before: DateTime<Utc>,
}

impl Ownership {
    /// Take what [`share::candidates`] offers, up to `share` and orphans
    /// beyond it; taking an orphan beyond the share holds rebalancing back
    /// for a while ([`share::to_release`]).
    pub(super) async fn acquire_up_to(
        &mut self,
        share: usize,
        records: &HashMap<u32, kv::Entry>,
        seen: &[ShardSeen],
        now: Instant,
    ) {
        let owned: HashSet<u32> = self.owned.keys().copied().collect();
        for candidate in share::candidates(seen, |shard| owned.contains(&shard), &self.options) {
            if !share::takes(&candidate, self.owned.len(), share) {
                continue;
            }
            let shard = candidate.shard;
            let started = Instant::now();
            let Some(taken) = self.write_taken(candidate, records.get(&shard)).await else {
                continue;
            };
            if self.owned.len() >= share {
                self.orphans_taken_at = Some(now);
                info!(shard, share, "orphaned shard taken beyond the fair share");
            }
            self.take(shard, taken, started).await;
        }
    }

    /// Write `candidate`'s record (`entry`, as read this round) with this
    /// replica as its owner. `None` when the write lost to another
    /// replica's, or the record to take over does not decode.
    async fn write_taken(&self, candidate: Candidate, entry: Option<&kv::Entry>) -> Option<Taken> {
        let shard = candidate.shard;
        match (candidate.take, entry) {
            (Take::Create, _) => {
                let done = self.clock.now();
                let value = self.record_bytes(&self.replica_id, done);
                let revision = self.bucket.create(shard_key(shard), value).await.ok()?;
                Some(Taken {
                    revision,
                    done,
                    emitted_before: done,
                })
            }
            (Take::Overwrite, Some(entry)) => {
                warn!(shard, "unreadable shard record, overwriting from now");
                let done = self.clock.now();
                let value = self.record_bytes(&self.replica_id, done);
                let revision = self
                    .bucket
                    .update(shard_key(shard), value, entry.revision)
                    .await
                    .ok()?;
                Some(Taken {
                    revision,
                    done,
                    emitted_before: done,
                })
            }
            (Take::TakeOver, Some(entry)) => {
                let record = serde_json::from_slice::<ShardRecord>(&entry.value).ok()?;
                let value = self.record_bytes(&self.replica_id, record.done);
                let emitted_before = self.emitted_before(&record, entry.created);
                let revision = self
                    .bucket
                    .update(shard_key(shard), value, entry.revision)
                    .await
                    .ok()?;
                Some(Taken {
                    revision,
                    done: record.done,
                    emitted_before,
                })
            }
            (_, None) => None,
        }
    }

    /// Scheduled times after this its previous owner (which wrote `record`,
    /// stored at `created`) cannot have published. Its horizon bounds them;
    /// older records name their TTL only; records without either get ours.
    fn emitted_before(&self, record: &ShardRecord, created: DateTime<Utc>) -> DateTime<Utc> {
        let horizon = record
            .emitted_horizon_ms
            .or(record.lease_ttl_ms)
            .and_then(|ms| i64::try_from(ms).ok())
            .map(chrono::Duration::milliseconds)
            .unwrap_or_else(|| {
                chrono::Duration::from_std(self.options.publish_horizon() + self.lookahead)
                    .unwrap_or_default()
            });
        record.written_at.unwrap_or(created) + horizon
    }

    /// `shard` is this replica's from `started` (when its write began):
    /// valid for half a TTL, and the loop told where its fires resume.
    async fn take(&mut self, shard: u32, taken: Taken, started: Instant) {
        let Taken {
            revision,
            done,
            emitted_before,
        } = taken;
        self.owned.insert(
            shard,
            Owned {
                revision,
                renewed_at: started,
            },
        );
        self.leases.start_from(shard, done);
        self.leases.grant(shard, started + self.options.ttl / 2);
        info!(shard, done = %jetcron_core::time_format::rfc3339_millis(done), "shard acquired");
        let _ = self
            .changes
            .send(OwnershipChange::Acquired {
                shard,
                done,
                emitted_before,
            })
            .await;
    }
}
