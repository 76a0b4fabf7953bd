//! The definitions due events carry: in memory for the jobs that fire again
//! soon, read back from the bucket by revision for the rest.
//!
//! A due event carries its job's whole definition (the executor runs what
//! the event says), but the ticker holds a million jobs only in their small
//! form ([`crate::compact_job`]). So a definition stays in memory while its job
//! fires again within [`KEEP_FOR`] (every-second jobs never leave), and
//! a fire of any other job reads its revision back with one direct get on
//! the bucket's stream (a KV revision is the sequence of its message), a
//! daily job once a day, and a job read back after a start or a takeover
//! stays in memory from then on if it fires again soon. A revision gone
//! from the bucket's history is replaced by the key's current value; a key
//! whose current value is a delete has no fire. "Gone" is only ever the
//! stream leader's answer: a replica answering a direct get may lag.

use std::sync::Arc;

use async_nats::jetstream::stream::{
    DirectGetErrorKind, LastRawMessageErrorKind, RawMessageErrorKind, Stream,
};
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use hashbrown::HashMap;
use jetcron_core::job::{parse_job_with, JobSpec};
use jetcron_core::schedule::shared_lines::SharedLines;
use jetcron_core::subjects;
use jetcron_io::retry::LogLimiter;
use serde_json::value::RawValue;
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
    /// one when the fire's revision left the bucket's history), encoded.
    Definition { revision: u64, spec: EncodedSpec },
    /// The key holds no job any more: the fire has nothing to run.
    Gone,
    /// The bucket did not answer: offer the fire again later.
    Unreadable,
}

/// A job's definition as its due events carry it: the JSON of its
/// [`JobSpec`], encoded once and copied verbatim into every due event.
pub type EncodedSpec = Arc<RawValue>;

/// `spec` encoded for due events; `None` when it cannot be (a spec is plain
/// strings, numbers and maps: not expected).
pub fn encode(spec: &JobSpec) -> Option<EncodedSpec> {
    serde_json::value::to_raw_value(spec).ok().map(Arc::from)
}

pub struct Definitions {
    /// foldhash (hashbrown's default), not SipHash: it is looked up for
    /// every fire.
    hot: HashMap<Arc<str>, (u64, EncodedSpec)>,
    bucket_stream: Stream<()>,
    keep_for: chrono::Duration,
    /// Parses a read-back definition's line (shared with the watch).
    lines: SharedLines,
    unreadable_log: LogLimiter,
}

impl Definitions {
    /// Definitions read from `bucket_stream` (the jobs bucket's), kept for
    /// jobs that fire again within `keep_for`.
    pub fn new(
        bucket_stream: Stream<()>,
        keep_for: std::time::Duration,
        lines: SharedLines,
    ) -> Self {
        Self {
            hot: HashMap::new(),
            bucket_stream,
            keep_for: chrono::Duration::from_std(keep_for).unwrap_or(chrono::Duration::MAX),
            lines,
            unreadable_log: LogLimiter::per_10s(),
        }
    }

    fn soon(&self, next_fire: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
        next_fire.is_some_and(|at| at - now <= self.keep_for)
    }

    /// Keep `spec` (at `revision`, encoded) when the job fires again within the
    /// keeping time, else let it go.
    pub fn keep_if_soon(
        &mut self,
        id: &str,
        revision: u64,
        spec: &JobSpec,
        next_fire: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) {
        // Encoded only when kept: a cold start sees a million definitions
        // and keeps few of them.
        match self.soon(next_fire, now).then(|| encode(spec)).flatten() {
            Some(encoded) => self.hot.insert(Arc::from(id), (revision, encoded)),
            None => self.hot.remove(id),
        };
    }

