//! The importer's tests: one per rule of the plan's C.1 and C.2 (`rules`,
//! `translation`), the fixtures of `services/core/tests/crontab` against
//! golden files (`fixtures`), cron's matcher against the translated
//! schedules (`vixie_matcher`), and garbage that must not panic
//! (`garbage`).

use chrono::{DateTime, TimeZone, Utc};

use super::*;

mod fixtures;
mod garbage;
mod rules;
mod translation;
mod vixie_matcher;

/// Options as a test of a user crontab gives them.
fn options() -> TranslateOptions {
    TranslateOptions {
        namespace: None,
        prefix: String::new(),
        timezone: "UTC".into(),
        mail_channel: None,
        file_label: "test.crontab".into(),
    }
}

/// The instant the tests check jobs at, as a put at that time would.
fn written_at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0)
        .single()
        .expect("a valid instant")
}

/// The one entry of a user crontab of `text` (one line or more, the last
/// a job line), failing on refusals.
fn only_entry(text: &str) -> Entry {
    let parsed = parse(text, CrontabKind::User);
    assert_eq!(parsed.refusals, vec![], "{text}");
    assert_eq!(parsed.entries.len(), 1, "{text}");
    parsed.entries.into_iter().next().expect("one entry")
}

/// The reason the one refused line of a user crontab of `text` gives.
fn refusal(text: &str) -> Refusal {
    let parsed = parse(text, CrontabKind::User);
    assert_eq!(parsed.entries, vec![], "{text}");
    assert_eq!(parsed.refusals.len(), 1, "{text}: {:?}", parsed.refusals);
    parsed.refusals.into_iter().next().expect("one refusal")
}

/// Assert that the job of `translated` is one the API takes.
fn assert_accepted(translated: &Translated) {
    let bytes = serde_json::to_vec(&translated.spec_json).expect("encode");
    if let Err(problems) = crate::job::parse_written(&bytes, None, written_at()) {
        panic!("{} refused: {problems:?}", translated.spec_json);
    }
}
