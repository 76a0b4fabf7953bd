//! The DST rule's invariants over every IANA zone that changes its offset
//! between 2025 and 2035, at every such change.
//!
//! Around each change (4 h either side) the fires of the pure `next_fire`
//! are compared with a brute-force reading of the rule, minute by minute
//! through real time with chrono's own zone conversion:
//! - fires are strictly increasing (so no two at one instant);
//! - a wildcard line fires exactly at the instants whose wall time matches
//!   (both copies of a repeated period, nothing inside a gap);
//! - a fixed-time line fires each match exactly once: at its first
//!   occurrence, or at the first instant after the gap it falls in, several
//!   matches of one gap once; a daily fixed-time line fires once a day.

use chrono::{DateTime, Duration, NaiveDateTime, Offset, TimeZone, Timelike, Utc};
use chrono_tz::{Tz, TZ_VARIANTS};
use jetcron_core::schedule::Schedule;

const WINDOW_HOURS: i64 = 4;

fn offset(tz: Tz, at: DateTime<Utc>) -> i32 {
    tz.offset_from_utc_datetime(&at.naive_utc())
        .fix()
        .local_minus_utc()
}

fn wall(tz: Tz, at: DateTime<Utc>) -> NaiveDateTime {
    at.with_timezone(&tz).naive_local()
}

/// Instants in 2025-2035 where `tz` changes its offset, to the second.
fn transitions(tz: Tz) -> Vec<DateTime<Utc>> {
    let start = Utc
        .with_ymd_and_hms(2025, 1, 1, 0, 0, 0)
        .single()
        .expect("start");
    let end = Utc
        .with_ymd_and_hms(2036, 1, 1, 0, 0, 0)
        .single()
        .expect("end");
    let mut out = Vec::new();
    let mut t = start;
    while t < end {
        let next = t + Duration::hours(12);
        if offset(tz, t) != offset(tz, next) {
            let (mut same, mut differs) = (t.timestamp(), next.timestamp());
            while differs - same > 1 {
                let mid = same + (differs - same) / 2;
                let at = DateTime::from_timestamp(mid, 0).expect("instant");
                if offset(tz, at) == offset(tz, t) {
                    same = mid;
                } else {
                    differs = mid;
                }
            }
            out.push(DateTime::from_timestamp(differs, 0).expect("instant"));
        }
        t = next;
    }
    out
}

/// Fires of `line` in `(from, to]`, checked to be strictly increasing.
fn fires(line: &str, tz: Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let schedule = Schedule::parse(line).expect("line");
    let mut out: Vec<DateTime<Utc>> = Vec::new();
    let mut cursor = from;
    while let Some(t) = schedule.next_fire(cursor, tz) {
        if t > to {
            break;
        }
        assert!(t > cursor, "{line} in {tz}: {t} not after {cursor}");
        out.push(t);
        cursor = t;
    }
    out
}

/// Every whole minute in `(from, to]` with its wall time.
fn minutes(tz: Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<(DateTime<Utc>, NaiveDateTime)> {
    let mut out = Vec::new();
    let mut u = from + Duration::minutes(1);
    while u <= to {
        out.push((u, wall(tz, u)));
        u += Duration::minutes(1);
    }
    out
}

/// Brute force of a wildcard line: the instants whose wall time matches.
fn real_time(
    tz: Tz,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    matches: impl Fn(&NaiveDateTime) -> bool,
) -> Vec<DateTime<Utc>> {
    minutes(tz, from, to)
        .into_iter()
        .filter(|(_, w)| matches(w))
        .map(|(u, _)| u)
        .collect()
}

/// Brute force of a fixed-time line: each matching wall time, resolved to
/// its first occurrence or, when it never occurs, to the first instant
/// whose wall time is past it; those in `(from, to]`, once each.
fn fixed_time(
    tz: Tz,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    matches: impl Fn(&NaiveDateTime) -> bool,
) -> Vec<DateTime<Utc>> {
    let span = Duration::hours(WINDOW_HOURS);
    let timeline = minutes(tz, from - span, to + span);
    let first_wall = wall(tz, from) - span / 2;
    let last_wall = wall(tz, to) + span / 2;
    let mut out = std::collections::BTreeSet::new();
    let mut n = first_wall.with_second(0).expect("minute");
    while n <= last_wall {
        if matches(&n) {
            let resolved = timeline
                .iter()
                .find(|(_, w)| *w == n)
                .or_else(|| timeline.iter().find(|(_, w)| *w > n))
                .map(|(u, _)| *u);
            if let Some(u) = resolved.filter(|u| *u > from && *u <= to) {
                out.insert(u);
            }
        }
        n += Duration::minutes(1);
    }
    out.into_iter().collect()
}

#[test]
fn every_zone_with_a_change_in_2025_2035_keeps_the_rule() {
    let mut zones = 0;
    let mut changes = 0;
    for tz in TZ_VARIANTS {
        let found = transitions(tz);
        if found.is_empty() {
            continue;
        }
        zones += 1;
        for t in found {
            changes += 1;
            let (from, to) = (
                t - Duration::hours(WINDOW_HOURS),
                t + Duration::hours(WINDOW_HOURS),
            );
            // Wildcard lines follow real time.
            for (line, step) in [
                ("0 */15 * * * *", 15),
                ("0 * * * *", 60),
                ("*/20 * * * *", 20),
            ] {
                let expected = real_time(tz, from, to, |w| {
                    w.second() == 0 && (w.hour() * 60 + w.minute()) % step == 0
                });
                assert_eq!(
                    fires(line, tz, from, to),
                    expected,
                    "{line} in {tz} around {t}"
                );
            }
            // Fixed-time lines at the wall times the change skips or repeats.
            let before = wall(tz, t - Duration::seconds(1)) + Duration::seconds(1);
            let after = wall(tz, t);
            let changed = before.min(after);
            let (h, m) = (changed.hour(), changed.minute());
            let daily = format!("{m} {h} * * *");
            let expected = fixed_time(tz, from, to, |w| {
                w.hour() == h && w.minute() == m && w.second() == 0
            });
            assert_eq!(
                fires(&daily, tz, from, to),
                expected,
                "{daily} in {tz} around {t}"
            );
            let stepped = format!("0 0-59/5 {h} * * *");
            let expected = fixed_time(tz, from, to, |w| {
                w.hour() == h && w.minute() % 5 == 0 && w.second() == 0
            });
            assert_eq!(
                fires(&stepped, tz, from, to),
                expected,
                "{stepped} in {tz} around {t}"
            );
            // A daily fixed-time line fires once for each local day's match:
            // on that day, or, moved past a gap that ends the day, just after.
            let days = fires(&daily, tz, t - Duration::days(3), t + Duration::days(3));
            let mut dates: Vec<_> = days
                .iter()
                .map(|u| {
                    let w = wall(tz, *u);
                    if (w.hour(), w.minute()) == (h, m) {
                        w.date()
                    } else {
                        (wall(tz, *u - Duration::seconds(1)) + Duration::seconds(1)).date()
                    }
                })
                .collect();
            assert!(
                dates.windows(2).all(|d| d[1] == d[0] + Duration::days(1)),
                "{daily} in {tz} around {t}: {days:?}"
            );
            dates.dedup();
            assert_eq!(
                dates.len(),
                days.len(),
                "{daily} in {tz} around {t}: {days:?}"
            );
            assert!(days.len() >= 5, "{daily} in {tz} around {t}: {days:?}");
        }
    }
    // tzdata 2025: about 140 zones change offset in these years.
    assert!(zones >= 100, "only {zones} zones with a change");
    println!("{zones} zones, {changes} changes checked");
}
