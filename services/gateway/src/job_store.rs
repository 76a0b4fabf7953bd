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
    /// The bytes are stored as sent (re-encoding could change numbers or
    /// grow past the size limit), so the ticker reads exactly what was checked.
    pub async fn put(&self, body: &[u8]) -> Result<(JobSpec, u64), ApiError> {
        let job = parse_job(body, None).map_err(|problems| {
            // Not JSON at all is a malformed request; anything else names a field.
            let not_json = problems.len() == 1
                && problems[0].field.is_empty()
                && problems[0].code != "too_large";
            let mut error = ApiError::invalid_job(problems);
            if not_json {
                error.code = ErrorCode::InvalidRequest;
            }
            error
        })?;
        if job.next_scheduled(chrono::Utc::now()).is_none() {
            return Err(ApiError::invalid_job(vec![FieldError::new(
                "schedule",
                "never_fires",
                format!(
                    "{:?} has no fire time after now{}",
                    job.spec.schedule,
                    if job.end_at.is_some() {
                        " (check end_at)"
                    } else {
                        ""
                    }
                ),
            )]));
        }
        let revision = self
            .bucket
            .put(subjects::job_key(&job.spec.id), body.to_vec().into())
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

    /// Every current definition, ordered by id. A key that cannot be read
    /// (e.g. written with a raw publish under a name no job can have) is
    /// listed as invalid instead of failing the whole list.
    pub async fn list(&self) -> anyhow::Result<Vec<StoredJob>> {
        let mut keys: Vec<String> = match self.bucket.keys().await {
            Ok(keys) => keys.try_collect().await.context("list job keys")?,
            Err(e) => return Err(anyhow::Error::from(e).context("list job keys")),
        };
        keys.sort();
        let mut jobs = Vec::with_capacity(keys.len());
        for key in keys {
            match self.get(&key).await {
                Ok(Some((stored, _))) => jobs.push(stored),
                Ok(None) => {}
                Err(e) => jobs.push(StoredJob {
                    id: key,
                    revision: 0,
                    updated_at: String::new(),
                    job: None,
                    valid: false,
                    problems: vec![FieldError::new("id", "unreadable", format!("{e:#}"))],
                }),
            }
        }
        Ok(jobs)
    }
}
