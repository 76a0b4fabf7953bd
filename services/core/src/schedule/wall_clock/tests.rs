//! DST nights worked out by hand from the zones' rules (tzdata), one case
//! of each part of the rule. The offsets used:
//! - America/New_York 2027: EST -05 -> EDT -04 on Sun 14 Mar at 02:00
//!   (07:00Z); EDT -> EST on Sun 7 Nov at 02:00 EDT (06:00Z).
//! - Australia/Lord_Howe 2027: +11 -> +10:30 on Sun 4 Apr at 02:00 (15:00Z
//!   on the 3rd), 01:30-02:00 repeated; +10:30 -> +11 on Sun 3 Oct at 02:00
//!   (15:30Z on the 2nd), 02:00-02:30 missing.
//! - Pacific/Chatham 2027: +13:45 -> +12:45 on Sun 4 Apr at 03:45 (14:00Z on
//!   the 3rd), 02:45-03:45 repeated; +12:45 -> +13:45 on Sun 26 Sep at 02:45
//!   (14:00Z on the 25th), 02:45-03:45 missing.

use super::*;
use crate::schedule::{parse_timezone, Schedule};

fn line(text: &str) -> CronLine {
    match Schedule::parse(text).expect("parses") {
        Schedule::Cron(line) => (*line).clone(),
        other => panic!("not a cron line: {other:?}"),
    }
}

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("instant")
        .with_timezone(&Utc)
}

/// Up to `n` fires after `from`, as `HH:MM:SSZ` strings on their UTC date.
fn fires(text: &str, zone: &str, from: &str, n: usize) -> Vec<String> {
    let (line, tz) = (line(text), parse_timezone(zone).expect("zone"));
    let mut out = Vec::new();
    let mut cursor = utc(from);
    while out.len() < n {
        match line.next_fire(cursor, tz) {
            Some(t) => {
                assert!(t > cursor, "{text}: {t} not after {cursor}");
                out.push(t.format("%Y-%m-%dT%H:%M:%SZ").to_string());
                cursor = t;
            }
            None => break,
        }
    }
    out
}

#[test]
fn fixed_time_is_told_from_wildcard_by_minute_and_hour() {
    assert!(line("30 2 * * *").is_fixed_time());
    assert!(line("0 0,30 2 * * *").is_fixed_time());
    assert!(
        line("*/10 30 2 * * *").is_fixed_time(),
        "seconds do not count"
    );
    assert!(line("0 15-45/15 1-3 * * *").is_fixed_time());
    assert!(!line("*/15 2 * * *").is_fixed_time());
    assert!(!line("0 * * * *").is_fixed_time());
    assert!(!line("0 0 */2 * * *").is_fixed_time());
    assert!(!line("@hourly").is_fixed_time());
    assert!(line("@daily").is_fixed_time());
}

#[test]
fn spring_forward_fixed_time_fires_once_after_the_gap() {
    let ny = "America/New_York";
    assert_eq!(
        fires("30 2 * * *", ny, "2027-03-13T00:00:00Z", 3),
        [
            "2027-03-13T07:30:00Z",
            "2027-03-14T07:00:00Z",
            "2027-03-15T06:30:00Z"
        ]
    );
    // Several matches in one gap fire once; a match at the gap's end too.
    assert_eq!(
        fires("0 0,30 2 14 3 * 2027", ny, "2027-01-01T00:00:00Z", 5),
        ["2027-03-14T07:00:00Z"]
    );
    assert_eq!(
        fires("0 0 2,3 14 3 * 2027", ny, "2027-01-01T00:00:00Z", 5),
        ["2027-03-14T07:00:00Z"]
    );
    // Lord Howe's 30-minute gap, Chatham's gap at 02:45.
    assert_eq!(
        fires(
            "0 15 2 3 10 * 2027",
            "Australia/Lord_Howe",
            "2027-01-01T00:00:00Z",
            5
        ),
        ["2027-10-02T15:30:00Z"]
    );
    assert_eq!(
        fires(
            "0 0 3 26 9 * 2027",
            "Pacific/Chatham",
            "2027-01-01T00:00:00Z",
            5
        ),
        ["2027-09-25T14:00:00Z"]
    );
}

