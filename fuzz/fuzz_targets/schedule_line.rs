//! Any text as a schedule line: parsing never panics, and a parsed schedule
//! answers next/previous fire times in several zones (DST nights included)
//! with instants strictly after / at-or-before the asked one.
#![no_main]

use chrono::TimeZone as _;
use jetcron_core::schedule::Schedule;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(schedule) = Schedule::parse(line) else {
        return;
    };
    let instants = [
        chrono::Utc.with_ymd_and_hms(2026, 3, 8, 6, 59, 59),
        chrono::Utc.with_ymd_and_hms(2026, 11, 1, 5, 30, 0),
        chrono::Utc.with_ymd_and_hms(1970, 1, 1, 0, 0, 0),
    ];
    for at in instants.into_iter().filter_map(|t| t.single()) {
        for tz in [
            chrono_tz::UTC,
            chrono_tz::America::New_York,
            chrono_tz::Australia::Lord_Howe,
        ] {
            if let Some(next) = schedule.next_fire(at, tz) {
                assert!(next > at, "{line:?}: next {next} not after {at}");
            }
            if let Some(previous) = schedule.previous_fire(at, tz) {
                assert!(previous <= at, "{line:?}: previous {previous} after {at}");
            }
        }
    }
});
