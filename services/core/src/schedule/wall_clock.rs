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

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;

/// Probe step when looking for an offset change between two instants. Two
/// changes closer together than this would be seen as none; in the time
/// zone database (2025b) no two are less than 6.9 days apart.
const PROBE_STEP_SECS: i64 = 86_400;

/// Searches stop after this many steps (segments or skipped matches): far
/// more than any real line needs, a guard against pathological ones.
const MAX_STEPS: usize = 10_000;

/// Half-width of the window searched for the end of a gap: wider than any
/// UTC offset (+-14 h) plus the largest shift.
const GAP_SEARCH_SECS: i64 = 18 * 3600;

/// A parsed cron line and whether it is fixed-time.
#[derive(Debug, Clone)]
pub struct CronLine {
    cron: Cron,
    /// The fields as written (macros expanded), single-spaced.
    text: String,
    fixed_time: bool,
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
        self.fixed_time && self.text.split(' ').count() < 7
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

/// The UTC offset of `tz` at the instant `at` (seconds since the epoch).
fn offset_secs(tz: Tz, at: i64) -> i64 {
    match DateTime::from_timestamp(at, 0) {
        Some(t) => i64::from(
            tz.offset_from_utc_datetime(&t.naive_utc())
                .fix()
                .local_minus_utc(),
        ),
        None => 0,
    }
}

/// The wall time of `tz` at the instant `at`.
fn wall_time(tz: Tz, at: i64) -> Option<NaiveDateTime> {
    naive(at + offset_secs(tz, at))
}

fn naive(secs: i64) -> Option<NaiveDateTime> {
    DateTime::from_timestamp(secs, 0).map(|t| t.naive_utc())
}

fn instant(secs: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(secs, 0)
}

fn is_in_gap(tz: Tz, wall: NaiveDateTime) -> bool {
    matches!(tz.from_local_datetime(&wall), LocalResult::None)
}

/// The instant a fixed-time line fires for its match `wall`.
fn resolve_fixed_time(tz: Tz, wall: NaiveDateTime) -> Option<i64> {
    match tz.from_local_datetime(&wall) {
        LocalResult::Single(t) => Some(t.timestamp()),
        LocalResult::Ambiguous(a, b) => Some(a.timestamp().min(b.timestamp())),
        LocalResult::None => gap_end(tz, wall),
    }
}

/// The first instant after the gap that `wall` (a wall time that does not
/// exist) falls in: where the wall clock jumps past it.
fn gap_end(tz: Tz, wall: NaiveDateTime) -> Option<i64> {
    let as_utc = wall.and_utc().timestamp();
    let wall_secs = |at: i64| at + offset_secs(tz, at);
    // wall_secs(lo) < wall < wall_secs(hi), and no instant has `wall`.
    let (mut lo, mut hi) = (as_utc - GAP_SEARCH_SECS, as_utc + GAP_SEARCH_SECS);
    if wall_secs(lo) >= as_utc || wall_secs(hi) <= as_utc {
        return None;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if wall_secs(mid) < as_utc {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(hi)
}

/// The first instant in `(from, to]` whose offset is not `offset` (the
/// offset at `from`), if any.
fn first_change(tz: Tz, from: i64, to: i64, offset: i64) -> Option<i64> {
    let mut same = from;
    while same < to {
        let probe = (same + PROBE_STEP_SECS).min(to);
        if offset_secs(tz, probe) != offset {
            return Some(boundary(tz, same, probe, offset).1);
        }
        same = probe;
    }
    None
}

/// The first instant of the stretch of constant `offset` that ends at `to`,
/// when it starts after `from`; `None` when `from` is in the same stretch.
fn stretch_start(tz: Tz, from: i64, to: i64, offset: i64) -> Option<i64> {
    let mut same = to;
    while same > from {
        let probe = (same - PROBE_STEP_SECS).max(from);
        if offset_secs(tz, probe) != offset {
            return Some(boundary(tz, same, probe, offset).0);
        }
        same = probe;
    }
    None
}

/// Where the offset changes between `same` (at `offset`) and `differs` (not),
/// which may lie on either side of it: the two adjacent seconds there,
/// `(at offset, not at offset)`.
fn boundary(tz: Tz, mut same: i64, mut differs: i64, offset: i64) -> (i64, i64) {
    while (differs - same).abs() > 1 {
        let mid = same + (differs - same) / 2;
        if offset_secs(tz, mid) == offset {
            same = mid;
        } else {
            differs = mid;
        }
    }
    (same, differs)
}

#[cfg(test)]
mod tests;
