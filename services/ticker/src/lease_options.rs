//! How long a shard lease lasts, how often it is renewed, and the limits
//! derived from them. Its own module because both the pure shard decisions
//! ([`crate::share`]) and the KV code that applies them
//! ([`crate::ownership`]) read it.

use std::time::Duration;

/// Lease timing.
#[derive(Debug, Clone, Copy)]
pub struct LeaseOptions {
    /// A dead owner's shards are taken over within this long.
    pub ttl: Duration,
    /// How often leases are renewed and watermarks written.
    pub renew_every: Duration,
    /// How long an owner keeps publishing while the lease bucket cannot be
    /// written at all (an election of its leader).
    pub outage_grace: Duration,
    /// How long an owner may fail to get due events stored before it hands
    /// its shards to another replica.
    pub publish_stall_limit: Duration,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(5),
            renew_every: Duration::from_secs(1),
            outage_grace: Duration::from_secs(20),
            publish_stall_limit: Duration::from_secs(30),
        }
    }
}

impl LeaseOptions {
    /// A record unchanged for this long is stale. Its owner renewed it at most
    /// one round before dying and a standby looks once a round, so a standby
    /// acquires it within `ttl` of the death; the owner itself stopped
    /// publishing `ttl / 2` after its last renewal, before anyone may take over.
    pub fn stale_after(&self) -> Duration {
        self.ttl
            .saturating_sub(self.renew_every * 2)
            .max(self.ttl / 2 + self.renew_every / 2)
    }

    /// Whether a record unchanged for `unchanged_for` is stale. Rounds start
    /// a tick apart, give or take a few milliseconds, so the round
    /// `stale_after` after the one that saw the last change may measure a hair
    /// less: a tenth of a round of slack lets that round count, not the next
    /// one (which would put a takeover a whole round past `ttl`).
    pub fn is_stale(&self, unchanged_for: Duration) -> bool {
        unchanged_for + self.renew_every / 10 >= self.stale_after()
    }

    /// Scheduled times later than this after its last record the owner of a
    /// shard cannot have published (the longest it publishes without renewing).
    pub fn publish_horizon(&self) -> Duration {
        (self.ttl / 2).max(self.outage_grace)
    }
}
