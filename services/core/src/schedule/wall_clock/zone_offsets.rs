//! A zone's UTC offsets and their changes, read at each instant: the
//! transitions are found by probing a day at a time and bisecting to the
//! second, never assumed to be an hour long or on the hour.

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

/// Probe step when looking for an offset change between two instants. Two
/// changes closer together than this would be seen as none; in the time
/// zone database (2025b) no two are less than 6.9 days apart.
pub(super) const PROBE_STEP_SECS: i64 = 86_400;

/// Half-width of the window searched for the end of a gap: wider than any
/// UTC offset (+-14 h) plus the largest shift.
const GAP_SEARCH_SECS: i64 = 18 * 3600;

/// The UTC offset of `tz` at the instant `at` (seconds since the epoch).
pub(super) fn offset_secs(tz: Tz, at: i64) -> i64 {
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
pub(super) fn wall_time(tz: Tz, at: i64) -> Option<NaiveDateTime> {
    naive(at + offset_secs(tz, at))
}

pub(super) fn naive(secs: i64) -> Option<NaiveDateTime> {
    DateTime::from_timestamp(secs, 0).map(|t| t.naive_utc())
}

pub(super) fn instant(secs: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(secs, 0)
}

pub(super) fn is_in_gap(tz: Tz, wall: NaiveDateTime) -> bool {
    matches!(tz.from_local_datetime(&wall), LocalResult::None)
}

/// The instant a fixed-time line fires for its match `wall`.
pub(super) fn resolve_fixed_time(tz: Tz, wall: NaiveDateTime) -> Option<i64> {
    match tz.from_local_datetime(&wall) {
        LocalResult::Single(t) => Some(t.timestamp()),
        LocalResult::Ambiguous(a, b) => Some(a.timestamp().min(b.timestamp())),
        LocalResult::None => gap_end(tz, wall),
    }
}

/// The first instant after the gap that `wall` (a wall time that does not
/// exist) falls in: where the wall clock jumps past it.
pub(super) fn gap_end(tz: Tz, wall: NaiveDateTime) -> Option<i64> {
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
pub(super) fn first_change(tz: Tz, from: i64, to: i64, offset: i64) -> Option<i64> {
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
pub(super) fn stretch_start(tz: Tz, from: i64, to: i64, offset: i64) -> Option<i64> {
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