    /// After a fire of `fire` resolved to `resolved`: keep its definition
    /// when the job fires again soon (so a job read back once, after a start
    /// or a takeover, is read no more), else let it go.
    pub fn settled(
        &mut self,
        fire: &Fire,
        resolved: &Resolved,
        next_fire: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) {
        if !self.soon(next_fire, now) {
            self.hot.remove(&fire.job.id);
            return;
        }
        let held = self
            .hot
            .get(&fire.job.id)
            .is_some_and(|(revision, _)| *revision == fire.job.revision);
        // Already held (every fire of an every-second job): nothing to do.
        if held {
            return;
        }
        if let Resolved::Definition { revision, spec } = resolved {
            if *revision == fire.job.revision {
                self.hot
                    .insert(Arc::clone(&fire.job.id), (*revision, Arc::clone(spec)));
            }
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
    /// revision is held, else read back from the bucket (concurrently, each
    /// (job, revision) once per batch).
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
        let mut wanted: HashMap<(Arc<str>, u64), usize> = HashMap::new();
        for (i, fire) in fires.iter().enumerate() {
            if resolved[i].is_none() {
                wanted
                    .entry((Arc::clone(&fire.job.id), fire.job.revision))
                    .or_insert(i);
            }
        }
        if wanted.is_empty() {
            return resolved.into_iter().flatten().collect();
        }
        let (stream, lines) = (&self.bucket_stream, &self.lines);
        let read: HashMap<(Arc<str>, u64), Resolved> = futures::stream::iter(wanted)
            .map(|(key, i)| async move { (key, read_back(stream, lines, &fires[i]).await) })
            .buffer_unordered(READS_IN_FLIGHT)
            .collect()
            .await;
        metrics::counter!("jetcron_ticker_definition_reads_total").increment(read.len() as u64);
        let unreadable = read
            .values()
            .filter(|r| matches!(r, Resolved::Unreadable))
            .count();
        if unreadable > 0 {
            if let Some(times) = self.unreadable_log.admit() {
                warn!(
                    unreadable,
                    times, "cannot read the definitions of fires back from the bucket, retrying"
                );
            }
        }
        for (i, fire) in fires.iter().enumerate() {
            if resolved[i].is_none() {
                resolved[i] = read
                    .get(&(Arc::clone(&fire.job.id), fire.job.revision))
                    .cloned();
            }
        }
        resolved
            .into_iter()
            .map(|r| r.unwrap_or(Resolved::Unreadable))
            .collect()
    }
}

/// The definition of `fire` from the bucket. A direct get (any replica)
/// by the fire's revision first; when that finds nothing (the revision
/// left the history, or the answering replica lags), the stream's leader
/// is asked, by revision and then for the key's current value, so that
/// "no such job" is never a lagging replica's word.
async fn read_back(stream: &Stream<()>, lines: &SharedLines, fire: &Fire) -> Resolved {
    let id: &str = &fire.job.id;
    let subject = format!("$KV.{}.{id}", subjects::JOBS_BUCKET);
    match stream.direct_get(fire.job.revision).await {
        Ok(message) if message.subject.as_str() == subject => {
            return definition_of(id, message.sequence, &message.payload, lines);
        }
        Ok(_) => {}
        Err(e) if matches!(e.kind(), DirectGetErrorKind::NotFound) => {}
        Err(e) => {
            debug!(job_id = %id, revision = fire.job.revision, error = %e, "direct get of a definition failed");
            return Resolved::Unreadable;
        }
    }
    match stream.get_raw_message(fire.job.revision).await {
        Ok(message) if message.subject.as_str() == subject => {
            return definition_of(id, message.sequence, &message.payload, lines);
        }
        Ok(_) => {}
        Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => {}
        Err(e) => {
            debug!(job_id = %id, revision = fire.job.revision, error = %e, "leader get of a definition failed");
            return Resolved::Unreadable;
        }
    }
    match stream.get_last_raw_message_by_subject(&subject).await {
        Ok(message) => {
            let operation = message
                .headers
                .get("KV-Operation")
                .map(|v| v.as_str().to_string());
            if operation.is_some_and(|op| op == "DEL" || op == "PURGE") {
                debug!(job_id = %id, "job deleted before its fire was published");
                return Resolved::Gone;
            }
            definition_of(id, message.sequence, &message.payload, lines)
        }
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Resolved::Gone,
        Err(e) => {
            debug!(job_id = %id, error = %e, "leader get of a current definition failed");
            Resolved::Unreadable
        }
    }
}

fn definition_of(id: &str, revision: u64, payload: &[u8], lines: &SharedLines) -> Resolved {
    match parse_job_with(payload, Some(id), &mut |line| lines.parse(line)) {
        Ok(job) => match encode(&job.spec) {
            Some(spec) => Resolved::Definition { revision, spec },
            None => {
                // Not expected (a spec is strings, numbers and maps); said
                // aloud, since the fire is dropped.
                warn!(job_id = %id, revision, "definition cannot be encoded, fire dropped");
                Resolved::Gone
            }
        },
        // The watch replaces an invalid value with "no job" too.
        Err(_) => Resolved::Gone,
    }
}
