//! Storing a due event in `JETCRON_DUE`, exactly once per fire.
//!
//! The `Nats-Msg-Id` header is the run id, derived from (job id, scheduled
//! time): any publisher of the same fire (a retry, another replica) produces the
//! same id and JetStream keeps only the first within the duplicate window.

use async_nats::jetstream;
use jetcron_core::due;
use jetcron_core::events::{DueEvent, DueEventRef, RunId, Trigger};
use jetcron_core::subjects;
use tracing::debug;

use crate::plan::Fire;

/// Build the due event of a scheduled fire.
pub fn due_event(fire: &Fire) -> DueEvent {
    DueEvent {
        run_id: RunId::for_fire(&fire.job.spec.id, fire.scheduled_at),
        job_id: fire.job.spec.id.clone(),
        scheduled_at: fire.scheduled_at,
        trigger: Trigger::Schedule,
        pool: subjects::DEFAULT_POOL.to_string(),
        job_revision: fire.revision,
        job: fire.job.spec.clone(),
    }
}

/// Publish every fire without waiting, then collect the acks: one round trip
/// for the batch instead of one per fire. `true` where the event is stored
/// (or was already, as a duplicate).
pub async fn publish_batch(js: &jetstream::Context, fires: &[Fire]) -> Vec<bool> {
    let mut pending = Vec::with_capacity(fires.len());
    for fire in fires {
        let run_id = RunId::for_fire(&fire.job.spec.id, fire.scheduled_at);
        let event = DueEventRef {
            run_id: &run_id,
            job_id: &fire.job.spec.id,
            scheduled_at: fire.scheduled_at,
            trigger: Trigger::Schedule,
            pool: subjects::DEFAULT_POOL,
            job_revision: fire.revision,
            job: &fire.job.spec,
        };
        pending.push(due::send_due_event(js, event).await.ok());
    }
    let mut stored = Vec::with_capacity(fires.len());
    for ack in pending {
        stored.push(match ack {
            Some(ack) => ack.await.is_ok(),
            None => false,
        });
    }
    if tracing::enabled!(tracing::Level::DEBUG) {
        debug!(fires = fires.len(), "due batch published");
    }
    stored
}
