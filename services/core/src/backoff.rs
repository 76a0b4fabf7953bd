//! Delay between attempts: exponential with a cap, and jitter.
//!
//! The jitter is deterministic per (run, attempt): every executor that handles
//! the same failure computes the same delay, the `retry_at` in the `retrying`
//! event is the delay JetStream was given, and tests can predict it. Runs of
//! different jobs (or shards) that fail together still spread out, because
//! their run ids differ.

use std::time::Duration;

/// Retry delays of one job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay before the second attempt.
    pub initial: Duration,
    /// Factor applied for each later attempt.
    pub multiplier: f64,
    /// Longest delay, before jitter.
    pub max: Duration,
    /// Fraction of the delay that may be taken off at random: the delay is
    /// drawn from `[d × (1 − jitter), d]`.
    pub jitter: f64,
}

/// Defaults when the job does not say.
pub const DEFAULT_INITIAL: Duration = Duration::from_secs(1);
pub const DEFAULT_MULTIPLIER: f64 = 2.0;
pub const DEFAULT_MAX: Duration = Duration::from_secs(300);
pub const DEFAULT_JITTER: f64 = 0.2;

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: DEFAULT_INITIAL,
            multiplier: DEFAULT_MULTIPLIER,
            max: DEFAULT_MAX,
            jitter: DEFAULT_JITTER,
        }
    }
}

impl Backoff {
    /// The delay before attempt `next_attempt` (2, 3, ...), without jitter.
    pub fn ceiling(&self, next_attempt: u32) -> Duration {
        let exponent = i32::try_from(next_attempt.saturating_sub(2).min(1000)).unwrap_or(1000);
        let secs = self.initial.as_secs_f64() * self.multiplier.powi(exponent);
        let capped = secs.min(self.max.as_secs_f64());
        Duration::try_from_secs_f64(capped).unwrap_or(self.max)
    }

    /// The delay before attempt `next_attempt` of the run (or shard) named `seed`.
    pub fn delay(&self, next_attempt: u32, seed: &str) -> Duration {
        let ceiling = self.ceiling(next_attempt);
        let cut = self.jitter.clamp(0.0, 1.0) * unit_hash(seed, next_attempt);
        ceiling.mul_f64(1.0 - cut)
    }
}

/// A number in `[0, 1)` from (seed, attempt): FNV-1a, top 53 bits.
fn unit_hash(seed: &str, attempt: u32) -> f64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seed.bytes().chain(attempt.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Mix the low bits up (FNV's high bits vary little for short inputs).
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_grows_by_the_multiplier_and_stops_at_the_cap() {
        let b = Backoff {
            initial: Duration::from_secs(2),
            multiplier: 3.0,
            max: Duration::from_secs(60),
            jitter: 0.0,
        };
        let delays: Vec<u64> = (2..=6).map(|a| b.delay(a, "r").as_secs()).collect();
        assert_eq!(delays, [2, 6, 18, 54, 60]);
        assert_eq!(b.delay(u32::MAX, "r"), Duration::from_secs(60));
    }

    #[test]
    fn jitter_stays_in_range_is_stable_and_spreads() {
        let b = Backoff::default();
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..200 {
            let seed = format!("run-{i}");
            let d = b.delay(3, &seed);
            assert_eq!(d, b.delay(3, &seed), "deterministic");
            assert!(d <= Duration::from_secs(2), "{d:?}");
            assert!(d >= Duration::from_millis(1600), "{d:?}");
            seen.insert(d.as_millis() / 40);
        }
        // 200 runs land in most of the ten 40 ms buckets of [1.6 s, 2 s].
        assert!(seen.len() >= 8, "{seen:?}");
    }
}
