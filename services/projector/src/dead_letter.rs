//! Parking what the projector cannot store.
//!
//! An event that does not decode, or that ClickHouse refuses on its own, is
//! republished as is on `jetcron.deadletter.<original subject>` (stream
//! `JETCRON_DEADLETTER`, kept 30 days) with headers saying why, where it came
//! from and which stream sequence it had, then terminated in `JETCRON_RUNS`:
//! counted and kept for a person to look at, not retried forever. Inspect
//! with `nats stream view JETCRON_DEADLETTER`; once fixed, republish the
//! payload to its original subject.

use anyhow::Context as _;
use async_nats::jetstream::{self, message::AckKind, Message};
use jetcron_core::subjects;

/// Header: why the event was parked.
pub const REASON_HEADER: &str = "Jetcron-Dead-Letter-Reason";
/// Header: the subject it was published on.
pub const SUBJECT_HEADER: &str = "Jetcron-Original-Subject";
/// Header: its sequence in `JETCRON_RUNS`.
pub const SEQUENCE_HEADER: &str = "Jetcron-Original-Sequence";

/// Park `message` with `reason`, then terminate it. A message that cannot be
/// parked is left unacked, so it comes back rather than being lost.
pub async fn park(js: &jetstream::Context, message: &Message, reason: &str) -> anyhow::Result<()> {
    let sequence = message
        .info()
        .map(|i| i.stream_sequence.to_string())
        .unwrap_or_default();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(
        REASON_HEADER,
        jetcron_core::api::header_safe(reason).as_str(),
    );
    headers.insert(SUBJECT_HEADER, message.subject.as_str());
    headers.insert(SEQUENCE_HEADER, sequence.as_str());
    // One parked copy per original message, however often this is retried.
    headers.insert(
        async_nats::header::NATS_MESSAGE_ID,
        format!("{}:{sequence}", subjects::RUNS_STREAM).as_str(),
    );
    js.publish_with_headers(
        subjects::dead_letter_subject(&message.subject),
        headers,
        message.payload.clone(),
    )
    .await
    .context("publish to the dead letter stream")?
    .await
    .context("store in the dead letter stream")?;
    message
        .ack_with(AckKind::Term)
        .await
        .map_err(|e| anyhow::anyhow!("terminate parked event: {e}"))
}