#[test]
fn spring_forward_wildcard_follows_real_time() {
    let ny = "America/New_York";
    // 02:00 does not exist on 14 Mar: hourly goes 01:00 EST -> 03:00 EDT.
    assert_eq!(
        fires("0 * * * *", ny, "2027-03-14T05:30:00Z", 3),
        [
            "2027-03-14T06:00:00Z",
            "2027-03-14T07:00:00Z",
            "2027-03-14T08:00:00Z"
        ]
    );
    // Every match of this line is in the gap: it never fires.
    assert!(fires("0 */15 2 14 3 * 2027", ny, "2027-01-01T00:00:00Z", 5).is_empty());
    assert!(line("0 */15 2 14 3 * 2027").matches_after(
        utc("2027-01-01T00:00:00Z"),
        parse_timezone(ny).expect("zone")
    ));
    assert_eq!(
        fires(
            "0 */15 2 3 10 * 2027",
            "Australia/Lord_Howe",
            "2027-01-01T00:00:00Z",
            5
        ),
        ["2027-10-02T15:30:00Z", "2027-10-02T15:45:00Z"]
    );
    assert_eq!(
        fires(
            "0 0 * 26 9 * 2027",
            "Pacific/Chatham",
            "2027-09-25T12:30:00Z",
            3
        ),
        [
            "2027-09-25T13:15:00Z", // 02:00 +12:45
            "2027-09-25T14:15:00Z", // 04:00 +13:45; 03:00 did not exist
            "2027-09-25T15:15:00Z"
        ]
    );
}

#[test]
fn fall_back_fixed_time_fires_at_the_first_occurrence_only() {
    let ny = "America/New_York";
    assert_eq!(
        fires("30 1 * * *", ny, "2027-11-06T12:00:00Z", 2),
        ["2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"]
    );
    assert_eq!(
        fires("0 0,30 1 7 11 * 2027", ny, "2027-01-01T00:00:00Z", 5),
        ["2027-11-07T05:00:00Z", "2027-11-07T05:30:00Z"]
    );
    assert_eq!(
        fires(
            "0 45 1 4 4 * 2027",
            "Australia/Lord_Howe",
            "2027-01-01T00:00:00Z",
            5
        ),
        ["2027-04-03T14:45:00Z"]
    );
    assert_eq!(
        fires(
            "0 0 3 4 4 * 2027",
            "Pacific/Chatham",
            "2027-01-01T00:00:00Z",
            5
        ),
        ["2027-04-03T13:15:00Z"]
    );
    // Searching from inside the second copy finds the next day.
    assert_eq!(
        fires("30 1 * * *", ny, "2027-11-07T06:10:00Z", 1),
        ["2027-11-08T06:30:00Z"]
    );
}

