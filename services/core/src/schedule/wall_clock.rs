//! A cron line read on a zone's wall clock, turned into instants by Vixie
//! cron(8)'s daylight-saving rule, the rule users of crontab and cronie know.
//!
//! `croner` only matches wall-clock times here (it is asked in UTC, where no
//! time is missing or repeated); what a wall time means on a DST night is
//! decided in this module, one rule for every zone (documented in
//! `docs/schedules.md`):
//!
//! - A line is *fixed-time* when neither its minute nor its hour field starts
//!   with `*` (or `?`); otherwise it is a *wildcard* line.
//! - A fixed-time line fires every match once: a match inside a
//!   spring-forward gap fires at the first instant after the gap (several
//!   matches in one gap fire there once), a match in a fall-back overlap
//!   fires at its first occurrence only.
//! - A wildcard line follows real time: it fires at every instant whose wall
//!   time matches, so its matches inside a gap do not fire and its matches in
//!   an overlap fire in both copies.
//!
//! Zones need not shift by one hour nor on the hour (Lord Howe shifts 30
//! minutes, Chatham at 02:45): offsets are read from the zone at each
//! instant, transitions found by probing and bisection, never assumed.
//! Everything is in whole seconds (cron resolution; every transition of the
//! time zone database falls on a whole second).
//!
//! What the rule did to a fire, for the preview, is in `dst_effects`; how
//! a zone's offsets and transitions are found, in `zone_offsets`.

use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;

use zone_offsets::{
    first_change, instant, naive, offset_secs, resolve_fixed_time, stretch_start, wall_time,
    PROBE_STEP_SECS,
};

mod dst_effects;
mod zone_offsets;

pub use dst_effects::{DroppedMatch, DstEffect};

/// Searches stop after this many steps (segments or skipped matches): far
/// more than any real line needs, a guard against pathological ones.
const MAX_STEPS: usize = 10_000;

/// A parsed cron line and whether it is fixed-time.
#[derive(Debug, Clone)]
pub struct CronLine {
    cron: Cron,
    /// The fields as written (macros expanded), single-spaced.
    text: String,
    fixed_time: bool,
    /// Whether the line has a year field (seven fields).
    has_year: bool,
    last_next: LastNext,
}

/// The last answer of [`CronLine::next_fire`]. Jobs sharing a line ask it
/// the same question in runs: every job of a shard when the ticker takes
/// the shard over (a million at a cold start), every job of an instant
/// once that instant fired. One search then answers them all.
#[derive(Default)]
struct LastNext(std::sync::Mutex<Option<NextAnswer>>);

#[derive(Clone, Copy, PartialEq)]
struct NextAnswer {
    after: i64,
    tz: Tz,
    fire: Option<i64>,
}

impl LastNext {
    fn get(&self, after: i64, tz: Tz) -> Option<Option<i64>> {
        // A busy lock (another thread asking) is a miss, not a wait.
        let last = (*self.0.try_lock().ok()?)?;
        (last.after == after && last.tz == tz).then_some(last.fire)
    }

    fn set(&self, answer: NextAnswer) {
        if let Ok(mut last) = self.0.try_lock() {
            *last = Some(answer);
        }
    }
}

impl Clone for LastNext {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for LastNext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LastNext")
    }
}

impl CronLine {
    /// `fields` is the line as written (after macro expansion): its minute
    /// and hour fields decide whether it is fixed-time.
    pub fn new(cron: Cron, fields: &[&str]) -> Self {
        let (minute, hour) = match fields.len() {
            5 => (fields[0], fields[1]),
            _ => (
                fields.get(1).copied().unwrap_or("*"),
                fields.get(2).copied().unwrap_or("*"),
            ),
        };
        let wildcard = |f: &str| f.starts_with('*') || f.starts_with('?');
        CronLine {
            fixed_time: !wildcard(minute) && !wildcard(hour),
            has_year: fields.len() >= 7,
            text: fields.join(" "),
            cron,
            last_next: LastNext::default(),
        }
    }

    /// The line as written.
    pub fn pattern(&self) -> &str {
        &self.text
    }

    /// Whether neither the minute nor the hour field starts with `*`.
    pub fn is_fixed_time(&self) -> bool {
        self.fixed_time
    }

    /// Whether the line fires again after any instant: a fixed-time line
    /// fires each of its matches, and a line without a year field that
    /// matched once (the parser refuses one that never does) matches again
    /// in every 400-year cycle of the calendar. Saves a search per job when
    /// a million definitions are read.
    pub fn repeats_forever(&self) -> bool {
        self.fixed_time && !self.has_year
    }

    /// The line in English, without time zone ("At 02:30, Monday through Friday").
    pub fn describe(&self) -> String {
        super::words::describe(&self.text.split(' ').collect::<Vec<_>>())
    }

    /// The first wall time matching after (or at, when `inclusive`) `wall`.
    pub fn wall_next(&self, wall: NaiveDateTime, inclusive: bool) -> Option<NaiveDateTime> {
        let t = Utc.from_utc_datetime(&wall);
        let next = self.cron.find_next_occurrence(&t, inclusive).ok()?;
        Some(next.naive_utc())
    }

