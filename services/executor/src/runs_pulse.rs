//! Whether `JETCRON_RUNS` is storing at all: when this executor last saw
//! one of its `started` or outcome events stored.
//!
//! An attempt whose outcome is slow to be stored writes the run's end into
//! its retry ledger meanwhile ([`crate::tries`]), so that a redelivery
//! after this executor's death does not call the target again. That helps
//! while the stream stores nothing (its leader is being elected, 4-9 s),
//! and the ledger's bucket has a leader of its own. When the stream is
//! storing, only slowly (the server is past its capacity), the outcome
//! lands soon anyway, and a ledger write for every slow outcome added a
//! KV store to most runs exactly when the server had no time to spare:
//! 0.56 ledger writes a run at 10,000 jobs a second (docs/benchmarks.md).
//! So an attempt writes the ledger ([`RunsPulse::outcome_is_slow`]) once
//! no `started` or outcome event of this executor has been newly stored
//! for a second (the outcomes of an instant are stored together, and an
//! overloaded server acknowledges the first of them only hundreds of
//! milliseconds later, but it goes on storing), or once its own event has
//! waited two seconds whatever the others do, and before it hands a run
//! back whose event was not stored. The attempt's
//! [`crate::run_events::RunEventPublisher`] tells the pulse of each store.
//! A duplicate's acknowledgement does not count: a leader answers it from
//! its memory of ids without storing anything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

// tokio's clock, like the waits it is compared with (and paused with them
// in tests).
use tokio::time::Instant;

/// How long `JETCRON_RUNS` must have stored none of this executor's run
/// events before a slow outcome's end goes into its ledger. The outcomes
/// of an instant's calls are stored together, and a server past its
/// capacity acknowledged the first of them 200 ms or more after they were
/// sent: with that as the bound the ledger was still written for 0.43-0.95
/// runs in every one. A leader election stores nothing for 4-9 s.
pub const RUNS_SILENCE: Duration = Duration::from_secs(1);

/// Longest an outcome waits to be stored before its run's end goes into
/// the ledger however the stream does: its publish may be lost while
/// others are stored, and is retried only after the client's ack timeout.
pub const LEDGER_AT_LATEST: Duration = Duration::from_secs(2);

/// The last time a run event of this executor was stored.
#[derive(Debug)]
pub struct RunsPulse {
    since: Instant,
    /// Microseconds from `since` to the last store; 0 before the first.
    last_stored_us: AtomicU64,
}

impl Default for RunsPulse {
    fn default() -> Self {
        Self::new(Instant::now())
    }
}

impl RunsPulse {
    fn new(since: Instant) -> Self {
        Self {
            since,
            last_stored_us: AtomicU64::new(0),
        }
    }

    /// A run event was stored at `at`.
    fn stored_at(&self, at: Instant) {
        let us = at.saturating_duration_since(self.since).as_micros() as u64;
        self.last_stored_us.fetch_max(us.max(1), Ordering::Relaxed);
    }

    /// A run event was stored now.
    pub fn stored(&self) {
        self.stored_at(Instant::now());
    }

    /// Whether a run event was stored within `window` before `now`.
    pub fn stored_within(&self, window: Duration, now: Instant) -> bool {
        let last = self.last_stored_us.load(Ordering::Relaxed);
        if last == 0 {
            return false;
        }
        let last = self.since + Duration::from_micros(last);
        now.saturating_duration_since(last) <= window
    }

    /// Whether an outcome not stored after `waited` is slow enough to write
    /// its run's end into the ledger: the stream has stored none of this
    /// executor's run events for [`RUNS_SILENCE`] (an election, not a
    /// server merely past its capacity, which goes on storing), or it has
    /// waited [`LEDGER_AT_LATEST`].
    pub fn outcome_is_slow(&self, waited: Duration, now: Instant) -> bool {
        waited >= LEDGER_AT_LATEST || !self.stored_within(RUNS_SILENCE, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_that_stored_recently_is_storing() {
        let start = Instant::now();
        let pulse = RunsPulse::new(start);
        let window = Duration::from_millis(200);
        assert!(
            !pulse.stored_within(window, start),
            "nothing stored yet: the stream may be stuck"
        );
        pulse.stored_at(start + Duration::from_millis(1_000));
        assert!(pulse.stored_within(window, start + Duration::from_millis(1_150)));
        assert!(pulse.stored_within(window, start + Duration::from_millis(1_200)));
        assert!(!pulse.stored_within(window, start + Duration::from_millis(1_201)));
        // A store acknowledged late (its task ran after a later one) does
        // not move the pulse back.
        pulse.stored_at(start + Duration::from_millis(900));
        assert!(pulse.stored_within(window, start + Duration::from_millis(1_150)));
    }

    #[test]
    fn an_outcome_is_slow_when_the_stream_is_silent_or_it_waited_too_long() {
        let start = Instant::now();
        let pulse = RunsPulse::new(start);
        let short = Duration::from_millis(200);
        assert!(
            pulse.outcome_is_slow(short, start),
            "nothing ever stored: an election may be under way"
        );
        pulse.stored_at(start + Duration::from_secs(10));
        let storing = start + Duration::from_millis(10_900);
        assert!(
            !pulse.outcome_is_slow(short, storing),
            "others stored within the last second: a busy server, not a stuck one"
        );
        assert!(
            !pulse.outcome_is_slow(LEDGER_AT_LATEST - short, storing),
            "not yet waited the longest"
        );
        assert!(
            pulse.outcome_is_slow(LEDGER_AT_LATEST, storing),
            "waited the longest, whatever the others do"
        );
        assert!(
            pulse.outcome_is_slow(short, start + Duration::from_millis(11_001)),
            "nothing stored for over a second"
        );
    }
}
