//! The schedule language: lines parsed, refused, and their next fires.

use chrono::{DateTime, Utc};

use super::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("test instant")
        .with_timezone(&Utc)
}

fn next(line: &str, after: &str) -> String {
    let schedule = Schedule::parse(line).expect("parses");
    crate::time_format::rfc3339_millis(
        schedule
            .next_fire(utc(after), chrono_tz::UTC)
            .expect("fires"),
    )
}

#[test]
fn six_fields_are_seconds_first() {
    assert_eq!(
        next("*/2 * * * * *", "2026-01-01T00:00:00.500Z"),
        "2026-01-01T00:00:02.000Z"
    );
    assert_eq!(
        next("30 0 12 * * *", "2026-01-01T00:00:00Z"),
        "2026-01-01T12:00:30.000Z"
    );
}

#[test]
fn five_fields_are_crontab() {
    assert_eq!(
        next("30 4 * * *", "2026-01-01T05:00:00Z"),
        "2026-01-02T04:30:00.000Z"
    );
}

#[test]
fn seven_fields_carry_a_year() {
    assert_eq!(
        next("0 0 0 1 1 * 2030", "2026-01-01T00:00:00Z"),
        "2030-01-01T00:00:00.000Z"
    );
}

#[test]
fn next_fire_is_strictly_after() {
    assert_eq!(
        next("*/2 * * * * *", "2026-01-01T00:00:02Z"),
        "2026-01-01T00:00:04.000Z"
    );
    assert_eq!(
        next("@every 90s", "2026-01-01T00:00:00Z"),
        "2026-01-01T00:01:30.000Z"
    );
}

#[test]
fn every_is_anchored_on_the_epoch() {
    // 1970-01-01T00:00:00Z + k * 90s: replicas agree whenever they start.
    assert_eq!(
        next("@every 90s", "2026-01-01T00:00:01Z"),
        "2026-01-01T00:01:30.000Z"
    );
    assert_eq!(
        next("@every 1h30m", "2026-01-01T00:10:00Z"),
        "2026-01-01T01:30:00.000Z"
    );
}

#[test]
fn at_fires_once() {
    let at = Schedule::parse("@at 2030-05-01T10:00:00+02:00").expect("parses");
    assert_eq!(
        at.next_fire(utc("2026-01-01T00:00:00Z"), chrono_tz::UTC),
        Some(utc("2030-05-01T08:00:00Z"))
    );
    assert_eq!(
        at.next_fire(utc("2030-05-01T08:00:00Z"), chrono_tz::UTC),
        None
    );
}

#[test]
fn an_at_instant_counts_in_whole_milliseconds() {
    let at = Schedule::parse("@at 2030-05-01T08:00:00.1239Z").expect("parses");
    assert_eq!(at.to_string(), "@at 2030-05-01T08:00:00.123Z");
    let fire = at.next_fire(utc("2026-01-01T00:00:00Z"), chrono_tz::UTC);
    assert_eq!(fire, Some(utc("2030-05-01T08:00:00.123Z")));
    // Asked again from its own whole millisecond, it has fired.
    assert_eq!(at.next_fire(fire.expect("fires"), chrono_tz::UTC), None);
}

#[test]
fn macros_expand() {
    assert_eq!(
        next("@daily", "2026-01-01T05:00:00Z"),
        "2026-01-02T00:00:00.000Z"
    );
    assert_eq!(
        next("@midnight", "2026-01-01T05:00:00Z"),
        "2026-01-02T00:00:00.000Z"
    );
    assert_eq!(
        next("@hourly", "2026-01-01T05:10:00Z"),
        "2026-01-01T06:00:00.000Z"
    );
}

#[test]
fn timezone_applies() {
    let s = Schedule::parse("0 9 * * *").expect("parses");
    let tz = parse_timezone("Europe/Berlin").expect("zone");
    assert_eq!(
        s.next_fire(utc("2026-01-01T00:00:00Z"), tz),
        Some(utc("2026-01-01T08:00:00Z"))
    );
}

