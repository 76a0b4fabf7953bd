//! Storing a due event in `JETCRON_DUE`, exactly once per fire.
//!
//! The `Nats-Msg-Id` header is the run id, derived from (job id, scheduled
//! time): any publisher of the same fire (a retry, another replica) produces the
//! same id and JetStream keeps only the first within the duplicate window.

use async_nats::jetstream::{self, context::PublishAckFuture};
use jetcron_core::due;
use jetcron_core::events::{DueEventRef, RunId, Trigger};
use tracing::debug;

use crate::plan::Fire;

/// Send every fire without waiting for acks (await them with [`collect_acks`]).
/// `None` where the send itself failed.
pub async fn send_batch(js: &jetstream::Context, fires: &[Fire]) -> Vec<Option<PublishAckFuture>> {
    let mut pending = Vec::with_capacity(fires.len());
    for fire in fires {
        let run_id = RunId::for_fire(&fire.job.spec.id, fire.scheduled_at);
        let event = DueEventRef {
            run_id: &run_id,
            job_id: &fire.job.spec.id,
            scheduled_at: fire.scheduled_at,
            trigger: Trigger::Schedule,
            pool: &fire.job.pool,
            job_revision: fire.revision,
            job: &fire.job.spec,
            shard: None,
        };
        pending.push(due::send_due_event(js, event).await.ok());
    }
    pending
}

/// Await the acks of a sent batch: `true` where the event is stored (or was
/// already, as a duplicate).
pub async fn collect_acks(pending: Vec<Option<PublishAckFuture>>) -> Vec<bool> {
    let mut stored = Vec::with_capacity(pending.len());
    for ack in pending {
        stored.push(match ack {
            Some(ack) => ack.await.is_ok(),
            None => false,
        });
    }
    debug!(fires = stored.len(), "due batch acknowledged");
    stored
}
