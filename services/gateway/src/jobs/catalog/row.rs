//! A job as the table shows it ([`JobRow`]): read from a stored value,
//! valid or not, or from the feed's decoded entry.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use jetcron_core::job::{parse_written_with, ChainLink, ValidJob};
use jetcron_core::schedule_lines::SharedLines;
use jetcron_io::job_feed::{JobEntry, Written};

/// Longest description kept in a row (the job page shows the whole one).
const DESCRIPTION_CHARS: usize = 160;

/// One job as the table shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub id: String,
    pub revision: u64,
    pub updated_at: DateTime<Utc>,
    /// Whether the definition validates (only valid ones are scheduled).
    pub valid: bool,
    pub schedule: String,
    /// IANA zone as written; empty for UTC.
    pub timezone: String,
    pub paused: bool,
    pub labels: BTreeMap<String, String>,
    /// `http`, `nats`, `shell`, or empty when unreadable.
    pub target_type: String,
    pub description: String,
    /// The parents a valid definition names in `after`.
    pub after: Vec<ChainLink>,
}

impl JobRow {
    /// The row of a stored value (`key`, written at `at`), valid or not;
    /// its schedule line parsed through `lines`.
    pub fn from_value(
        key: &str,
        revision: u64,
        value: &[u8],
        at: DateTime<Utc>,
        lines: &SharedLines,
    ) -> Self {
        // A valid definition is read once, by the validation; only an
        // invalid one is looked at again, as plain JSON, for what it has.
        match parse_written_with(value, Some(key), at, &mut |line| lines.parse(line)) {
            Ok(job) => Self::of_valid(key, revision, at, &job),
            Err(_) => Self::of_invalid(key, revision, at, value),
        }
    }

    /// The row of a decoded entry; `None` for a delete.
    pub fn from_entry(entry: &JobEntry) -> Option<Self> {
        let (key, revision, at) = (&entry.key, entry.revision, entry.written_at);
        match &entry.written {
            Written::Valid(job) => Some(Self::of_valid(key, revision, at, job)),
            Written::Invalid { value, .. } => Some(Self::of_invalid(key, revision, at, value)),
            Written::Removed | Written::NotChained => None,
        }
    }

    fn of_valid(key: &str, revision: u64, at: DateTime<Utc>, job: &ValidJob) -> Self {
        let spec = &job.spec;
        Self {
            id: key.to_string(),
            revision,
            updated_at: at,
            valid: true,
            target_type: spec.target.kind().to_string(),
            schedule: spec.schedule.clone().unwrap_or_default(),
            timezone: spec.timezone.clone().unwrap_or_default(),
            paused: spec.paused,
            labels: spec.labels.clone(),
            after: spec.after.clone(),
            description: spec
                .description
                .as_deref()
                .unwrap_or_default()
                .chars()
                .take(DESCRIPTION_CHARS)
                .collect(),
        }
    }

    fn of_invalid(key: &str, revision: u64, at: DateTime<Utc>, value: &[u8]) -> Self {
        let json: serde_json::Value = serde_json::from_slice(value).unwrap_or_default();
        let text = |name: &str| json.get(name).and_then(|v| v.as_str()).unwrap_or_default();
        let labels = json
            .get("labels")
            .and_then(|v| v.as_object())
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            id: key.to_string(),
            revision,
            updated_at: at,
            valid: false,
            schedule: text("schedule").to_string(),
            timezone: text("timezone").to_string(),
            paused: json.get("paused").and_then(|v| v.as_bool()) == Some(true),
            labels,
            target_type: json
                .get("target")
                .and_then(|t| t.get("type"))
                .and_then(|t| t.as_str())
                .unwrap_or_default()
                .to_string(),
            description: text("description")
                .chars()
                .take(DESCRIPTION_CHARS)
                .collect(),
            after: Vec::new(),
        }
    }

    /// `active`, `paused` or `invalid`.
    pub fn state(&self) -> &'static str {
        state_name(self.valid, self.paused)
    }
}

/// `active`, `paused` or `invalid`: a row's state as the table shows it.
pub(super) fn state_name(valid: bool, paused: bool) -> &'static str {
    match (valid, paused) {
        (false, _) => "invalid",
        (true, true) => "paused",
        (true, false) => "active",
    }
}
