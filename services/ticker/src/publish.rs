//! Storing a due event in `JETCRON_DUE`, exactly once per fire.
//!
//! The `Nats-Msg-Id` header is the run id, derived from (job id, scheduled
//! time): any publisher of the same fire (a retry, another replica) produces the
//! same id and JetStream keeps only the first within the duplicate window.

use anyhow::Context as _;
use async_nats::jetstream;
use async_nats::HeaderMap;
use jetcron_core::events::{DueEvent, RunId, Trigger};
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

/// Publish `fire` and wait until JetStream stored it (or dropped it as a duplicate).
pub async fn publish_due(js: &jetstream::Context, fire: &Fire) -> anyhow::Result<()> {
    publish_event(js, &due_event(fire)).await
}

/// Publish every fire without waiting, then collect the acks: one round trip
/// for the batch instead of one per fire. `true` where the event is stored
/// (or was already, as a duplicate).
pub async fn publish_batch(js: &jetstream::Context, fires: &[Fire]) -> Vec<bool> {
    let mut pending = Vec::with_capacity(fires.len());
    for fire in fires {
        let event = due_event(fire);
        let sent = match serde_json::to_vec(&event) {
            Ok(payload) => {
                let mut headers = HeaderMap::new();
                headers.insert("Nats-Msg-Id", event.run_id.as_str());
                js.publish_with_headers(
                    subjects::due_subject(&event.pool, &event.job_id),
                    headers,
                    payload.into(),
                )
                .await
                .ok()
            }
            Err(_) => None,
        };
        pending.push(sent);
    }
    let mut stored = Vec::with_capacity(fires.len());
    for ack in pending {
        stored.push(match ack {
            Some(ack) => ack.await.is_ok(),
            None => false,
        });
    }
    stored
}

/// Publish a due event with its dedup header and wait for the stream's ack.
pub async fn publish_event(js: &jetstream::Context, event: &DueEvent) -> anyhow::Result<()> {
    let payload = serde_json::to_vec(event).context("encode due event")?;
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", event.run_id.as_str());
    let ack = js
        .publish_with_headers(
            subjects::due_subject(&event.pool, &event.job_id),
            headers,
            payload.into(),
        )
        .await
        .context("publish due event")?
        .await
        .context("await due event ack")?;
    debug!(
        job_id = %event.job_id,
        run_id = %event.run_id,
        scheduled_at = %jetcron_core::time_format::rfc3339_millis(event.scheduled_at),
        duplicate = ack.duplicate,
        seq = ack.sequence,
        "due event stored"
    );
    Ok(())
}
