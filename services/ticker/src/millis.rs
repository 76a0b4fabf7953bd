//! An instant as the fire plan stores it: whole milliseconds in 8 bytes.
//!
//! The plan keeps a few instants for every job it holds (a million at a
//! time), and a `DateTime<Utc>` is 12 bytes with no spare value, so an
//! `Option` of one is 16. Every instant the plan keeps is a whole
//! millisecond already: schedules fire on whole milliseconds, jitter is
//! counted in them, and a due event carries its scheduled time in them (so
//! does the run id made from it). [`Millis`] is the millisecond count moved
//! up so that it is never zero, which gives `Option<Millis>` the same 8
//! bytes and keeps the order of the instants.

use std::num::NonZeroI64;

use chrono::{DateTime, Utc};

/// A whole-millisecond instant (see the module docs); ordered as the
/// instants are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Millis(NonZeroI64);

/// Milliseconds since the epoch of the earliest instant `chrono` holds,
/// one less: stored values start at 1.
const SHIFT: i64 = DateTime::<Utc>::MIN_UTC.timestamp_millis() - 1;

impl Millis {
    /// `at`, down to its whole millisecond.
    pub fn of(at: DateTime<Utc>) -> Self {
        let shifted = at.timestamp_millis() - SHIFT;
        Self(NonZeroI64::new(shifted).expect("an instant chrono holds is after its earliest one"))
    }

    /// Milliseconds since the Unix epoch.
    pub fn unix_ms(self) -> i64 {
        self.0.get() + SHIFT
    }

    pub fn at(self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.unix_ms()).expect("made from an instant chrono holds")
    }

    /// `self` plus `ms` milliseconds (negative: earlier).
    pub fn plus_ms(self, ms: i64) -> Self {
        Self(
            NonZeroI64::new(self.0.get() + ms).expect("an offset within the instants chrono holds"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn an_option_of_one_is_eight_bytes() {
        assert_eq!(std::mem::size_of::<Option<Millis>>(), 8);
    }

    #[test]
    fn instants_keep_their_order_and_come_back_whole() {
        let instants = [
            DateTime::<Utc>::MIN_UTC,
            Utc.timestamp_millis_opt(-1).unwrap(),
            Utc.timestamp_millis_opt(0).unwrap(),
            Utc.timestamp_millis_opt(1_764_280_800_123).unwrap(),
            DateTime::<Utc>::MAX_UTC,
        ];
        for pair in instants.windows(2) {
            assert!(Millis::of(pair[0]) < Millis::of(pair[1]), "{pair:?}");
        }
        for at in &instants[1..4] {
            assert_eq!(Millis::of(*at).at(), *at);
        }
    }

    #[test]
    fn a_fraction_of_a_millisecond_is_dropped() {
        let at = Utc.timestamp_nanos(1_764_280_800_123_999_999);
        assert_eq!(Millis::of(at).unix_ms(), 1_764_280_800_123);
        let before_epoch = Utc.timestamp_nanos(-1);
        assert_eq!(Millis::of(before_epoch).unix_ms(), -1);
    }
}
