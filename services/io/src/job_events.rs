//! Publishing job events (`job.rejected`, `fire.missed`) with their ids as
//! `Nats-Msg-Id`, so a repeat within the duplicate window is stored once.
//! The events themselves are [`jetcron_core::job_events`].

use jetcron_core::job_events::{FireMissed, JobRejected};
use jetcron_core::subjects;

/// Publish `event` with its id as `Nats-Msg-Id` and wait for the stream's ack.
pub async fn publish(
    js: &async_nats::jetstream::Context,
    event: &JobRejected,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let payload = serde_json::to_vec(event).context("encode job.rejected")?;
    publish_job_event(js, subjects::JOB_REJECTED_SUBJECT, &event.event_id, payload)
        .await
        .context("publish job.rejected")?;
    Ok(())
}

/// Publish a missed fire like [`publish`]; true when the stream stored it,
/// false when it was a duplicate of one stored inside its duplicate window.
pub async fn publish_fire_missed(
    js: &async_nats::jetstream::Context,
    event: &FireMissed,
) -> anyhow::Result<bool> {
    use anyhow::Context as _;
    let payload = serde_json::to_vec(event).context("encode fire.missed")?;
    publish_job_event(js, subjects::FIRE_MISSED_SUBJECT, &event.event_id, payload)
        .await
        .context("publish fire.missed")
}

async fn publish_job_event(
    js: &async_nats::jetstream::Context,
    subject: &'static str,
    event_id: &str,
    payload: Vec<u8>,
) -> anyhow::Result<bool> {
    use anyhow::Context as _;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(async_nats::header::NATS_MESSAGE_ID, event_id);
    let ack = js
        .publish_with_headers(subject, headers, payload.into())
        .await?
        .await
        .context("store")?;
    Ok(!ack.duplicate)
}
