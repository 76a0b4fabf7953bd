//! Shards: how the tickers split the jobs between them.
//!
//! Every job belongs to one of [`SHARDS`] shards by a stable hash of its id.
//! Each shard has one key in the `jetcron_ticker` bucket holding its
//! [`ShardRecord`]: the replica that owns it (empty when released) and the
//! watermark `done`: every fire of the shard scheduled at or before it is
//! stored in `JETCRON_DUE`. Owners rewrite the record every renewal with a
//! compare-and-swap on its revision; that write is both the lease renewal and
//! the durable checkpoint a new owner resumes from.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Number of shards. Fixed: every replica must agree on it.
pub const SHARDS: u32 = 16;

/// The shard of a job: FNV-1a of its id, modulo [`SHARDS`]. Stable across
/// builds and platforms (no `std` hasher, whose seed and algorithm may change).
pub fn shard_of(job_id: &str) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in job_id.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % u64::from(SHARDS)) as u32
}

/// KV key of shard `k`.
pub fn shard_key(shard: u32) -> String {
    format!("shard.{shard}")
}

/// KV key of a replica's heartbeat.
pub fn replica_key(replica_id: &str) -> String {
    format!("replica.{replica_id}")
}

/// The record of one shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardRecord {
    /// Replica id of the owner; empty when nobody owns it.
    pub owner: String,
    /// Every fire scheduled at or before this instant is stored.
    #[serde(with = "jetcron_core::time_format::millis")]
    pub done: DateTime<Utc>,
    /// Writer's clock when the record was written: the owner published
    /// nothing scheduled later than this plus the lease TTL.
    #[serde(
        default,
        with = "jetcron_core::time_format::millis_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub written_at: Option<DateTime<Utc>>,
    /// The writer's lease TTL in milliseconds (records of older builds: it
    /// published nothing scheduled more than this after `written_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ttl_ms: Option<u64>,
    /// The writer published nothing scheduled later than `written_at` plus
    /// this: the longest it publishes without renewing, plus its lookahead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emitted_horizon_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_stable_and_spread() {
        assert_eq!(shard_of("hello"), shard_of("hello"));
        // Fixed values: changing the hash would move every job.
        assert_eq!(shard_of(""), (0xcbf2_9ce4_8422_2325u64 % 16) as u32);
        let mut counts = [0u32; SHARDS as usize];
        for i in 0..16_000 {
            counts[shard_of(&format!("job-{i}")) as usize] += 1;
        }
        assert!(counts.iter().all(|c| (800..1200).contains(c)), "{counts:?}");
    }
}
