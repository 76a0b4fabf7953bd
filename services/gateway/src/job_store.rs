//! Reading and writing definitions in `jetcron_jobs`.

use anyhow::Context as _;
use async_nats::jetstream::kv::{self, Operation};
use futures::TryStreamExt as _;
use jetcron_core::api::{ApiError, ErrorCode};
use jetcron_core::job::{parse_job, FieldError, JobSpec, ValidJob};
use jetcron_core::subjects;
use serde::Serialize;

/// A stored definition as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct StoredJob {
    pub id: String,
    pub revision: u64,
    /// When this revision was written.
    pub updated_at: String,
    /// The definition, when it parses as JSON.
    pub job: Option<serde_json::Value>,
    /// Whether the definition validates (only valid ones are scheduled).
    pub valid: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<FieldError>,
}

impl StoredJob {
    fn from_entry(entry: kv::Entry) -> (Self, Option<ValidJob>) {
        let parsed = parse_job(&entry.value, Some(&entry.key));
        let (valid, problems) = match &parsed {
            Ok(_) => (true, Vec::new()),
            Err(p) => (false, p.clone()),
        };
        let stored = StoredJob {
            id: entry.key,
            revision: entry.revision,
            updated_at: jetcron_core::time_format::rfc3339_millis(entry.created),
            job: serde_json::from_slice(&entry.value).ok(),
            valid,
            problems,
        };
        (stored, parsed.ok())
    }
}

/// The job bucket, with the API's operations on it.
#[derive(Clone)]
pub struct JobStore {
    bucket: kv::Store,
}

impl JobStore {
    pub fn new(bucket: kv::Store) -> Self {
        Self { bucket }
    }

    /// Validate and store a definition; returns it and its new revision.
    pub async fn put(&self, body: &[u8]) -> Result<(JobSpec, u64), ApiError> {
        let job = parse_job(body, None).map_err(ApiError::invalid_job)?;
        let canonical = serde_json::to_vec(&job.spec)
            .map_err(|e| ApiError::new(ErrorCode::Internal, format!("encode job: {e}")))?;
        let revision = self
            .bucket
            .put(subjects::job_key(&job.spec.id), canonical.into())
            .await
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::Unavailable,
                    format!("cannot store job in {}: {e}", subjects::JOBS_BUCKET),
                )
            })?;
        Ok((job.spec, revision))
    }

    /// The current definition of `id`, with its parsed form when valid.
    pub async fn get(&self, id: &str) -> anyhow::Result<Option<(StoredJob, Option<ValidJob>)>> {
        let entry = self
            .bucket
            .entry(subjects::job_key(id))
            .await
            .with_context(|| format!("read job {id}"))?;
        Ok(entry
            .filter(|e| e.operation == Operation::Put)
            .map(StoredJob::from_entry))
    }

    /// Every current definition, ordered by id.
    pub async fn list(&self) -> anyhow::Result<Vec<StoredJob>> {
        let mut keys: Vec<String> = match self.bucket.keys().await {
            Ok(keys) => keys.try_collect().await.context("list job keys")?,
            Err(e) => return Err(anyhow::Error::from(e).context("list job keys")),
        };
        keys.sort();
        let mut jobs = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some((stored, _)) = self.get(&key).await? {
                jobs.push(stored);
            }
        }
        Ok(jobs)
    }
}
