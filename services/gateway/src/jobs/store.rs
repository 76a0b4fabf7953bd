//! Reading and writing definitions in `jetcron_jobs`.

use anyhow::Context as _;
use async_nats::jetstream::kv::{self, Operation};
use futures::{StreamExt as _, TryStreamExt as _};
use jetcron_core::access::Role;
use jetcron_core::api::ApiError;
use jetcron_core::audit::Author;
use jetcron_core::chain;
use jetcron_core::job::namespace_of;
use jetcron_core::job::{
    mentions_redacted, parse_written, restore_redacted, validate_job_name, FieldError, JobSpec,
    ValidJob,
};
use jetcron_core::subjects;
use jetcron_io::authors;
use jetcron_io::policy_book::PolicyBook;
use serde::Serialize;
use std::sync::Arc;

use crate::audited::{AuditedWrites, WriteError};
use crate::caller::Caller;
use crate::jobs::catalog::{count_keys, JobCatalog};
use crate::jobs::pass::JobPass;
use crate::jobs::stored::{Revision, StoredJob};
use crate::request_body::split_expected_revision;

/// `put`: a definition as sent; `key`, the id named by the HTTP path (the
/// body may then leave it out); `expected_revision`, a compare-and-swap
/// given outside the body (HTTP `If-Match`, `If-None-Match: *` as 0).
#[derive(Debug, Default)]
pub struct PutJob {
    pub definition: Vec<u8>,
    pub key: Option<String>,
    pub expected_revision: Option<u64>,
}

/// The answer of `put`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PutReply {
    pub ok: bool,
    pub job: JobSpec,
    pub revision: u64,
    pub created: bool,
}

/// The job bucket, with the API's operations on it.
#[derive(Clone)]
pub struct JobStore {
    bucket: kv::Store,
    /// Every write, with its author's headers.
    writes: AuditedWrites,
    catalog: JobCatalog,
    max_jobs: usize,
    lines: jetcron_core::schedule_lines::SharedLines,
    /// The namespaces' target policies, a put is checked against.
    policies: Arc<PolicyBook>,
}

impl JobStore {
    /// `catalog` must be following `bucket` ([`JobCatalog::follow`]).
    /// `lines`: the process's parsed schedule lines, for passes.
    pub fn new(
        bucket: kv::Store,
        js: async_nats::jetstream::Context,
        catalog: JobCatalog,
        max_jobs: usize,
        lines: jetcron_core::schedule_lines::SharedLines,
        policies: Arc<PolicyBook>,
    ) -> Self {
        Self {
            writes: AuditedWrites::new(bucket.clone(), js),
            bucket,
            catalog,
            max_jobs,
            lines,
            policies,
        }
    }

    /// Refuse to create job `id` when the bucket holds `max_jobs` already.
    /// Refuse a new job beyond `max_jobs`; whether `id` exists already.
    async fn check_room_for(&self, id: &str) -> Result<bool, ApiError> {
        let key = subjects::job_key(id);
        let (exists, count) = match self.catalog.lookup(key) {
            Some(known) => known,
            None => count_keys(&self.bucket, key)
                .await
                .map_err(ApiError::unavailable)?,
        };
        if !exists && count >= self.max_jobs {
            return Err(ApiError::limit_exceeded(
                "id",
                format!(
                    "the bucket holds {count} jobs, the limit is {} (gateway --max-jobs): delete jobs or raise the limit",
                    self.max_jobs
                ),
            ));
        }
        Ok(exists)
    }

