//! Job events: what happened to a job outside its runs, stored next to the
//! run events in `JETCRON_RUNS` on a subject per kind
//! ([`subjects::JOB_REJECTED_SUBJECT`], [`subjects::FIRE_MISSED_SUBJECT`]) and
//! projected into ClickHouse `jetcron.job_events` (one table, told apart by
//! `kind`):
//!
//! - `job.rejected` ([`JobRejected`]): a definition that reached jetcron and
//!   was not applied. A refused `jetcron.api.jobs.put` with a reply subject
//!   answers the caller; one sent with `nats pub` (no reply) or written
//!   straight into the `jetcron_jobs` bucket has nobody to answer.
//! - `fire.missed` ([`FireMissed`]): a scheduled time of a job with no run
//!   event at all a grace period after it, found by the gateway's periodic
//!   scan.
//!
//! The projector decodes by `kind` and checks that it matches the subject
//! ([`JobEvent::decode_on`]): a role allowed to record rejections cannot
//! record missed fires, and the other way round.
//!
//! Identity: a bucket value is rejected by every ticker replica, and again
//! whenever a watch reopens, so its `event_id` is derived from (key,
//! revision); a missed fire is found by every gateway on every scan, so its
//! `event_id` is derived from the run id the fire would have had. JetStream
//! drops repeats inside its duplicate window and the ClickHouse table
//! collapses the rest (same `event_id` and `at_ms`). An API rejection is one
//! request: a random id.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::events::RunId;
use crate::job::FieldError;
use crate::subjects;
use crate::time_format;

/// Namespace of the ids of bucket rejections (a fixed, random UUID).
const KV_REJECTION_NAMESPACE: Uuid = Uuid::from_u128(0x3b9e_51c2_7a4d_4f08_a6e1_0c5d_92f7_18ab);

/// Where the refused definition came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RejectionSource {
    /// `jetcron.api.jobs.put` without a reply subject (`nats pub`).
    Api,
    /// A value written into the `jetcron_jobs` bucket (`nats kv put`).
    Kv,
}

impl RejectionSource {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectionSource::Api => "api",
            RejectionSource::Kv => "kv",
        }
    }
}

/// A definition that was not applied, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobRejected {
    /// Unique per rejection; for the bucket, derived from (key, revision).
    pub event_id: String,
    /// Always `job.rejected`.
    pub kind: String,
    pub source: RejectionSource,
    /// The job id the definition names (the KV key for the bucket), when
    /// there is one; it may itself be the problem.
    pub job_id: Option<String>,
    /// KV revision of the refused value (bucket only).
    pub revision: Option<u64>,
    /// When it was refused (bucket: when the value was written).
    #[serde(with = "time_format::millis")]
    #[schemars(with = "String")]
    pub at: DateTime<Utc>,
    /// Every problem, as the API would have answered.
    pub problems: Vec<FieldError>,
    /// Size of the refused value in bytes. The value itself is not kept: a
    /// definition can carry secrets (target headers), and history is widely read.
    pub size: u64,
}

/// The `kind` of [`JobRejected`].
pub const JOB_REJECTED_KIND: &str = "job.rejected";

impl JobRejected {
    /// A definition refused by the API with nobody to answer.
    pub fn from_api(body: &[u8], problems: Vec<FieldError>, at: DateTime<Utc>) -> Self {
        Self {
            event_id: Uuid::new_v4().to_string(),
            kind: JOB_REJECTED_KIND.into(),
            source: RejectionSource::Api,
            job_id: claimed_id(body),
            revision: None,
            at,
            problems,
            size: body.len() as u64,
        }
    }

    /// A bucket value under `key` at `revision`, written at `written_at`.
    pub fn from_kv(
        key: &str,
        revision: u64,
        value: &[u8],
        problems: Vec<FieldError>,
        written_at: DateTime<Utc>,
    ) -> Self {
        let name = format!("{key}\n{revision}");
        Self {
            event_id: Uuid::new_v5(&KV_REJECTION_NAMESPACE, name.as_bytes()).to_string(),
            kind: JOB_REJECTED_KIND.into(),
            source: RejectionSource::Kv,
            job_id: Some(key.to_string()),
            revision: Some(revision),
            at: written_at,
            problems,
            size: value.len() as u64,
        }
    }
}

/// The `id` a body claims, if it is a JSON object with a string `id`.
fn claimed_id(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Claim {
        id: String,
    }
    serde_json::from_slice::<Claim>(body)
        .ok()
        .map(|c| c.id.chars().take(256).collect())
}

/// The `kind` of [`FireMissed`].
pub const FIRE_MISSED_KIND: &str = "fire.missed";

/// A scheduled fire of a job's current definition that had no run event at
/// all when the gateway looked, a grace period after its (jittered) time.
///
/// Recorded once per fire: a run that starts later (a pool that was not
/// served, then is) does not remove it; the run's own events show that.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FireMissed {
    /// `<run_id>:fire.missed`: the same for every gateway and every scan.
    pub event_id: String,
    /// Always `fire.missed`.
    pub kind: String,
    pub job_id: String,
    /// The run id the fire would have had (derived from job id and time).
    pub run_id: RunId,
    /// The scheduled time nothing ran for (stored as `at_ms`).
    #[serde(with = "time_format::millis")]
    #[schemars(with = "String")]
    pub scheduled_at: DateTime<Utc>,
    /// When the gateway found it missing.
    #[serde(with = "time_format::millis")]
    #[schemars(with = "String")]
    pub detected_at: DateTime<Utc>,
    /// The grace period the gateway waits past the scheduled time, in
    /// milliseconds (the job's jitter comes on top).
    pub grace_ms: i64,
}

