//! What the DST rule did, for the schedule preview: the effect on each
//! fire shown (moved after a gap, first of a repeated hour) and the
//! matches that did not fire. Nothing here decides a fire time; the
//! preview asks after the rule in `wall_clock` has.

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;

use super::zone_offsets::{gap_end, is_in_gap, offset_secs, wall_time, PROBE_STEP_SECS};
use super::{CronLine, MAX_STEPS};

/// What the DST rule did to one fire, for the schedule preview.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DstEffect {
    /// A fixed-time line's match fell in a spring-forward gap; it fires at
    /// the first instant after the gap. `wall_time` is the (first) wall time
    /// that did not exist.
    MovedAfterGap { wall_time: NaiveDateTime },
    /// The wall time occurs twice (fall back); a fixed-time line fires here,
    /// at the first occurrence, and not at the second.
    FirstOccurrenceOnly,
    /// The wall time occurs twice; a wildcard line fires at both, this is
    /// the first.
    RepeatedFirst,
    /// The wall time occurs twice; a wildcard line fires at both, this is
    /// the second.
    RepeatedSecond,
}

/// A wall time the line matches that does not fire, for the preview.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DroppedMatch {
    /// A wildcard line's match inside a spring-forward gap.
    InGap { wall_time: NaiveDateTime },
    /// A fixed-time line's match in the second copy of a repeated period:
    /// the wall time fired at its first occurrence.
    SecondOccurrence {
        wall_time: NaiveDateTime,
        at: DateTime<Utc>,
    },
}

impl CronLine {
    /// What the DST rule did to `fire` (a fire of this line in `tz`).
    pub fn dst_effect(&self, fire: DateTime<Utc>, tz: Tz) -> Option<DstEffect> {
        let at = fire.timestamp();
        let wall = wall_time(tz, at)?;
        if self.fixed_time {
            // Matches in the gap just before `fire` that resolve to it.
            let mut moved_from = None;
            let mut cursor = wall;
            for _ in 0..MAX_STEPS {
                match self.wall_previous(cursor, false) {
                    Some(m) if is_in_gap(tz, m) && gap_end(tz, m) == Some(at) => {
                        moved_from = Some(m);
                        cursor = m;
                    }
                    _ => break,
                }
            }
            if let Some(wall_time) = moved_from {
                return Some(DstEffect::MovedAfterGap { wall_time });
            }
        }
        match tz.from_local_datetime(&wall) {
            LocalResult::Ambiguous(..) if self.fixed_time => Some(DstEffect::FirstOccurrenceOnly),
            LocalResult::Ambiguous(first, second) => {
                let first = first.timestamp().min(second.timestamp());
                Some(if at == first {
                    DstEffect::RepeatedFirst
                } else {
                    DstEffect::RepeatedSecond
                })
            }
            _ => None,
        }
    }

    /// Matches that would have fired in `(from, to]` but do not: a wildcard
    /// line's in a gap, a fixed-time line's second occurrences; at most
    /// `limit`.
    pub fn dropped_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        tz: Tz,
        limit: usize,
    ) -> Vec<DroppedMatch> {
        let mut dropped = Vec::new();
        // From the first copy of a repeated period, its wall times behind
        // `from`'s come again after `from`: start as far back as the clock
        // will go back within a day.
        let start = from.timestamp();
        let back = (offset_secs(tz, start) - offset_secs(tz, start + PROBE_STEP_SECS)).max(0);
        let (Some(mut wall), Some(end)) = (
            wall_time(tz, start).map(|w| w - chrono::Duration::seconds(back)),
            wall_time(tz, to.timestamp()),
        ) else {
            return dropped;
        };
        for _ in 0..MAX_STEPS {
            if dropped.len() >= limit {
                break;
            }
            let Some(m) = self.wall_next(wall, false) else {
                break;
            };
            if m > end {
                break;
            }
            match tz.from_local_datetime(&m) {
                LocalResult::None
                    if !self.fixed_time && gap_end(tz, m).is_some_and(|end| end > start) =>
                {
                    dropped.push(DroppedMatch::InGap { wall_time: m });
                }
                LocalResult::Ambiguous(a, b) if self.fixed_time => {
                    let second = a.max(b).with_timezone(&Utc);
                    if second > from && second <= to {
                        dropped.push(DroppedMatch::SecondOccurrence {
                            wall_time: m,
                            at: second,
                        });
                    }
                }
                _ => {}
            }
            wall = m;
        }
        dropped
    }

    /// Whether the line has a wall-clock match after `after`'s wall time in
    /// `tz` at all (in a gap or not): tells "never matches again" from
    /// "matches only inside gaps".
    pub fn matches_after(&self, after: DateTime<Utc>, tz: Tz) -> bool {
        wall_time(tz, after.timestamp())
            .and_then(|wall| self.wall_next(wall, false))
            .is_some()
    }
}
