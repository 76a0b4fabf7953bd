//! Any bytes as a job definition: parsing and validation never panic, and a
//! definition that validates survives a round trip (serialize, parse again)
//! unchanged, with its schedule maths callable.
#![no_main]

use chrono::TimeZone as _;
use jetcron_core::job::parse_job;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for key in [None, Some("fuzz-key")] {
        let Ok(job) = parse_job(data, key) else {
            continue;
        };
        let again = serde_json::to_vec(&job.spec).expect("a valid spec serializes");
        let back = parse_job(&again, key).expect("a valid spec parses again");
        assert_eq!(back.spec, job.spec);
        let t0 = chrono::Utc
            .with_ymd_and_hms(2026, 3, 8, 6, 59, 0)
            .single()
            .expect("instant");
        if let Some(next) = job.next_scheduled(t0) {
            assert!(next > t0);
            let _ = job.fire_instant(next);
        }
        let _ = job.missed(t0, t0 + chrono::Duration::hours(2));
        for attempt in [2, 3, 100, u32::MAX] {
            let _ = job.retry_delay(attempt, "fuzz-run");
        }
    }
});
