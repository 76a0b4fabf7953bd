use super::*;
use crate::job::parse_job;

fn job(extra: &str) -> ValidJob {
    let json = format!(r#"{{"id":"j","target":{{"type":"shell","command":"true"}},{extra}}}"#);
    parse_job(json.as_bytes(), None).expect("valid job")
}

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("instant")
        .with_timezone(&Utc)
}

fn fires(job: &ValidJob, from: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = utc(from);
    while out.len() < n {
        match job.next_scheduled(cursor) {
            Some(t) => {
                out.push(t.to_rfc3339());
                cursor = t;
            }
            None => break,
        }
    }
    out
}

#[test]
fn spring_forward_gap_fires_once_right_after() {
    let j = job(r#""schedule":"30 2 * * *","timezone":"America/New_York""#);
    assert_eq!(
        fires(&j, "2026-03-07T00:00:00Z", 3),
        [
            "2026-03-07T07:30:00+00:00", // 02:30 EST
            "2026-03-08T07:00:00+00:00", // 03:00 EDT, right after the gap
            "2026-03-09T06:30:00+00:00", // 02:30 EDT
        ]
    );
}

#[test]
fn fall_back_fixed_time_fires_at_the_first_occurrence_wildcard_at_both() {
    let j = job(r#""schedule":"30 1 * * *","timezone":"America/New_York""#);
    assert_eq!(
        fires(&j, "2026-10-31T12:00:00Z", 2),
        ["2026-11-01T05:30:00+00:00", "2026-11-02T06:30:00+00:00"]
    );
    // A wildcard line (hourly) follows real time: 01:00 happens twice, fires twice.
    let hourly = job(r#""schedule":"0 * * * *","timezone":"America/New_York""#);
    assert_eq!(
        fires(&hourly, "2026-11-01T04:30:00Z", 3),
        [
            "2026-11-01T05:00:00+00:00", // 01:00 EDT
            "2026-11-01T06:00:00+00:00", // 01:00 EST
            "2026-11-01T07:00:00+00:00", // 02:00 EST
        ]
    );
}

#[test]
fn every_ignores_wall_clocks() {
    let j = job(r#""schedule":"@every 1h","timezone":"America/New_York""#);
    assert_eq!(
        fires(&j, "2026-11-01T04:30:00Z", 3),
        [
            "2026-11-01T05:00:00+00:00",
            "2026-11-01T06:00:00+00:00",
            "2026-11-01T07:00:00+00:00",
        ]
    );
}

#[test]
fn bounds_are_inclusive() {
    let j = job(
        r#""schedule":"0 0 * * * *","start_at":"2026-01-01T10:00:00Z","end_at":"2026-01-01T12:00:00Z""#,
    );
    assert_eq!(
        fires(&j, "2025-06-01T00:00:00Z", 10),
        [
            "2026-01-01T10:00:00+00:00",
            "2026-01-01T11:00:00+00:00",
            "2026-01-01T12:00:00+00:00",
        ]
    );
    assert_eq!(
        j.previous_scheduled(utc("2027-01-01T00:00:00Z")),
        Some(utc("2026-01-01T12:00:00Z"))
    );
    assert_eq!(j.previous_scheduled(utc("2026-01-01T09:00:00Z")), None);
}

#[test]
fn jitter_is_deterministic_and_bounded() {
    let j = job(r#""schedule":"* * * * * *","jitter":"10s""#);
    let t = utc("2026-01-01T00:00:00Z");
    let a = j.fire_instant(t);
    assert_eq!(a, j.fire_instant(t));
    assert!(a >= t && a < t + chrono::Duration::seconds(10));
    let offsets: std::collections::BTreeSet<_> = (0..50)
        .map(|s| {
            jitter_offset(
                "j",
                t + chrono::Duration::seconds(s),
                Duration::from_secs(10),
            )
        })
        .collect();
    assert!(offsets.len() > 10, "offsets should spread: {offsets:?}");
    assert_eq!(job(r#""schedule":"* * * * * *""#).fire_instant(t), t);
}

#[test]
fn misfire_policies() {
    let last = utc("2026-01-01T00:00:00Z");
    let now = utc("2026-01-01T05:30:00Z");
    let skip = job(r#""schedule":"@hourly","misfire":"skip""#);
    assert!(skip.missed(last, now).is_empty());
    let once = job(r#""schedule":"@hourly""#);
    assert_eq!(once.missed(last, now), [utc("2026-01-01T05:00:00Z")]);
    let all = job(r#""schedule":"@hourly","misfire":"fire_all","catchup_window":"3h""#);
    assert_eq!(
        all.missed(last, now),
        [
            utc("2026-01-01T03:00:00Z"),
            utc("2026-01-01T04:00:00Z"),
            utc("2026-01-01T05:00:00Z")
        ]
    );
    // Nothing missed: nothing fired.
    assert!(once.missed(utc("2026-01-01T05:00:00Z"), now).is_empty());
    // fire_all is capped.
    let dense = job(r#""schedule":"* * * * * *","misfire":"fire_all","catchup_window":"2h""#);
    let missed = dense.missed(last, now);
    assert_eq!(missed.len(), MAX_CATCHUP_FIRES);
    assert_eq!(missed.last(), Some(&now));
}

mod property {
    use super::*;
    use chrono::{LocalResult, TimeZone};
    use proptest::prelude::*;

    const ZONES: [&str; 6] = [
        "America/New_York",
        "Europe/Berlin",
        "Australia/Sydney",
        "America/Santiago",
        "Asia/Tehran",
        "Europe/London",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Across the DST transitions of several zones, a daily job fires
        /// exactly once per local calendar day, at its wall time or right after
        /// a gap, and fire times strictly increase.
        #[test]
        fn daily_jobs_fire_once_per_local_day(
            zone in 0..ZONES.len(),
            hour in 0u32..24,
            minute in 0u32..60,
            day_offset in 0i64..730,
        ) {
            let tz_name = ZONES[zone];
            let tz: Tz = tz_name.parse().expect("zone");
            let j = job(&format!(r#""schedule":"{minute} {hour} * * *","timezone":"{tz_name}""#));
            let start = utc("2025-01-01T00:00:00Z") + chrono::Duration::days(day_offset);
            let mut cursor = start;
            let mut days = std::collections::BTreeSet::new();
            for _ in 0..40 {
                let t = j.next_scheduled(cursor).expect("daily job fires");
                prop_assert!(t > cursor);
                let local = t.with_timezone(&tz);
                prop_assert!(days.insert(local.date_naive()), "two fires on {}", local.date_naive());
                let wall = (hour, minute);
                let got = (chrono::Timelike::hour(&local), chrono::Timelike::minute(&local));
                if got != wall {
                    // Only allowed when the wall time did not exist that day.
                    let naive = local.date_naive().and_hms_opt(hour, minute, 0).expect("time");
                    prop_assert!(matches!(tz.from_local_datetime(&naive), LocalResult::None),
                        "fired at {got:?} instead of {wall:?} on {}", local.date_naive());
                }
                cursor = t;
            }
        }

    }
}

#[test]
fn a_repeating_line_is_still_refused_when_its_bounds_leave_no_fire() {
    let written = utc("2026-06-01T00:00:00Z");
    // Fixed-time, no year field: fires again forever, no search needed.
    assert!(job(r#""schedule":"0 30 9 * * *""#)
        .never_fires_after(written)
        .is_none());
    // The same line ended before the write: refused.
    let ended = job(r#""schedule":"0 30 9 * * *","end_at":"2026-01-01T00:00:00Z""#);
    assert_eq!(
        ended.never_fires_after(written).map(|p| p.code),
        Some("never_fires".to_string())
    );
    // A year field can run out.
    let past_year = job(r#""schedule":"0 30 9 * * * 2020""#);
    assert!(past_year.never_fires_after(written).is_some());
}