/// The examples of crontab(5), with fire times worked out by hand
/// (2026-01-01 is a Thursday).
#[test]
fn crontab_manual_examples() {
    let cases = [
        (
            "5 0 * * *",
            "2026-01-01T00:10:00Z",
            "2026-01-02T00:05:00.000Z",
        ),
        (
            "15 14 1 * *",
            "2026-01-01T15:00:00Z",
            "2026-02-01T14:15:00.000Z",
        ),
        (
            "0 22 * * 1-5",
            "2026-01-02T23:00:00Z",
            "2026-01-05T22:00:00.000Z",
        ),
        (
            "23 0-23/2 * * *",
            "2026-01-01T00:30:00Z",
            "2026-01-01T02:23:00.000Z",
        ),
        (
            "5 4 * * sun",
            "2026-01-01T00:00:00Z",
            "2026-01-04T04:05:00.000Z",
        ),
        // Vixie: day-of-month OR day-of-week when both are restricted.
        (
            "0 0 1,15 * 3",
            "2026-01-01T12:00:00Z",
            "2026-01-07T00:00:00.000Z",
        ),
        (
            "0 0 1,15 * 3",
            "2026-01-14T12:00:00Z",
            "2026-01-15T00:00:00.000Z",
        ),
        // 0 and 7 are both Sunday.
        (
            "0 12 * * 0",
            "2026-01-01T00:00:00Z",
            "2026-01-04T12:00:00.000Z",
        ),
        (
            "0 12 * * 7",
            "2026-01-01T00:00:00Z",
            "2026-01-04T12:00:00.000Z",
        ),
        // L, W and #.
        (
            "0 0 L * *",
            "2026-02-01T00:00:00Z",
            "2026-02-28T00:00:00.000Z",
        ),
        (
            "0 0 15W * *",
            "2026-08-01T00:00:00Z",
            "2026-08-14T00:00:00.000Z",
        ),
        (
            "0 0 * * MON#2",
            "2026-01-01T00:00:00Z",
            "2026-01-12T00:00:00.000Z",
        ),
        (
            "0 0 * JAN,JUL *",
            "2026-02-01T00:00:00Z",
            "2026-07-01T00:00:00.000Z",
        ),
    ];
    for (line, after, expected) in cases {
        assert_eq!(next(line, after), expected, "{line} after {after}");
    }
}

#[test]
fn bad_lines_say_why() {
    let err = |l: &str| Schedule::parse(l).expect_err("must fail").0;
    assert_eq!(err("* * * *"), "expected 5, 6 or 7 fields, got 4");
    assert!(
        err("0 0 30 2 *").contains("never fires"),
        "{}",
        err("0 0 30 2 *")
    );
    assert!(err("@every 500ms").contains("at least 1s"));
    assert!(err("@every soon").contains("invalid duration"));
    assert!(err("@at tomorrow").contains("RFC 3339"));
    assert!(err("@fortnightly").contains("unknown macro"));
    assert!(err("61 * * * *").contains("invalid cron line"));
    // Found by the schedule_line fuzz target: croner searched for 2.5 s.
    assert_eq!(
        err(", 0 * 9 * 2"),
        "second field \",\" has an empty list element"
    );
    assert_eq!(
        err("0 1,,2 * * *"),
        "hour field \"1,,2\" has an empty list element"
    );
    // Found by the fuzzer too: a lone `+` day-of-week never matches and
    // cost tens of milliseconds to prove it.
    assert_eq!(
        err("0 0 9 * +"),
        "day-of-week field \"+\" has no days after +"
    );
    assert_eq!(
        err("0 0 9 * +,1"),
        "day-of-week field \"+,1\" has an empty list element"
    );
    assert!(err("0 1  007w0 * +").contains("has no days after +"));
    assert!(Schedule::parse("0 0 1 * +MON").is_ok());
    assert!(parse_timezone("Mars/Olympus").is_err());
}
