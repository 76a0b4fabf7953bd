//! Publishing a due event: the one wire contract of `JETCRON_DUE`.
//!
//! Subject `jetcron.due.<pool>.<job>`, JSON body, header `Nats-Msg-Id` = run
//! id so that JetStream stores one event per run within its duplicate window.
//! The ticker (scheduled fires) and the gateway (manual runs, backfills) both
//! publish through here.

use anyhow::Context as _;
use async_nats::jetstream::{self, context::PublishAckFuture};
use async_nats::HeaderMap;

use crate::events::{DueEvent, DueEventRef};
use crate::subjects;

/// Send `event` without waiting for JetStream's ack (await the returned future).
pub async fn send_due_event(
    js: &jetstream::Context,
    event: DueEventRef<'_>,
) -> anyhow::Result<PublishAckFuture> {
    let payload = serde_json::to_vec(&event).context("encode due event")?;
    let mut headers = HeaderMap::new();
    headers.insert(
        "Nats-Msg-Id",
        crate::events::due_msg_id(event.run_id, event.shard).as_str(),
    );
    js.publish_with_headers(
        subjects::due_subject(event.pool, event.job_id),
        headers,
        payload.into(),
    )
    .await
    .context("publish due event")
}

/// Publish `event` and wait until it is stored; `true` when JetStream dropped
/// it as a duplicate of an earlier publish of the same run.
pub async fn publish_due_event(js: &jetstream::Context, event: &DueEvent) -> anyhow::Result<bool> {
    let ack = send_due_event(js, event.as_ref())
        .await?
        .await
        .context("await due event ack")?;
    Ok(ack.duplicate)
}
