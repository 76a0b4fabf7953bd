//! When something was last heard, on this process's monotonic clock, read
//! and written without a lock by the watches of a connection
//! ([`crate::nats_failover`], [`crate::peer_reach`]) and by whoever must not
//! act through a server that stopped answering (an executor's calls, every
//! attempt's start).
//!
//! The instant is kept as milliseconds since the value was made, plus one
//! (0: never heard), in one atomic: a check costs a load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// The last moment something was heard; never heard at first.
#[derive(Debug)]
pub struct LastHeard {
    since: Instant,
    /// Milliseconds after `since`, plus one; 0: never.
    at: AtomicU64,
}

impl Default for LastHeard {
    fn default() -> Self {
        Self {
            since: Instant::now(),
            at: AtomicU64::new(0),
        }
    }
}

impl LastHeard {
    /// Heard now.
    pub fn heard(&self) {
        let at = self.since.elapsed().as_millis() as u64 + 1;
        self.at.store(at, Ordering::Release);
    }

    /// How long ago it was last heard; `None`: never.
    pub fn silent_for(&self) -> Option<Duration> {
        let at = self.at.load(Ordering::Acquire);
        if at == 0 {
            return None;
        }
        let now = self.since.elapsed().as_millis() as u64;
        Some(Duration::from_millis(now.saturating_sub(at - 1)))
    }

    /// Whether it was heard less than `window` ago.
    pub fn within(&self, window: Duration) -> bool {
        self.silent_for().is_some_and(|silent| silent < window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_heard_is_neither_recent_nor_silent() {
        let last = LastHeard::default();
        assert_eq!(last.silent_for(), None);
        assert!(!last.within(Duration::from_secs(3600)));
    }

    #[test]
    fn a_silence_counts_from_the_last_time_heard() {
        let last = LastHeard::default();
        last.heard();
        assert!(last.within(Duration::from_secs(1)), "just heard");
        assert!(!last.within(Duration::ZERO));
        std::thread::sleep(Duration::from_millis(30));
        assert!(last.silent_for().expect("heard") >= Duration::from_millis(20));
        assert!(last.within(Duration::from_millis(500)));
        last.heard();
        assert!(last.silent_for().expect("heard") < Duration::from_millis(20));
    }
}