#[test]
fn fall_back_wildcard_fires_in_both_copies() {
    let ny = "America/New_York";
    assert_eq!(
        fires("0 */15 1 7 11 * 2027", ny, "2027-01-01T00:00:00Z", 10),
        [
            "2027-11-07T05:00:00Z",
            "2027-11-07T05:15:00Z",
            "2027-11-07T05:30:00Z",
            "2027-11-07T05:45:00Z",
            "2027-11-07T06:00:00Z",
            "2027-11-07T06:15:00Z",
            "2027-11-07T06:30:00Z",
            "2027-11-07T06:45:00Z"
        ]
    );
    assert_eq!(
        fires("0 * * * *", ny, "2027-11-07T03:30:00Z", 4),
        [
            "2027-11-07T04:00:00Z",
            "2027-11-07T05:00:00Z",
            "2027-11-07T06:00:00Z",
            "2027-11-07T07:00:00Z"
        ]
    );
    assert_eq!(
        fires(
            "0 */10 1 4 4 * 2027",
            "Australia/Lord_Howe",
            "2027-01-01T00:00:00Z",
            12
        ),
        [
            "2027-04-03T14:00:00Z",
            "2027-04-03T14:10:00Z",
            "2027-04-03T14:20:00Z",
            "2027-04-03T14:30:00Z",
            "2027-04-03T14:40:00Z",
            "2027-04-03T14:50:00Z",
            "2027-04-03T15:00:00Z",
            "2027-04-03T15:10:00Z",
            "2027-04-03T15:20:00Z"
        ]
    );
    assert_eq!(
        fires(
            "0 */30 3 4 4 * 2027",
            "Pacific/Chatham",
            "2027-01-01T00:00:00Z",
            5
        ),
        [
            "2027-04-03T13:15:00Z",
            "2027-04-03T13:45:00Z",
            "2027-04-03T14:15:00Z",
            "2027-04-03T14:45:00Z"
        ]
    );
}

#[test]
fn previous_fire_mirrors_next_fire() {
    for (text, zone, from) in [
        (
            "0 */15 1 7 11 * 2027",
            "America/New_York",
            "2027-11-07T04:00:00Z",
        ),
        (
            "0 0,30 1 7 11 * 2027",
            "America/New_York",
            "2027-11-07T04:00:00Z",
        ),
        ("30 2 * * *", "America/New_York", "2027-03-12T00:00:00Z"),
        ("0 * * * *", "America/New_York", "2027-03-14T03:00:00Z"),
        (
            "0 */10 1 4 4 * 2027",
            "Australia/Lord_Howe",
            "2027-04-03T12:00:00Z",
        ),
        (
            "0 */30 3 4 4 * 2027",
            "Pacific/Chatham",
            "2027-04-03T12:00:00Z",
        ),
        (
            "0 0,30 3 4 4 * 2027",
            "Pacific/Chatham",
            "2027-04-03T12:00:00Z",
        ),
        (
            "0 0 * 26 9 * 2027",
            "Pacific/Chatham",
            "2027-09-25T10:00:00Z",
        ),
    ] {
        let (l, tz) = (line(text), parse_timezone(zone).expect("zone"));
        let forward: Vec<_> =
            std::iter::successors(l.next_fire(utc(from), tz), |t| l.next_fire(*t, tz))
                .take(12)
                .collect();
        for pair in forward.windows(2) {
            // From the later fire, and from any instant between the two,
            // the previous fire is the earlier one.
            assert_eq!(
                l.previous_fire(pair[1] - chrono::Duration::seconds(1), tz),
                Some(pair[0]),
                "{text}"
            );
            assert_eq!(l.previous_fire(pair[1], tz), Some(pair[1]), "{text}");
        }
    }
}

#[test]
fn the_preview_says_what_moved_and_what_was_dropped() {
    let ny = parse_timezone("America/New_York").expect("zone");
    let moved = line("0 30 2 * * *");
    assert_eq!(
        moved.dst_effect(utc("2027-03-14T07:00:00Z"), ny),
        Some(DstEffect::MovedAfterGap {
            wall_time: utc("2027-03-14T02:30:00Z").naive_utc()
        })
    );
    assert_eq!(moved.dst_effect(utc("2027-03-15T06:30:00Z"), ny), None);
    let fixed = line("0 30 1 * * *");
    assert_eq!(
        fixed.dst_effect(utc("2027-11-07T05:30:00Z"), ny),
        Some(DstEffect::FirstOccurrenceOnly)
    );
    assert_eq!(
        fixed.dropped_between(
            utc("2027-11-07T00:00:00Z"),
            utc("2027-11-08T12:00:00Z"),
            ny,
            10
        ),
        [DroppedMatch::SecondOccurrence {
            wall_time: utc("2027-11-07T01:30:00Z").naive_utc(),
            at: utc("2027-11-07T06:30:00Z")
        }]
    );
    let hourly = line("0 * * * *");
    assert_eq!(
        hourly.dst_effect(utc("2027-11-07T05:00:00Z"), ny),
        Some(DstEffect::RepeatedFirst)
    );
    assert_eq!(
        hourly.dst_effect(utc("2027-11-07T06:00:00Z"), ny),
        Some(DstEffect::RepeatedSecond)
    );
    assert_eq!(
        hourly.dropped_between(
            utc("2027-03-14T00:00:00Z"),
            utc("2027-03-14T12:00:00Z"),
            ny,
            10
        ),
        [DroppedMatch::InGap {
            wall_time: utc("2027-03-14T02:00:00Z").naive_utc()
        }]
    );
}

