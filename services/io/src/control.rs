//! Kill requests on the wire: the durable marker in `jetcron_running` and
//! the broadcast to the executors running the run (why both:
//! [`jetcron_core::control`]).

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::kv;
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use jetcron_core::control::{is_run_id, KillMarker, KillReply, MAX_REASON_BYTES};
use jetcron_core::subjects;

/// Record the kill of `run_id` and tell the executors running it; returns
/// the answers heard within `wait`.
pub async fn kill_run(
    client: &async_nats::Client,
    running: &kv::Store,
    run_id: &str,
    reason: &str,
    wait: Duration,
    now: DateTime<Utc>,
) -> anyhow::Result<Vec<KillReply>> {
    let marker = mark_killed(running, run_id, reason, now).await?;
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .context("subscribe to kill replies")?;
    client
        .publish_with_reply(
            subjects::kill_control_subject(run_id),
            inbox,
            serde_json::to_vec(&marker)?.into(),
        )
        .await
        .context("publish kill request")?;
    client.flush().await.context("flush kill request")?;
    let mut heard = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(Some(message)) = tokio::time::timeout_at(deadline, replies.next()).await {
        if let Ok(reply) = serde_json::from_slice::<KillReply>(&message.payload) {
            heard.push(reply);
        }
    }
    Ok(heard)
}

/// Record the kill of `run_id` without telling anyone: enough for a run that
/// has not started (its executor checks the marker before each attempt).
pub async fn mark_killed(
    running: &kv::Store,
    run_id: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> anyhow::Result<KillMarker> {
    anyhow::ensure!(is_run_id(run_id), "{run_id:?} is not a run id");
    let marker = KillMarker {
        run_id: run_id.to_string(),
        requested_at_ms: now.timestamp_millis(),
        reason: reason.chars().take(MAX_REASON_BYTES).collect(),
    };
    running
        .put(
            subjects::kill_key(run_id),
            serde_json::to_vec(&marker)?.into(),
        )
        .await
        .context("record kill request")?;
    Ok(marker)
}

/// Whether a kill of `run_id` was requested.
pub async fn kill_requested(
    running: &kv::Store,
    run_id: &str,
) -> anyhow::Result<Option<KillMarker>> {
    let entry = running
        .get(subjects::kill_key(run_id))
        .await
        .context("read kill request")?;
    Ok(entry.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
}
