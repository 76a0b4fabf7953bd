//! Storing a [`Notification`] in `JETCRON_NOTIFY`, where the executors'
//! notifier picks it up. Deduplicated on [`Notification::message_id`], and
//! retried a few times through a leader election.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream;
use async_nats::HeaderMap;
use jetcron_core::alert::Notification;
use jetcron_core::subjects;

/// Store `notification`; an error only after five tries.
pub async fn enqueue(js: &jetstream::Context, notification: &Notification) -> anyhow::Result<()> {
    let body = bytes::Bytes::from(serde_json::to_vec(notification)?);
    let msg_id = notification.message_id();
    let mut last_error = None;
    for attempt in 0..5u64 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
        }
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", msg_id.as_str());
        let stored = async {
            js.publish_with_headers(
                subjects::notify_subject(&notification.run.job_id),
                headers,
                body.clone(),
            )
            .await
            .context("publish notification")?
            .await
            .context("store notification")
        }
        .await;
        match stored {
            Ok(_) => return Ok(()),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| anyhow::anyhow!("no attempt made")))
}
