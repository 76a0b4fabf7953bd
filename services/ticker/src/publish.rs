//! Storing a due event in `JETCRON_DUE`, exactly once per fire.
//!
//! The `Nats-Msg-Id` header is the run id, derived from (job id, scheduled
//! time): any publisher of the same fire (a retry, another replica) produces the
//! same id and JetStream keeps only the first within the duplicate window.
//!
//! A batch is sent without waiting, then its acks are awaited together under
//! one deadline: when the stream's leader dies, a batch costs one deadline,
//! not one ack timeout per fire, and the fires without an ack are offered
//! again (republished with the same `Nats-Msg-Id`, so a fire whose first
//! publish was stored after all is kept once).

use std::future::IntoFuture as _;
use std::time::Duration;

use async_nats::jetstream::{self, context::PublishAckFuture};
use futures::FutureExt as _;
use jetcron_core::events::{DueEventRef, JobRef, RunId, Trigger};
use jetcron_io::due;
use tracing::debug;

/// Longest wait for the acks of one batch. Acks come back in milliseconds
/// from a healthy stream; a stream without a leader answers "no responders"
/// at once or not at all, and waiting longer would only delay the retry.
pub const ACK_DEADLINE: Duration = Duration::from_secs(2);

use crate::definitions::Resolved;
use crate::plan::Fire;

/// Send every fire with the definition it resolved to, without waiting for
/// acks (await them with [`collect_acks`]). `None` where nothing was sent:
/// no definition, or the send itself failed. A fire sent before its time
/// (`now` earlier than its publish instant: the ticker's lookahead) tells
/// executors to hold it until then.
pub async fn send_batch(
    js: &jetstream::Context,
    fires: &[Fire],
    definitions: &[Resolved],
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<Option<PublishAckFuture>> {
    let mut pending = Vec::with_capacity(fires.len());
    for (fire, resolved) in fires.iter().zip(definitions) {
        let Resolved::Definition { revision, spec } = resolved else {
            pending.push(None);
            continue;
        };
        let run_id = RunId::for_fire(&fire.job.id, fire.scheduled_at);
        let event = DueEventRef {
            run_id: &run_id,
            job_id: &fire.job.id,
            scheduled_at: fire.scheduled_at,
            trigger: Trigger::Schedule,
            pool: &fire.job.pool,
            job_revision: *revision,
            job: JobRef::Encoded(spec),
            shard: None,
            parent: None,
        };
        let hold_until = (fire.fire_at > now).then_some(fire.fire_at);
        pending.push(due::send_due_event(js, event, hold_until).await.ok());
    }
    pending
}

/// Await the acks of a sent batch together, for at most `deadline`: `true`
/// where the event is stored (or was already, as a duplicate), `false` where
/// the send failed, the ack was an error, or it had not come by the deadline.
///
/// Awaited in order: one connection's acks come back in the order of its
/// publishes, so waiting for each in turn waits no longer than waiting for
/// all at once, and it costs a fire less than a `FuturesUnordered` of a
/// whole batch (its wake-ups were a twentieth of the ticker's CPU at
/// saturation). Once the deadline has passed, the acks still to come are
/// taken if one poll finds them there (tokio's cooperative budget may keep
/// a poll from seeing one that came: that fire is offered again, and its
/// second publish is dropped as a duplicate).
pub async fn collect_acks(pending: Vec<Option<PublishAckFuture>>, deadline: Duration) -> Vec<bool> {
    let until = tokio::time::Instant::now() + deadline;
    let mut stored = Vec::with_capacity(pending.len());
    for ack in pending {
        let ok = match ack {
            None => false,
            Some(ack) if tokio::time::Instant::now() < until => {
                matches!(tokio::time::timeout_at(until, ack).await, Ok(Ok(_)))
            }
            Some(ack) => matches!(ack.into_future().now_or_never(), Some(Ok(_))),
        };
        stored.push(ok);
    }
    debug!(
        fires = stored.len(),
        stored = stored.iter().filter(|ok| **ok).count(),
        "due batch settled"
    );
    stored
}
