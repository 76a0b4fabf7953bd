//! The definitions due events carry: in memory for the jobs that fire again
//! soon, read back from the bucket by revision for the rest.
//!
//! A due event carries its job's whole definition (the executor runs what
//! the event says), but the ticker holds a million jobs only in their small
//! form ([`crate::held_job`]). So a definition stays in memory while its job
//! fires again within [`KEEP_FOR`] (every-second jobs never leave), and
//! a fire of any other job reads its revision back with one direct get on
//! the bucket's stream (a KV revision is the sequence of its message), a
//! daily job once a day. A revision gone from the bucket's history is
//! replaced by the key's current value; a key deleted since has no fire.

use std::collections::HashMap;
use std::sync::Arc;

use async_nats::jetstream::stream::{DirectGetErrorKind, Stream};
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use jetcron_core::job::{parse_job, JobSpec};
use jetcron_core::subjects;
use tracing::{debug, warn};

use crate::plan::Fire;

/// Default of how soon a job must fire again to keep its definition in memory.
pub const KEEP_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// Direct gets in flight at once while resolving a batch.
const READS_IN_FLIGHT: usize = 64;

/// What a fire's due event carries, once resolved.
#[derive(Debug, Clone)]
pub enum Resolved {
    /// The definition at `revision` (the fire's own, or the key's current
    /// one when the fire's revision left the bucket's history).
    Definition { revision: u64, spec: Arc<JobSpec> },
    /// The key holds no job any more: the fire has nothing to run.
    Gone,
    /// The bucket did not answer: offer the fire again later.
    Unreadable,
}

pub struct Definitions {
    hot: HashMap<Arc<str>, (u64, Arc<JobSpec>)>,
    bucket_stream: Stream,
    keep_for: chrono::Duration,
}

impl Definitions {
    /// Definitions read from `bucket_stream` (the jobs bucket's), kept for
    /// jobs that fire again within `keep_for`.
    pub fn new(bucket_stream: Stream, keep_for: std::time::Duration) -> Self {
        Self {
            hot: HashMap::new(),
            bucket_stream,
            keep_for: chrono::Duration::from_std(keep_for).unwrap_or(chrono::Duration::MAX),
        }
    }

    fn soon(&self, next_fire: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
        next_fire.is_some_and(|at| at - now <= self.keep_for)
    }

    /// Keep `spec` (at `revision`) when the job fires again within the
    /// keeping time, else let it go.
    pub fn keep_if_soon(
        &mut self,
        id: &Arc<str>,
        revision: u64,
        spec: Arc<JobSpec>,
        next_fire: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) {
        if self.soon(next_fire, now) {
            self.hot.insert(Arc::clone(id), (revision, spec));
        } else {
            self.hot.remove(id);
        }
    }

    /// After a fire: let the definition go unless the job fires again soon.
    pub fn settled(&mut self, id: &str, next_fire: Option<DateTime<Utc>>, now: DateTime<Utc>) {
        if !self.soon(next_fire, now) {
            self.hot.remove(id);
        }
    }

    pub fn forget(&mut self, id: &str) {
        self.hot.remove(id);
    }

    /// Definitions held in memory.
    pub fn len(&self) -> usize {
        self.hot.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hot.is_empty()
    }

    /// What each fire's due event carries, in order: from memory when the
    /// revision is held, else read back from the bucket (concurrently).
    pub async fn resolve(&mut self, fires: &[Fire]) -> Vec<Resolved> {
        let mut resolved: Vec<Option<Resolved>> = fires
            .iter()
            .map(|fire| {
                self.hot
                    .get(&fire.job.id)
                    .filter(|(revision, _)| *revision == fire.job.revision)
                    .map(|(revision, spec)| Resolved::Definition {
                        revision: *revision,
                        spec: Arc::clone(spec),
                    })
            })
            .collect();
        let missing: Vec<usize> = (0..fires.len())
            .filter(|i| resolved[*i].is_none())
            .collect();
        if missing.is_empty() {
            return resolved.into_iter().flatten().collect();
        }
        let stream = &self.bucket_stream;
        let read: Vec<(usize, Resolved)> = futures::stream::iter(missing)
            .map(|i| async move { (i, read_back(stream, &fires[i]).await) })
            .buffer_unordered(READS_IN_FLIGHT)
            .collect()
            .await;
        metrics::counter!("jetcron_ticker_definition_reads_total").increment(read.len() as u64);
        for (i, answer) in read {
            resolved[i] = Some(answer);
        }
        resolved
            .into_iter()
            .map(|r| r.unwrap_or(Resolved::Unreadable))
            .collect()
    }
}

/// The definition of `fire` from the bucket: its revision, or the key's
/// current value when that revision is no longer kept.
async fn read_back(stream: &Stream, fire: &Fire) -> Resolved {
    let id: &str = &fire.job.id;
    match stream.direct_get(fire.job.revision).await {
        Ok(message) => return definition_of(id, message.sequence, &message.payload),
        Err(e) if matches!(e.kind(), DirectGetErrorKind::NotFound) => {}
        Err(e) => {
            warn!(job_id = %id, revision = fire.job.revision, error = %e, "cannot read the definition of a fire, retrying");
            return Resolved::Unreadable;
        }
    }
    let subject = format!("$KV.{}.{id}", subjects::JOBS_BUCKET);
    match stream.direct_get_last_for_subject(subject).await {
        Ok(message) => {
            let operation = message
                .headers
                .get("KV-Operation")
                .map(|v| v.as_str().to_string());
            if operation.is_some_and(|op| op == "DEL" || op == "PURGE") {
                debug!(job_id = %id, "job deleted before its fire was published");
                return Resolved::Gone;
            }
            definition_of(id, message.sequence, &message.payload)
        }
        Err(e) if matches!(e.kind(), DirectGetErrorKind::NotFound) => Resolved::Gone,
        Err(e) => {
            warn!(job_id = %id, error = %e, "cannot read the definition of a fire, retrying");
            Resolved::Unreadable
        }
    }
}

fn definition_of(id: &str, revision: u64, payload: &[u8]) -> Resolved {
    match parse_job(payload, Some(id)) {
        Ok(job) => Resolved::Definition {
            revision,
            spec: Arc::new(job.spec),
        },
        // The watch replaces an invalid value with "no job" too.
        Err(_) => Resolved::Gone,
    }
}