    /// `put`: store a definition written at `now`; answers the job, its new
    /// revision, and whether it is new (as the bucket was just before the
    /// write).
    ///
    /// The bytes are stored as sent (re-encoding could change numbers or
    /// grow past the size limit), so the ticker reads exactly what was checked.
    /// A top-level `expected_revision` makes the write a compare-and-swap
    /// (0: the job must not exist yet); it is taken out of the stored
    /// definition, which is then the re-encoded rest.
    pub async fn put(
        &self,
        caller: &Caller,
        request: PutJob,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<PutReply, ApiError> {
        let (stored, in_body) = split_expected_revision(&request.definition)?;
        let expected_revision = request.expected_revision.or(in_body);
        let body = stored.as_deref().unwrap_or(&request.definition);
        let restored = self
            .restore_secrets(caller, body, request.key.as_deref())
            .await?;
        let body = restored.as_deref().unwrap_or(body);
        let job = parse_written(body, request.key.as_deref(), now).map_err(|problems| {
            // Not JSON at all is a malformed request; anything else names a field.
            let not_json = problems.len() == 1
                && problems[0].field.is_empty()
                && problems[0].code != "too_large";
            match not_json {
                true => ApiError::invalid_request(problems),
                false => ApiError::invalid_job(problems),
            }
        })?;
        caller
            .grants
            .require(Role::Editor, namespace_of(&job.spec.id))?;
        self.check_policy(&job).await?;
        self.check_no_cycle(&job)?;
        let mut existed = self.check_room_for(&job.spec.id).await?;
        let key = subjects::job_key(&job.spec.id);
        if !existed && expected_revision.is_none() {
            // This gateway's view lags its own writes by the watch's delay:
            // ask the bucket, so a put right after a create is no "create".
            existed = self
                .bucket
                .entry(key)
                .await
                .map_err(unavailable)?
                .is_some_and(|e| e.operation == Operation::Put);
        }
        let value: bytes::Bytes = body.to_vec().into();
        let written = value.clone();
        let author = caller.author();
        let id = &job.spec.id;
        let revision = match expected_revision {
            None => self.writes.put(key, value, &author).await,
            Some(0) => self.writes.create(key, value, &author).await,
            Some(expected) => self.writes.update(key, value, expected, &author).await,
        }
        .map_err(|e| match (e, expected_revision) {
            (WriteError::Exists, _) => conflict(id, 0, "it exists already"),
            (WriteError::WrongRevision, Some(0)) => conflict(id, 0, "it exists already"),
            (WriteError::WrongRevision, expected) => {
                conflict(id, expected.unwrap_or_default(), "it has changed since")
            }
            (WriteError::Unavailable(e), _) => unavailable(format!("{e:#}")),
        })?;
        self.catalog.note_put(key, revision, &written, now);
        // Whether it is new: exact for compare-and-swap writes; for plain
        // puts, as the bucket was just before (two writers racing on one
        // new id may both be told "created").
        let created = match expected_revision {
            Some(0) => true,
            Some(_) => false,
            None => !existed,
        };
        Ok(PutReply {
            ok: true,
            job: job.spec,
            revision,
            created,
        })
    }

    /// `body` with the stored secrets back in place of the placeholders of a
    /// redacted read ([`restore_redacted`]); `None` when it has none. The id
    /// is the body's, else the path's; a body that is not JSON or names no
    /// valid id is left for [`parse_written`] to refuse.
    async fn restore_secrets(
        &self,
        caller: &Caller,
        body: &[u8],
        key: Option<&str>,
    ) -> Result<Option<Vec<u8>>, ApiError> {
        if !mentions_redacted(body) {
            return Ok(None);
        }
        let Ok(mut incoming) = serde_json::from_slice::<serde_json::Value>(body) else {
            return Ok(None);
        };
        let id = match incoming.get("id").and_then(|n| n.as_str()).or(key) {
            Some(id) if validate_job_name("id", id).is_ok() => id.to_string(),
            _ => return Ok(None),
        };
        // Whether a secret of another team's job exists is theirs to know.
        caller.grants.require(Role::Editor, namespace_of(&id))?;
        let stored = self
            .bucket
            .entry(subjects::job_key(&id))
            .await
            .map_err(unavailable)?
            .filter(|e| e.operation == Operation::Put)
            .and_then(|e| serde_json::from_slice::<serde_json::Value>(&e.value).ok());
        restore_redacted(&mut incoming, stored.as_ref()).map_err(ApiError::invalid_job)?;
        serde_json::to_vec(&incoming)
            .map(Some)
            .map_err(|e| ApiError::internal("encode the job", e))
    }

    /// Refuse a definition its namespace's target policy does not allow,
    /// naming every refused field. Waits for this gateway's first read of
    /// the policies (at once after that).
    async fn check_policy(&self, job: &ValidJob) -> Result<(), ApiError> {
        self.policies.loaded().await;
        let refusals = self.policies.refusals(&job.spec);
        match refusals.is_empty() {
            true => Ok(()),
            false => Err(ApiError::invalid_job(refusals)),
        }
    }

    /// Refuse a definition whose `after` leads back to it through the
    /// other jobs' (as this gateway's catalog knows them), naming the cycle.
    fn check_no_cycle(&self, job: &ValidJob) -> Result<(), ApiError> {
        let id = &job.spec.id;
        let Some(cycle) = chain::find_cycle(id, &job.spec.after, &|j| self.catalog.parents_of(j))
        else {
            return Ok(());
        };
        let first = cycle.get(1).map(String::as_str).unwrap_or_default();
        let index = job
            .spec
            .after
            .iter()
            .position(|l| l.job == first)
            .unwrap_or_default();
        Err(ApiError::invalid_job(vec![FieldError::new(
            format!("after[{index}].job"),
            "cycle",
            format!(
                "would close the cycle {}: a run would start itself again without end",
                chain::cycle_text(&cycle)
            ),
        )]))
    }

    /// Delete `id` (a delete marker: the history stays); with
    /// `expected_revision`, only if that is still the current revision.
    /// Answers with the revision it had and the delete marker's revision.
    pub async fn delete(
        &self,
        caller: &Caller,
        id: &str,
        expected_revision: Option<u64>,
    ) -> Result<(u64, Option<u64>), ApiError> {
        let current = self
            .get(id)
            .await
            .map_err(ApiError::unavailable)?
            .ok_or_else(|| not_found(id))?
            .0
            .revision;
        let expected = expected_revision.unwrap_or(current);
        let marker = self
            .writes
            .delete(subjects::job_key(id), expected, &caller.author())
            .await
            .map_err(|e| match e {
                WriteError::Unavailable(e) => unavailable(format!("{e:#}")),
                WriteError::Exists | WriteError::WrongRevision => {
                    conflict(id, expected, "it has changed since")
                }
            })?;
        self.catalog.note_delete(subjects::job_key(id), marker);
        Ok((expected, Some(marker)))
    }

    /// Set `paused` on one stored definition by compare-and-swap; `None`
    /// when it already was in that state. `now` is when it is written.
    pub async fn set_paused(
        &self,
        caller: &Caller,
        id: &str,
        paused: bool,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<u64>, ApiError> {
        for _ in 0..8 {
            let entry = self
                .bucket
                .entry(subjects::job_key(id))
                .await
                .map_err(unavailable)?
                .filter(|e| e.operation == Operation::Put)
                .ok_or_else(|| not_found(id))?;
            let mut definition: serde_json::Map<String, serde_json::Value> =
                serde_json::from_slice(&entry.value).map_err(|_| {
                    ApiError::invalid_job(vec![FieldError::new(
                        "",
                        "invalid_json",
                        format!("the stored definition of {id:?} is not a JSON object"),
                    )])
                })?;
            let now_paused = definition
                .get("paused")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false);
            if now_paused == paused {
                return Ok(None);
            }
            if paused {
                definition.insert("paused".into(), serde_json::Value::Bool(true));
            } else {
                definition.remove("paused");
            }
            let bytes = serde_json::to_vec(&definition)
                .map_err(|e| ApiError::internal("encode the definition", e))?;
            let key = subjects::job_key(id);
            match self
                .writes
                .update(key, bytes.clone().into(), entry.revision, &caller.author())
                .await
            {
                Ok(revision) => {
                    self.catalog.note_put(key, revision, &bytes, now);
                    return Ok(Some(revision));
                }
                Err(WriteError::WrongRevision | WriteError::Exists) => continue,
                Err(WriteError::Unavailable(e)) => return Err(unavailable(format!("{e:#}"))),
            }
        }
        Err(conflict(id, 0, "it keeps changing"))
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

    /// The revisions of `id` the bucket keeps (its history setting), oldest
    /// first: what was written when, and deletes, each with its author
    /// (read from the headers of its message, [`jetcron_core::audit`]).
    pub async fn history(&self, id: &str) -> anyhow::Result<Vec<Revision>> {
        let mut entries = match self.bucket.history(subjects::job_key(id)).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == kv::WatchErrorKind::TimedOut => return Ok(Vec::new()),
            Err(e) => return Err(anyhow::Error::from(e).context(format!("read history of {id}"))),
        };
        let mut revisions = Vec::new();
        while let Some(entry) = entries
            .try_next()
            .await
            .with_context(|| format!("read history of {id}"))?
        {
            revisions.push(Revision::from_entry(entry));
        }
        let numbers: Vec<u64> = revisions.iter().map(|r| r.revision).collect();
        let authors: Vec<Option<Author>> = futures::stream::iter(numbers)
            .map(|revision| authors::author_of(&self.bucket, revision))
            .buffered(16)
            .collect()
            .await;
        for (revision, author) in revisions.iter_mut().zip(authors) {
            revision.author = author;
        }
        Ok(revisions)
    }

    /// One read of every current definition, a chunk at a time, on `js`'s
    /// connection ([`JobPass`]: nothing of it stays but the chunk in hand).
    pub async fn pass(&self, js: &async_nats::jetstream::Context) -> anyhow::Result<JobPass> {
        JobPass::open(&self.bucket, js, self.lines.clone())
            .await
            .context("read every job")
    }

    /// The valid current definitions of `namespace`'s jobs, in key order.
    pub async fn valid_in(&self, namespace: &str) -> anyhow::Result<Vec<ValidJob>> {
        let mut keys: Vec<String> = match self.bucket.keys().await {
            Ok(keys) => keys.try_collect().await.context("list job keys")?,
            Err(e) => return Err(anyhow::Error::from(e).context("list job keys")),
        };
        keys.retain(|key| namespace_of(key) == namespace);
        keys.sort();
        let mut jobs = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some((_, Some(job))) = self.get(&key).await? {
                jobs.push(job);
            }
        }
        Ok(jobs)
    }

