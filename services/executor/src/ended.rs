//! Whether a run already ended, read back from `JETCRON_RUNS`.
//!
//! A due event can reach an executor after its run ended: a consumer leader
//! that dies before it replicated an ack (or a delivery) hands the message
//! out again. Running it would call the target a second time. So on every
//! redelivery, and when the `started` event of an attempt turns out to be a
//! duplicate (another delivery started that very attempt), the executor
//! looks for a terminal event of the run (`succeeded`, `failed`,
//! `timed_out`, `killed`, `skipped`) among the job's run events stored since
//! the run was scheduled (or since that `started`), and settles the message
//! without running anything when there is one.
//!
//! This costs stream reads only on those rare paths; a first delivery that
//! starts normally reads nothing.

use async_nats::jetstream::{self, stream::Stream};
use chrono::{DateTime, Utc};
use jetcron_core::events::{RunEvent, RunEventKind};
use jetcron_core::subjects;
use serde::Deserialize;

/// Most run events of the job read before giving up (then: not ended).
const MAX_SCANNED: usize = 512;

/// Where to start looking.
#[derive(Debug, Clone, Copy)]
pub enum Since {
    /// The first event of the job stored at or after this instant.
    Time(DateTime<Utc>),
    /// The stream sequence of a known event of the run (its `started`).
    Sequence(u64),
}

/// The terminal event kind of `run_id` (and `shard`), if it has one.
pub async fn run_ended(
    js: &jetstream::Context,
    job_id: &str,
    run_id: &str,
    shard: Option<u32>,
    since: Since,
) -> anyhow::Result<Option<RunEventKind>> {
    let mut ended = None;
    scan(js, job_id, since, |event| {
        let found =
            event.run_id.as_str() == run_id && event.shard == shard && event.kind.is_terminal();
        if found {
            ended = Some(event.kind);
        }
        found
    })
    .await?;
    Ok(ended)
}

/// Every event of `run_id` (all shards) stored since `since`, in stream order.
pub async fn run_events(
    js: &jetstream::Context,
    job_id: &str,
    run_id: &str,
    since: Since,
) -> anyhow::Result<Vec<RunEvent>> {
    let mut events = Vec::new();
    scan(js, job_id, since, |event| {
        if event.run_id.as_str() == run_id {
            events.push(event);
        }
        false
    })
    .await?;
    Ok(events)
}

/// Hand `job_id`'s run events stored since `since` to `visit`, in stream
/// order, until it says stop (`true`), the stream ends or [`MAX_SCANNED`]
/// were read.
async fn scan(
    js: &jetstream::Context,
    job_id: &str,
    since: Since,
    mut visit: impl FnMut(RunEvent) -> bool,
) -> anyhow::Result<()> {
    let runs: Stream<()> = js.get_stream_no_info(subjects::RUNS_STREAM).await?;
    let filter = subjects::run_event_subject(job_id, "*");
    let mut next = match since {
        Since::Sequence(seq) => Some(seq),
        Since::Time(at) => first_at(js, &filter, at).await?,
    };
    let mut scanned = 0;
    while let Some(seq) = next {
        if scanned >= MAX_SCANNED {
            break;
        }
        let message = match runs
            .raw_message_builder()
            .sequence(seq)
            .next_by_subject(filter.clone())
            .send()
            .await
        {
            Ok(message) => message,
            Err(e) if e.kind() == jetstream::stream::RawMessageErrorKind::NoMessageFound => break,
            Err(e) => return Err(anyhow::Error::from(e).context("read run events")),
        };
        scanned += 1;
        next = Some(message.sequence + 1);
        let Ok(event) = serde_json::from_slice::<RunEvent>(&message.payload) else {
            continue;
        };
        if visit(event) {
            break;
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct GetReply {
    message: Option<RawSeq>,
}

#[derive(Deserialize)]
struct RawSeq {
    seq: u64,
}

/// Sequence of the first message on `filter` stored at or after `at`.
async fn first_at(
    js: &jetstream::Context,
    filter: &str,
    at: DateTime<Utc>,
) -> anyhow::Result<Option<u64>> {
    let request = serde_json::json!({
        "start_time": jetcron_core::time_format::rfc3339_millis(at),
        "next_by_subj": filter,
    });
    let reply: jetstream::response::Response<GetReply> = js
        .request(
            format!("STREAM.MSG.GET.{}", subjects::RUNS_STREAM),
            &request,
        )
        .await?;
    match reply {
        jetstream::response::Response::Ok(GetReply { message }) => Ok(message.map(|m| m.seq)),
        jetstream::response::Response::Err { error }
            if error.error_code() == jetstream::ErrorCode::NO_MESSAGE_FOUND =>
        {
            Ok(None)
        }
        jetstream::response::Response::Err { error } => {
            Err(anyhow::Error::from(error).context("find the run's first event"))
        }
    }
}
