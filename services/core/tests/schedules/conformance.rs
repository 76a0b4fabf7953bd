//! Conformance of the schedule maths with an independent reference.
//!
//! `reference/cases.json` holds lines, zones and their next fires,
//! written by `reference/generate.py`: croniter (Python) finds the
//! wall-clock matches, the standard library's zoneinfo applies Vixie
//! cron(8)'s DST rule by resolving every match to the set of instants it
//! fires at (the Rust code walks real time instead), and `W`, `LW`, `@every`
//! and `@at` are worked out by hand there. The cases cover 5, 6 and 7
//! fields, macros, leap years, `L`, `W`, `LW`, `#`, the day-of-month /
//! day-of-week OR rule, year bounds, `@every`, `@at`, and lines at every
//! transition of New York, Berlin, London, Sydney, Santiago, Lord Howe
//! (30-minute shift), Chatham (at 02:45) in 2026-2027, São Paulo in 2018
//! and Tehran in 2021 (both have since dropped DST).

use chrono::{DateTime, Utc};
use jetcron_core::schedule::{parse_timezone, Schedule};
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    line: String,
    timezone: String,
    after: DateTime<Utc>,
    fires: Vec<DateTime<Utc>>,
    why: String,
}

/// The fires the Rust code computes for `case`, as many as the reference
/// lists, plus one to show that the reference's end is the end.
fn computed(case: &Case) -> Vec<DateTime<Utc>> {
    let schedule = Schedule::parse(&case.line)
        .unwrap_or_else(|e| panic!("{:?} does not parse: {e}", case.line));
    let tz = parse_timezone(&case.timezone).expect("zone");
    let mut out = Vec::new();
    let mut cursor = case.after;
    let wanted = if case.fires.len() < 8 {
        case.fires.len() + 1
    } else {
        case.fires.len()
    };
    while out.len() < wanted {
        match schedule.next_fire(cursor, tz) {
            Some(t) => {
                out.push(t);
                cursor = t;
            }
            None => break,
        }
    }
    out
}

#[test]
fn next_fires_agree_with_the_reference() {
    let text = include_str!("reference/cases.json");
    let reference: Reference = serde_json::from_str(text).expect("cases.json");
    let lines: std::collections::BTreeSet<_> =
        reference.cases.iter().map(|c| c.line.as_str()).collect();
    assert!(lines.len() >= 200, "only {} lines", lines.len());
    let mut failures = Vec::new();
    for case in &reference.cases {
        let got = computed(case);
        if got != case.fires {
            failures.push(format!(
                "{:?} in {} after {} ({}):\n  reference {:?}\n  computed  {:?}",
                case.line,
                case.timezone,
                case.after,
                case.why,
                case.fires
                    .iter()
                    .map(|t| t.to_rfc3339())
                    .collect::<Vec<_>>(),
                got.iter().map(|t| t.to_rfc3339()).collect::<Vec<_>>()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        reference.cases.len(),
        failures.join("\n")
    );
}