    /// Every current definition, ordered by id ([`JobStore::read`] each).
    pub async fn list(&self) -> anyhow::Result<Vec<StoredJob>> {
        let mut jobs = Vec::new();
        for key in self.sorted_keys().await? {
            jobs.extend(self.read(&key).await);
        }
        Ok(jobs)
    }

    /// The ids of every current definition, in order.
    pub async fn sorted_keys(&self) -> anyhow::Result<Vec<String>> {
        let mut keys: Vec<String> = match self.bucket.keys().await {
            Ok(keys) => keys.try_collect().await.context("list job keys")?,
            Err(e) => return Err(anyhow::Error::from(e).context("list job keys")),
        };
        keys.sort();
        Ok(keys)
    }

    /// The definition under `key` as a list shows it, `None` when it was
    /// deleted since the keys were read. A key that cannot be read (e.g.
    /// written with a raw publish under a name no job can have) is listed as
    /// invalid instead of failing the whole list.
    pub async fn read(&self, key: &str) -> Option<StoredJob> {
        match self.get(key).await {
            Ok(Some((stored, _))) => Some(stored),
            Ok(None) => None,
            Err(e) => Some(StoredJob {
                id: key.to_string(),
                revision: 0,
                updated_at: String::new(),
                job: None,
                valid: false,
                problems: vec![FieldError::new("id", "unreadable", format!("{e:#}"))],
            }),
        }
    }
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::unavailable(format!("cannot update {}: {e}", subjects::JOBS_BUCKET))
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found("id", format!("no job {id:?}"))
}

fn conflict(id: &str, expected: u64, why: &str) -> ApiError {
    ApiError::conflict(
        "expected_revision",
        format!("job {id:?} is not at revision {expected}: {why}"),
    )
}