/// Antarctica/Casey went from +11 to +08 at 2023-03-08T16:00:00Z: three
/// hours of wall time repeated, 10,800 matches of a line with a seconds
/// wildcard, all fired in the first copy (found by review).
#[test]
fn a_long_fall_back_is_crossed_in_one_step() {
    let casey = parse_timezone("Antarctica/Casey").expect("zone");
    let l = line("* 0-59 0-23 * * *");
    assert!(l.is_fixed_time());
    assert_eq!(
        l.next_fire(utc("2023-03-08T16:00:00Z"), casey),
        Some(utc("2023-03-08T19:00:00Z"))
    );
    assert_eq!(
        l.next_fire(utc("2023-03-08T15:59:58Z"), casey),
        Some(utc("2023-03-08T15:59:59Z"))
    );
    assert_eq!(
        l.previous_fire(utc("2023-03-09T04:00:00Z"), casey),
        Some(utc("2023-03-09T04:00:00Z"))
    );
    assert_eq!(
        l.previous_fire(utc("2023-03-08T18:59:59Z"), casey),
        Some(utc("2023-03-08T15:59:59Z"))
    );
}

#[test]
fn second_occurrences_ahead_of_a_first_copy_are_dropped() {
    let ny = parse_timezone("America/New_York").expect("zone");
    // From 01:45 EDT, 01:30 comes again at 01:30 EST (06:30Z) and does not fire.
    assert_eq!(
        line("30 1 * * *").dropped_between(
            utc("2027-11-07T05:45:00Z"),
            utc("2027-11-09T07:00:00Z"),
            ny,
            10
        ),
        [DroppedMatch::SecondOccurrence {
            wall_time: utc("2027-11-07T01:30:00Z").naive_utc(),
            at: utc("2027-11-07T06:30:00Z")
        }]
    );
}

#[test]
fn a_line_asked_again_answers_as_a_fresh_one() {
    // The line keeps its last answer: asked the same, something else in
    // between, or the same instant in another zone, it must answer what a
    // line that never answered would.
    let shared = line("0 30 2 * * *");
    let new_york = parse_timezone("America/New_York").expect("zone");
    let questions = [
        ("2027-03-13T12:00:00Z", Tz::UTC),
        ("2027-03-13T12:00:00Z", Tz::UTC),
        ("2027-03-13T12:00:00Z", new_york),
        ("2027-03-13T12:00:00.900Z", new_york),
        ("2027-03-14T02:30:00Z", Tz::UTC),
        ("2027-03-13T12:00:00Z", Tz::UTC),
        ("2027-03-13T12:00:00Z", new_york),
    ];
    for (after, tz) in questions {
        let fresh = line("0 30 2 * * *").next_fire(utc(after), tz);
        assert_eq!(shared.next_fire(utc(after), tz), fresh, "{after} in {tz}");
    }
    // In New York the 14th's 02:30 does not exist (moved after the gap).
    assert_eq!(
        shared.next_fire(utc("2027-03-13T12:00:00Z"), new_york),
        Some(utc("2027-03-14T07:00:00Z"))
    );
}
