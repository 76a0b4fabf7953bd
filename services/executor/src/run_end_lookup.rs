//! Whether a run already ended, read back from `JETCRON_RUNS`.
//!
//! A due event can reach an executor after its run ended: a consumer leader
//! that dies before it replicated an ack (or a delivery) hands the message
//! out again. Running it would call the target a second time. So on every
//! redelivery, and when the `started` event of an attempt turns out to be a
//! duplicate (another delivery started that very attempt), the executor
//! looks for a terminal event of the run (`succeeded`, `failed`,
//! `timed_out`, `killed`, `skipped`) among the job's run events stored since
//! the run could start ([`Since::fire`]; or since that `started`), and
//! settles the message without running anything when there is one.
//!
//! This costs stream reads only on those rare paths; a first delivery that
//! starts normally reads nothing. The search reads every event of the job
//! from the run's start to the end of the stream, however many: the first
//! few one request each, the rest through one consumer
//! ([`jetcron_io::stream_pass`]). A busy job's end can lie thousands of
//! events after its start (a backfilled run, or long runs of a job firing
//! every second), and a search that stopped early would call its target
//! again.

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::DeliverPolicy, stream::Stream};
use chrono::{DateTime, Utc};
use jetcron_core::events::{RunEvent, RunEventKind};
use jetcron_core::subjects;
use jetcron_io::stream_pass::{PassOf, StreamPass};
use serde::Deserialize;

/// Run events read by one request each before the rest is read through a
/// [`StreamPass`]: most ends are found among the first few events, and a
/// pass's consumer costs requests of its own to make.
const READ_ONE_BY_ONE: usize = 32;

/// How far server clocks may be apart: a run's events are looked for from
/// this long before its due event was stored (by the `JETCRON_DUE` leader's
/// clock; `JETCRON_RUNS` may have another leader).
const CLOCK_SKEW: chrono::Duration = chrono::Duration::seconds(2);

/// Where to start looking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// The first event of the job stored at or after this instant.
    Time(DateTime<Utc>),
    /// The stream sequence of a known event of the run (its `started`).
    Sequence(u64),
}

impl Since {
    /// Where the events of a fire scheduled at `scheduled_at` can start,
    /// the due event in hand stored at `due_stored_at` (unknown: its
    /// scheduled time). A run's first step follows its first due event
    /// (stored at its time, or ahead of it), but the one in hand may be a
    /// later copy (the same fire stored again under another message id,
    /// after the due stream's duplicate window): so the earlier of the two.
    /// No attempt records a step more than `earliest_step` before the
    /// scheduled time, however far ahead its due event was stored (a held
    /// fire records its start just before its instant): a search from the
    /// store of a fire held 10 s read 10 s more of the job's events, and
    /// after an executor's death the surviving one made a hundred of those
    /// at once (its fires a few seconds later for it). Less [`CLOCK_SKEW`].
    /// A backfilled fire is searched from its time, however long ago: the
    /// search then reads that much of the job's history.
    pub fn fire(
        scheduled_at: DateTime<Utc>,
        due_stored_at: Option<DateTime<Utc>>,
        earliest_step: chrono::Duration,
    ) -> Self {
        let from = due_stored_at.map_or(scheduled_at, |stored| stored.min(scheduled_at));
        Since::Time(from.max(scheduled_at - earliest_step) - CLOCK_SKEW)
    }
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
    scan(js, job_id, since, |_, event| {
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

/// Every event of `run_id` (all shards) stored since `since` and up to
/// stream sequence `through` (`None`: to the stream's end), in stream order.
pub async fn run_events(
    js: &jetstream::Context,
    job_id: &str,
    run_id: &str,
    since: Since,
    through: Option<u64>,
) -> anyhow::Result<Vec<RunEvent>> {
    let mut events = Vec::new();
    scan(js, job_id, since, |sequence, event| {
        if through.is_some_and(|last| sequence > last) {
            return true;
        }
        if event.run_id.as_str() == run_id {
            events.push(event);
        }
        false
    })
    .await?;
    Ok(events)
}

/// Hand `job_id`'s run events stored since `since` to `visit` with their
/// stream sequences, in stream order, until it says stop (`true`) or the
/// stream's end, however many (a busy job's end may lie thousands of events
/// after its start).
async fn scan(
    js: &jetstream::Context,
    job_id: &str,
    since: Since,
    mut visit: impl FnMut(u64, RunEvent) -> bool,
) -> anyhow::Result<()> {
    let runs: Stream<()> = js.get_stream_no_info(subjects::RUNS_STREAM).await?;
    let filter = subjects::run_event_subject(job_id, "*");
    let mut next = match since {
        Since::Sequence(seq) => Some(seq),
        Since::Time(at) => first_at(js, &filter, at).await?,
    };
    for _ in 0..READ_ONE_BY_ONE {
        let Some(seq) = next else {
            return Ok(());
        };
        let message = match runs
            .raw_message_builder()
            .sequence(seq)
            .next_by_subject(filter.clone())
            .send()
            .await
        {
            Ok(message) => message,
            Err(e) if e.kind() == jetstream::stream::RawMessageErrorKind::NoMessageFound => {
                return Ok(())
            }
            Err(e) => return Err(anyhow::Error::from(e).context("read run events")),
        };
        next = Some(message.sequence + 1);
        if serde_json::from_slice::<RunEvent>(&message.payload)
            .is_ok_and(|event| visit(message.sequence, event))
        {
            return Ok(());
        }
    }
    let Some(start_sequence) = next else {
        return Ok(());
    };
    let mut rest = StreamPass::open(
        subjects::RUNS_STREAM,
        js,
        PassOf {
            filter_subject: filter,
            deliver_policy: DeliverPolicy::ByStartSequence { start_sequence },
            description: "executor: a job's run events (did a run end?)".into(),
        },
    )
    .await
    .context("read the rest of the job's run events")?;
    while let Some(read) = rest.next_message().await? {
        if serde_json::from_slice::<RunEvent>(&read.message.payload)
            .is_ok_and(|event| visit(read.stream_sequence, event))
        {
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone as _;

    #[test]
    fn a_fire_is_searched_from_the_earlier_of_its_time_and_its_due_event() {
        let at = Utc
            .with_ymd_and_hms(2026, 3, 1, 12, 0, 0)
            .single()
            .expect("t");
        let skew = CLOCK_SKEW;
        let step = chrono::Duration::milliseconds(600);
        // Stored ahead of its time (lookahead): from its earliest step.
        let ahead = at - chrono::Duration::seconds(5);
        assert_eq!(
            Since::fire(at, Some(ahead), step),
            Since::Time(at - step - skew)
        );
        let just_ahead = at - chrono::Duration::milliseconds(300);
        assert_eq!(
            Since::fire(at, Some(just_ahead), step),
            Since::Time(just_ahead - skew)
        );
        // A backfilled fire, stored days after its time.
        let later = at + chrono::Duration::days(3);
        assert_eq!(Since::fire(at, Some(later), step), Since::Time(at - skew));
        assert_eq!(Since::fire(at, None, step), Since::Time(at - skew));
    }
}