impl FireMissed {
    /// The fire of `job_id` at `scheduled_at`, found missing at `detected_at`.
    pub fn new(
        job_id: &str,
        scheduled_at: DateTime<Utc>,
        detected_at: DateTime<Utc>,
        grace: chrono::Duration,
    ) -> Self {
        let run_id = RunId::for_fire(job_id, scheduled_at);
        Self {
            event_id: Self::event_id_for(&run_id),
            kind: FIRE_MISSED_KIND.into(),
            job_id: job_id.to_string(),
            run_id,
            scheduled_at,
            detected_at,
            grace_ms: grace.num_milliseconds(),
        }
    }

    /// The `event_id` (and `Nats-Msg-Id`) of the missed fire `run_id`.
    pub fn event_id_for(run_id: &RunId) -> String {
        format!("{}:{FIRE_MISSED_KIND}", run_id.as_str())
    }
}

/// Any event on the job-events subject.
#[derive(Debug, Clone, PartialEq)]
pub enum JobEvent {
    Rejected(JobRejected),
    FireMissed(FireMissed),
}

impl JobEvent {
    /// Decode by `kind`; an unknown or missing kind, or a body that does not
    /// match its kind, is an error naming what was expected.
    pub fn decode(payload: &[u8]) -> Result<Self, String> {
        #[derive(Deserialize)]
        struct Kind {
            kind: Option<String>,
        }
        let kind = serde_json::from_slice::<Kind>(payload)
            .ok()
            .and_then(|k| k.kind);
        match kind.as_deref() {
            Some(FIRE_MISSED_KIND) => serde_json::from_slice(payload)
                .map(JobEvent::FireMissed)
                .map_err(|e| format!("not a fire.missed event: {e}")),
            _ => serde_json::from_slice(payload)
                .map(JobEvent::Rejected)
                .map_err(|e| format!("not a job.rejected event: {e}")),
        }
    }

    /// [`Self::decode`] of a message on `subject`, whose kind must be the
    /// subject's.
    pub fn decode_on(subject: &str, payload: &[u8]) -> Result<Self, String> {
        let event = Self::decode(payload)?;
        let expected = match &event {
            JobEvent::Rejected(_) => subjects::JOB_REJECTED_SUBJECT,
            JobEvent::FireMissed(_) => subjects::FIRE_MISSED_SUBJECT,
        };
        if subject != expected {
            return Err(format!(
                "a {} event belongs on {expected}, not {subject}",
                event.kind()
            ));
        }
        Ok(event)
    }

    fn kind(&self) -> &'static str {
        match self {
            JobEvent::Rejected(_) => JOB_REJECTED_KIND,
            JobEvent::FireMissed(_) => FIRE_MISSED_KIND,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-03-01T10:00:00Z")
            .expect("instant")
            .with_timezone(&Utc)
    }

    #[test]
    fn bucket_rejections_of_one_revision_share_an_id() {
        let at = at();
        let problem = || vec![FieldError::new("schedule", "required", "missing")];
        let a = JobRejected::from_kv("job-a", 7, b"{}", problem(), at);
        let b = JobRejected::from_kv("job-a", 7, b"{}", problem(), at);
        let c = JobRejected::from_kv("job-a", 8, b"{}", problem(), at);
        assert_eq!(a.event_id, b.event_id);
        assert_ne!(a.event_id, c.event_id);
    }

    #[test]
    fn api_rejections_keep_the_claimed_id_and_the_size_only() {
        let mut body = br#"{"id":"nightly","schedule":"nope","pad":""#.to_vec();
        body.extend(std::iter::repeat_n(b'x', 5000));
        body.extend(b"\"}");
        let event = JobRejected::from_api(&body, vec![], at());
        assert_eq!(event.job_id.as_deref(), Some("nightly"));
        assert_eq!(event.size, body.len() as u64);
        let encoded = serde_json::to_string(&event).expect("encode");
        assert!(
            !encoded.contains("xxxx"),
            "the value is not copied: {encoded}"
        );
        let garbage = JobRejected::from_api(&[0xff, 0xfe], vec![], at());
        assert_eq!(garbage.job_id, None);
    }

    #[test]
    fn a_missed_fire_is_named_by_its_run_and_decodes_by_kind() {
        let at = at();
        let grace = chrono::Duration::minutes(2);
        let first = FireMissed::new("nightly", at, at + grace, grace);
        let again = FireMissed::new("nightly", at, at + grace * 5, grace);
        assert_eq!(first.event_id, again.event_id);
        assert_eq!(
            first.event_id,
            format!("{}:fire.missed", RunId::for_fire("nightly", at).as_str())
        );

        let encoded = serde_json::to_vec(&first).expect("encode");
        assert_eq!(
            JobEvent::decode(&encoded),
            Ok(JobEvent::FireMissed(first.clone()))
        );
        let rejected = JobRejected::from_kv("nightly", 3, b"{}", vec![], at);
        let encoded = serde_json::to_vec(&rejected).expect("encode");
        assert_eq!(JobEvent::decode(&encoded), Ok(JobEvent::Rejected(rejected)));
        assert!(JobEvent::decode(br#"{"kind":"fire.missed"}"#)
            .is_err_and(|e| e.starts_with("not a fire.missed event")));
        assert!(JobEvent::decode(br#"{"kind":"job.rejected"}"#)
            .is_err_and(|e| e.starts_with("not a job.rejected event")));
    }
}
