//! cron's own matcher against the translated job: for tricky lines, every
//! minute of ten weeks of 2027 that Vixie cron's bitsets and day rule
//! (`cron.c`, `find_jobs`) match is a fire time of the translated job's
//! schedule, and no other. In UTC, so the DST rules (the same in both, see
//! docs/schedules.md) stay out of it.

use std::collections::BTreeSet;

use chrono::{Datelike, Duration, Timelike};

use super::super::time_fields::{read_fields, read_macro, VixieTimes};
use super::*;

/// Lines whose day rule, steps, names or Sunday-as-7 could part the two.
const TRICKY_LINES: [&str; 14] = [
    "0 0 */2 * 1",
    "30 4 1,15 * 5",
    "0 0 * * 7",
    "@weekly",
    "5-55/10 * * * *",
    "0 12 * jan-mar/2 mon-fri",
    "15 3 */10 * sun",
    "0 6 1-7 * */3",
    "0 0 1-15 * */2",
    "0 18 * * 5-7",
    "*/20 1-3 * * *",
    "0 0 1-7/2 * 1-7/2",
    "@monthly",
    "45 23 */1 * SAT,sun",
];

/// The times of a line as cron holds them.
fn vixie_times(timing: &Timing) -> VixieTimes {
    match timing {
        Timing::Fields(fields) => read_fields(fields),
        Timing::Macro(name) => read_macro(name),
    }
    .expect("cron takes the line")
}

/// Whether cron runs a job of `times` in the minute starting at `at`.
fn vixie_matches(times: &VixieTimes, at: DateTime<Utc>) -> bool {
    let bit = |set: u64, value: u32| set & (1 << value) != 0;
    let dom = bit(times.dom, at.day());
    let dow = bit(times.dow, at.weekday().num_days_from_sunday());
    let day = if times.dom_star || times.dow_star {
        dom && dow
    } else {
        dom || dow
    };
    bit(times.minute, at.minute())
        && bit(times.hour, at.hour())
        && bit(times.month, at.month())
        && day
}

#[test]
fn translated_schedules_fire_at_the_minutes_cron_runs_them() {
    let start = written_at();
    let end = start + Duration::weeks(10);
    for line in TRICKY_LINES {
        let entry = only_entry(&format!("{line} true\n"));
        let job = translate(&entry, &options()).expect("translates");
        let bytes = serde_json::to_vec(&job.spec_json).expect("encode");
        let valid = crate::job::parse_written(&bytes, None, start).expect("the API takes it");
        let times = vixie_times(&entry.timing);
        let mut cron = BTreeSet::new();
        let mut minute = start;
        while minute < end {
            if vixie_matches(&times, minute) {
                cron.insert(minute);
            }
            minute += Duration::minutes(1);
        }
        let mut jetcron = BTreeSet::new();
        let mut after = start - Duration::seconds(1);
        while let Some(fire) = valid.schedule.next_fire(after, valid.timezone) {
            if fire >= end {
                break;
            }
            jetcron.insert(fire);
            after = fire;
        }
        assert!(!cron.is_empty(), "{line} never ran in the window");
        let only_cron: Vec<_> = cron.difference(&jetcron).take(3).collect();
        let only_jetcron: Vec<_> = jetcron.difference(&cron).take(3).collect();
        assert!(
            only_cron.is_empty() && only_jetcron.is_empty(),
            "{line} (as {:?}): only cron at {only_cron:?}, only jetcron at {only_jetcron:?}",
            job.spec_json["schedule"]
        );
    }
}

#[test]
fn the_matcher_reads_sunday_as_0_and_7() {
    let sunday = Utc
        .with_ymd_and_hms(2027, 1, 3, 0, 0, 0)
        .single()
        .expect("an instant");
    for line in ["0 0 * * 0", "0 0 * * 7", "0 0 * * sun", "0 0 * * 6-7"] {
        let times = vixie_times(&only_entry(&format!("{line} x\n")).timing);
        assert!(vixie_matches(&times, sunday), "{line}");
    }
}
