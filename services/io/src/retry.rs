//! How every loop that talks to NATS or ClickHouse waits between tries, and
//! how it says so in the log.
//!
//! On a cluster, "no responders", "request timed out" and "no leader" are
//! normal for the few seconds of a leader election, and every process sees
//! them at once. [`RetryDelay`] doubles from a small first wait up to a cap and
//! draws each wait at random from its upper half ("equal jitter"), so the
//! processes that failed together do not retry together. [`LogLimiter`] keeps
//! a loop that fails many times a second from writing many lines a second:
//! the first failure is logged at once, then at most one line per interval
//! with the number of failures it stands for.
//!
//! Job retries are another matter (`backoff`): their delay is deterministic
//! per run so that every executor and the `retry_at` of events agree.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// Exponential delay with equal jitter: try `n` waits a random time in
/// `[d/2, d]` where `d = min(initial × 2ⁿ, max)`.
#[derive(Debug, Clone)]
pub struct RetryDelay {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl RetryDelay {
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial = initial.max(Duration::from_millis(1));
        Self {
            initial,
            max: max.max(initial),
            next: initial,
        }
    }

    /// The usual delay of a loop retrying a NATS operation: 100 ms doubling to 5 s.
    pub fn nats() -> Self {
        Self::new(Duration::from_millis(100), Duration::from_secs(5))
    }

    /// The wait before the next try; later calls return longer waits.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.next;
        self.next = (self.next * 2).min(self.max);
        jittered(ceiling)
    }

    /// Back to the first, shortest wait (after a success).
    pub fn reset(&mut self) {
        self.next = self.initial;
    }

    /// Sleep the next delay; `true` when `shutdown` came first.
    pub async fn sleep(&mut self, shutdown: &CancellationToken) -> bool {
        let delay = self.next_delay();
        tokio::select! {
            _ = shutdown.cancelled() => true,
            _ = tokio::time::sleep(delay) => false,
        }
    }
}

/// A random duration in `[d/2, d]`.
pub fn jittered(d: Duration) -> Duration {
    d.mul_f64(0.5 + fastrand::f64() * 0.5)
}

/// Rate limit for a log line that may repeat many times a second.
#[derive(Debug)]
pub struct LogLimiter {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    /// At most one line per `every`.
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// One line per 10 s: the default for retry loops.
    pub fn per_10s() -> Self {
        Self::new(Duration::from_secs(10))
    }

    /// `Some(n)` when a line should be written now, `n` being how many
    /// occurrences it stands for (this one and those suppressed since the
    /// last line); `None` when this occurrence is only counted.
    pub fn admit(&mut self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.duration_since(last) < self.every => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                let count = self.suppressed + 1;
                self.suppressed = 0;
                Some(count)
            }
        }
    }

    /// Forget the failures (after a success), so the next one is logged at once.
    pub fn reset(&mut self) {
        self.last = None;
        self.suppressed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_within_their_jitter() {
        let mut delay = RetryDelay::new(Duration::from_millis(100), Duration::from_millis(1000));
        let ceilings = [100, 200, 400, 800, 1000, 1000];
        for ceiling in ceilings {
            let d = delay.next_delay().as_millis() as u64;
            assert!(d >= ceiling / 2 && d <= ceiling, "{d} for {ceiling}");
        }
        delay.reset();
        assert!(delay.next_delay() <= Duration::from_millis(100));
    }

    #[test]
    fn jitter_spreads_processes_that_failed_together() {
        let draws: std::collections::BTreeSet<u128> = (0..100)
            .map(|_| jittered(Duration::from_millis(1000)).as_millis() / 50)
            .collect();
        // 100 draws over [500, 1000] ms land in most of its ten 50 ms buckets.
        assert!(draws.len() >= 7, "{draws:?}");
    }

    #[test]
    fn a_repeating_failure_is_logged_once_per_interval_with_its_count() {
        let mut limiter = LogLimiter::new(Duration::from_secs(10));
        let start = Instant::now();
        assert_eq!(limiter.admit_at(start), Some(1));
        for ms in 1..500 {
            assert_eq!(limiter.admit_at(start + Duration::from_millis(ms)), None);
        }
        assert_eq!(
            limiter.admit_at(start + Duration::from_secs(10)),
            Some(500),
            "the line after the interval counts the 499 suppressed and itself"
        );
        limiter.reset();
        assert_eq!(limiter.admit_at(start + Duration::from_secs(11)), Some(1));
    }
}
