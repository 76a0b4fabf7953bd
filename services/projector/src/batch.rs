//! One fetched batch: messages decoded into rows by subject, and what could
//! not be decoded.

use async_nats::jetstream::Message;
use jetcron_core::audit::JobChange;
use jetcron_core::events::RunEvent;
use jetcron_core::job_events::JobEvent;
use jetcron_core::subjects;
use jetcron_io::clickhouse_schema::{JobEventRow, RunEventRow};

/// A row for one of the two tables.
#[derive(Debug, Clone)]
pub enum Row {
    Run(Box<RunEventRow>),
    Job(Box<JobEventRow>),
}

/// What a message of `JETCRON_RUNS` is to the projector.
pub enum Decoded {
    Row(Row),
    /// A completion report of an asynchronous target: the executor records
    /// its result as the attempt's outcome event; nothing to store.
    Skip,
    /// Cannot be decoded: parked in the dead letter stream with this reason.
    Poison(String),
}

/// Decode one message: a revision of the jobs bucket, or one of
/// `JETCRON_RUNS` by its subject.
pub fn decode(message: &Message) -> Decoded {
    match message.subject.strip_prefix(JOB_REVISION_PREFIX) {
        Some(key) => revision(key, message),
        None => decode_run_stream(&message.subject, &message.payload),
    }
}

/// The subjects of the jobs bucket's revisions.
const JOB_REVISION_PREFIX: &str = "$KV.jetcron_jobs.";

/// Header of a KV delete or purge marker.
const KV_OPERATION: &str = "KV-Operation";

/// The audit row of revision `message` of job `key`: its author from its
/// headers ([`jetcron_core::audit`]).
fn revision(key: &str, message: &Message) -> Decoded {
    let Ok(info) = message.info() else {
        return Decoded::Poison("a job revision without its stream metadata".into());
    };
    let header = |name: &str| {
        message
            .headers
            .as_ref()
            .and_then(|h| h.get(name))
            .map(|v| v.as_str().to_string())
    };
    let at = info.published.with_timezone(&chrono::Utc);
    let change = JobChange {
        key: key.to_string(),
        revision: info.stream_sequence,
        at,
        deleted: header(KV_OPERATION).is_some_and(|op| op == "DEL" || op == "PURGE"),
        size: message.payload.len() as u64,
        author: jetcron_io::authors::author_in(message.headers.as_ref()),
    };
    Decoded::Row(Row::Job(Box::new(JobEventRow::from(&change))))
}

/// Decode one message of `JETCRON_RUNS` by its subject.
fn decode_run_stream(subject: &str, payload: &[u8]) -> Decoded {
    if subject
        .rsplit('.')
        .next()
        .is_some_and(|last| last == subjects::RUN_COMPLETE_TOKEN)
    {
        return Decoded::Skip;
    }
    // Job events (`job.rejected`, `fire.missed`) share one table.
    if subject == subjects::JOB_REJECTED_SUBJECT || subject == subjects::FIRE_MISSED_SUBJECT {
        return match JobEvent::decode_on(subject, payload) {
            Ok(event) => Decoded::Row(Row::Job(Box::new(JobEventRow::from(&event)))),
            Err(reason) => Decoded::Poison(reason),
        };
    }
    match serde_json::from_slice::<RunEvent>(payload) {
        Ok(event) => Decoded::Row(Row::Run(Box::new(RunEventRow::from(&event)))),
        Err(e) => Decoded::Poison(format!("not a run event: {e}")),
    }
}

/// Rows waiting for ClickHouse, each with its message (acked once stored).
#[derive(Default)]
pub struct Batch {
    pub entries: Vec<(Row, Message)>,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_told_apart_by_subject() {
        assert!(matches!(
            decode_run_stream("jetcron.runs.6a1c3f0e.complete", b"{}"),
            Decoded::Skip
        ));
        assert!(matches!(
            decode_run_stream("jetcron.runs.job.started", b"{not json"),
            Decoded::Poison(reason) if reason.starts_with("not a run event")
        ));
        assert!(matches!(
            decode_run_stream(subjects::JOB_REJECTED_SUBJECT, br#"{"kind":"job.rejected"}"#),
            Decoded::Poison(reason) if reason.starts_with("not a job.rejected event")
        ));
        let at = chrono::Utc::now();
        let missed =
            jetcron_core::job_events::FireMissed::new("j", at, at, chrono::Duration::zero());
        let payload = serde_json::to_vec(&missed).expect("encode");
        assert!(matches!(
            decode_run_stream(subjects::FIRE_MISSED_SUBJECT, &payload),
            Decoded::Row(Row::Job(row)) if row.kind == "fire.missed" && row.event_id == missed.event_id
        ));
        // A kind on another kind's subject is parked: a role that may record
        // rejections cannot record missed fires.
        assert!(matches!(
            decode_run_stream(subjects::JOB_REJECTED_SUBJECT, &payload),
            Decoded::Poison(reason) if reason.contains("belongs on jetcron.jobs.missed")
        ));
    }
}
