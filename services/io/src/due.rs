//! Publishing a due event: the one wire contract of `JETCRON_DUE`.
//!
//! Subject `jetcron.due.<pool>.<job>`, JSON body, header `Nats-Msg-Id` = run
//! id so that JetStream stores one event per run within its duplicate window.
//! The ticker (scheduled fires) and the gateway (manual runs, backfills) both
//! publish through here.
//!
//! A fire published ahead of its time (the ticker's `--lookahead`, so that a
//! leader election of `JETCRON_DUE` at the scheduled instant does not delay
//! it) carries [`FIRE_AT_HEADER`]: the executor that receives it holds it
//! until then. Without the header an event runs as soon as it is received.

use anyhow::Context as _;
use async_nats::jetstream::{self, context::PublishAckFuture};
use async_nats::HeaderMap;
use chrono::{DateTime, Utc};

use jetcron_core::events::{DueEvent, DueEventRef};
use jetcron_core::subjects;

/// Header of a due event published ahead of its time: the instant (Unix
/// milliseconds) before which no executor starts it.
pub const FIRE_AT_HEADER: &str = "Jetcron-Fire-At";

/// The instant a due event may start, from its headers (`None`: at once).
pub fn fire_at(headers: Option<&HeaderMap>) -> Option<DateTime<Utc>> {
    let value = headers?.get(FIRE_AT_HEADER)?;
    let millis: i64 = value.as_str().parse().ok()?;
    DateTime::from_timestamp_millis(millis)
}

/// Send `event` without waiting for JetStream's ack (await the returned
/// future); with `fire_at`, executors hold it until that instant.
pub async fn send_due_event(
    js: &jetstream::Context,
    event: DueEventRef<'_>,
    fire_at: Option<DateTime<Utc>>,
) -> anyhow::Result<PublishAckFuture> {
    let payload = serde_json::to_vec(&event).context("encode due event")?;
    let mut headers = HeaderMap::new();
    headers.insert(
        "Nats-Msg-Id",
        jetcron_core::events::due_msg_id(event.run_id, event.shard).as_str(),
    );
    if let Some(at) = fire_at {
        headers.insert(FIRE_AT_HEADER, at.timestamp_millis().to_string().as_str());
    }
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
    let ack = send_due_event(js, event.as_ref(), None)
        .await?
        .await
        .context("await due event ack")?;
    Ok(ack.duplicate)
}