    /// The last wall time matching before (or at, when `inclusive`) `wall`.
    fn wall_previous(&self, wall: NaiveDateTime, inclusive: bool) -> Option<NaiveDateTime> {
        let t = Utc.from_utc_datetime(&wall);
        let previous = self.cron.find_previous_occurrence(&t, inclusive).ok()?;
        Some(previous.naive_utc())
    }

    /// The first fire strictly after `after`, or `None` when there is none.
    pub fn next_fire(&self, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        // Fires are whole seconds: "after `after`" is "after its second".
        let after = after.timestamp();
        let fire = match self.last_next.get(after, tz) {
            Some(fire) => fire,
            None => {
                let fire = if self.fixed_time {
                    self.next_fixed_time(after, tz)
                } else {
                    self.next_real_time(after, tz)
                };
                self.last_next.set(NextAnswer { after, tz, fire });
                fire
            }
        };
        instant(fire?)
    }

    /// The last fire at or before `at`, or `None` when there is none.
    pub fn previous_fire(&self, at: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        let at = at.timestamp();
        let fire = if self.fixed_time {
            self.previous_fixed_time(at, tz)
        } else {
            self.previous_real_time(at, tz)
        }?;
        instant(fire)
    }

    /// Fixed-time: the least resolved match after `after`. Resolving is
    /// monotone in the wall time, and no match at or before `after`'s wall
    /// time resolves after `after`, so the walk starts there.
    fn next_fixed_time(&self, after: i64, tz: Tz) -> Option<i64> {
        let (mut wall, mut inclusive) = (wall_time(tz, after)?, false);
        for _ in 0..MAX_STEPS {
            let candidate = self.wall_next(wall, inclusive)?;
            let fire = resolve_fixed_time(tz, candidate)?;
            if fire > after {
                return Some(fire);
            }
            // `after` is in the second copy of a repeated period: every match
            // in it fired in the first copy. Go on from the period's end (a
            // fall-back of hours holds thousands of matches of a line with a
            // seconds step).
            let offset = offset_secs(tz, fire);
            (wall, inclusive) = match first_change(tz, fire, fire + PROBE_STEP_SECS, offset) {
                Some(change) => (naive(change + offset)?, true),
                None => (candidate, false),
            };
        }
        None
    }

    /// Fixed-time: the greatest resolved match at or before `at`. After a
    /// fall-back the wall clock has been further than it is now, so the walk
    /// starts as far ahead as the clock went back within the last day.
    fn previous_fixed_time(&self, at: i64, tz: Tz) -> Option<i64> {
        let now = offset_secs(tz, at);
        let went_back = (offset_secs(tz, at - PROBE_STEP_SECS) - now).max(0);
        let at_wall = naive(at + now)?;
        let mut wall = naive(at + now + went_back)?;
        let mut inclusive = true;
        for _ in 0..MAX_STEPS {
            let candidate = self.wall_previous(wall, inclusive)?;
            let fire = resolve_fixed_time(tz, candidate)?;
            if fire <= at {
                return Some(fire);
            }
            // A match past `at`'s own wall time that is still to come: every
            // match up to `at`'s wall time resolves at or before `at`.
            (wall, inclusive) = if candidate > at_wall {
                (at_wall, true)
            } else {
                (candidate, false)
            };
        }
        None
    }

    /// Wildcard: walks real time one stretch of constant offset at a time;
    /// in each, the wall clock is the instant plus that offset.
    fn next_real_time(&self, after: i64, tz: Tz) -> Option<i64> {
        let (mut from, mut inclusive) = (after, false);
        for _ in 0..MAX_STEPS {
            let offset = offset_secs(tz, from);
            let Some(candidate) = self.wall_next(naive(from + offset)?, inclusive) else {
                // No match ahead on this wall clock; one that goes back soon
                // (a fall-back) repeats times that may match.
                match first_change(tz, from, from + PROBE_STEP_SECS, offset) {
                    Some(change) if offset_secs(tz, change) < offset => {
                        (from, inclusive) = (change, true);
                        continue;
                    }
                    _ => return None,
                }
            };
            let fire = candidate.and_utc().timestamp() - offset;
            match first_change(tz, from, fire, offset) {
                None => return Some(fire),
                // The match lies past the stretch: search again from where
                // the next stretch starts, that instant included.
                Some(change) => (from, inclusive) = (change, true),
            }
        }
        None
    }

    /// Wildcard, backwards: the stretch of `at`, then the ones before it.
    fn previous_real_time(&self, at: i64, tz: Tz) -> Option<i64> {
        let mut to = at;
        for _ in 0..MAX_STEPS {
            let offset = offset_secs(tz, to);
            let Some(candidate) = self.wall_previous(naive(to + offset)?, true) else {
                // No match behind on this wall clock; before a recent
                // fall-back it showed later times, which may match.
                match stretch_start(tz, to - PROBE_STEP_SECS, to, offset) {
                    Some(start) if offset_secs(tz, start - 1) > offset => {
                        to = start - 1;
                        continue;
                    }
                    _ => return None,
                }
            };
            let fire = candidate.and_utc().timestamp() - offset;
            match stretch_start(tz, fire, to, offset) {
                None => return Some(fire),
                Some(start) => to = start - 1,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
