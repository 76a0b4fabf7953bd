//! `job.rejected`: a definition that reached jetcron and was not applied.
//!
//! A refused `jetcron.api.jobs.put` with a reply subject answers the caller;
//! one sent with `nats pub` (no reply) or written straight into the
//! `jetcron_jobs` bucket has nobody to answer. Both are published as a
//! [`JobRejected`] event on [`subjects::JOB_REJECTED_SUBJECT`], stored in
//! `JETCRON_RUNS` next to the run events, so the projector writes them into
//! ClickHouse and the gateway and Grafana show them.
//!
//! Identity: a bucket value is rejected by every ticker replica, and again
//! whenever a watch reopens, so its `event_id` is derived from (key,
//! revision): JetStream drops repeats inside its duplicate window and the
//! ClickHouse table collapses the rest. An API rejection is one request: a
//! random id.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

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

/// Publish `event` with its id as `Nats-Msg-Id` and wait for the stream's ack.
pub async fn publish(
    js: &async_nats::jetstream::Context,
    event: &JobRejected,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let payload = serde_json::to_vec(event).context("encode job.rejected")?;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(async_nats::header::NATS_MESSAGE_ID, event.event_id.as_str());
    js.publish_with_headers(subjects::JOB_REJECTED_SUBJECT, headers, payload.into())
        .await
        .context("publish job.rejected")?
        .await
        .context("store job.rejected")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_rejections_of_one_revision_share_an_id() {
        let at = Utc::now();
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
        let event = JobRejected::from_api(&body, vec![], Utc::now());
        assert_eq!(event.job_id.as_deref(), Some("nightly"));
        assert_eq!(event.size, body.len() as u64);
        let encoded = serde_json::to_string(&event).expect("encode");
        assert!(
            !encoded.contains("xxxx"),
            "the value is not copied: {encoded}"
        );
        let garbage = JobRejected::from_api(&[0xff, 0xfe], vec![], Utc::now());
        assert_eq!(garbage.job_id, None);
    }
}
