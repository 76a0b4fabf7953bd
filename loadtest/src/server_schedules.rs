//! The peer: nats-server's own message schedules (ADR-51). One message per
//! schedule on a stream with `allow_msg_schedules`, its `Nats-Schedule`
//! header the same 6-field line jetcron's jobs use, `Nats-Schedule-Target`
//! a subject of the same stream. The server stores a copy on the target at
//! each scheduled second; the lag of a fire is that copy's stored time (the
//! stream's timestamp) minus its second. Nothing is called: stored is where
//! a message schedule ends, so this is the server's best case beside
//! jetcron's target call.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer, stream};
use chrono::{DateTime, Utc};
use futures::StreamExt as _;

const STREAM: &str = "PEER_SCHEDULES";
const SCHEDULE_PREFIX: &str = "peer.schedule";
const FIRED_PREFIX: &str = "peer.fired";

/// What the server's schedules did in a window of whole seconds.
pub struct StoredFires {
    /// Stored time minus scheduled second, µs, sorted; one per fire stored
    /// for a second of the window.
    pub lags_us: Vec<i64>,
    /// Fires of schedules that were stored earlier than their second (none
    /// expected).
    pub early: usize,
}

/// Every schedule fires every second, like the jobs of `e2e-bench run`.
pub const LINE: &str = "* * * * * *";

/// Put `schedules` schedules [`LINE`] on a fresh stream, let them fire for
/// `warmup` seconds, measure `seconds` whole seconds, stop them and read
/// back what the server stored.
pub async fn measure(
    js: &jetstream::Context,
    schedules: usize,
    warmup: u64,
    seconds: u64,
) -> anyhow::Result<StoredFires> {
    let stream = js
        .create_stream(stream::Config {
            name: STREAM.into(),
            subjects: vec![format!("{SCHEDULE_PREFIX}.>"), format!("{FIRED_PREFIX}.>")],
            storage: stream::StorageType::File,
            allow_message_schedules: true,
            ..Default::default()
        })
        .await
        .context("create the schedules stream (nats-server 2.12+ with allow_msg_schedules)")?;
    let mut pending = Vec::with_capacity(4096);
    for i in 0..schedules {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Schedule", LINE);
        headers.insert(
            "Nats-Schedule-Target",
            format!("{FIRED_PREFIX}.{i:07}").as_str(),
        );
        pending.push(
            js.publish_with_headers(format!("{SCHEDULE_PREFIX}.{i:07}"), headers, "{}".into())
                .await?,
        );
        if pending.len() >= 4096 {
            for ack in pending.drain(..) {
                ack.await.context("schedule put ack")?;
            }
        }
    }
    for ack in pending {
        ack.await.context("schedule put ack")?;
    }

    tokio::time::sleep(Duration::from_secs(warmup)).await;
    let from = crate::next_second();
    let to = from + chrono::Duration::seconds(seconds as i64);
    // Everything stored from here on is read back; copies of the second
    // before `from` are skipped by their time.
    let mut stream = stream;
    let start_sequence = stream.info().await?.state.last_sequence + 1;
    crate::sleep_until(to + chrono::Duration::seconds(2)).await;
    // Stop the schedules: removing a schedule's message removes it.
    stream
        .purge()
        .filter(format!("{SCHEDULE_PREFIX}.>"))
        .await
        .context("purge the schedules")?;

    let fired = read_fired(&stream, start_sequence, from, to).await;
    js.delete_stream(STREAM)
        .await
        .context("delete the stream")?;
    fired
}

/// Every fire stored for a second in `[from, to)`, read back in order.
async fn read_fired(
    stream: &stream::Stream,
    start_sequence: u64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> anyhow::Result<StoredFires> {
    let reader = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: format!("{FIRED_PREFIX}.>"),
            deliver_policy: consumer::DeliverPolicy::ByStartSequence { start_sequence },
            ..Default::default()
        })
        .await
        .context("reader of the fired messages")?;
    let mut messages = reader.messages().await?;
    let mut lags_us = Vec::new();
    let mut early = 0;
    loop {
        let next = tokio::time::timeout(Duration::from_secs(5), messages.next()).await;
        let Ok(Some(message)) = next else { break };
        let message = message.map_err(|e| anyhow::anyhow!("read a fired message: {e}"))?;
        let info = message.info().map_err(|e| anyhow::anyhow!("{e}"))?;
        let stored = info.published;
        if stored >= to + chrono::Duration::seconds(2) {
            break;
        }
        // A schedule `* * * * * *` fires at whole seconds; a copy stored
        // less than a second late belongs to the second it was stored in.
        // Later copies show up as fires missing from the window.
        let second = DateTime::from_timestamp(stored.timestamp(), 0).context("second")?;
        if second < from || second >= to {
            continue;
        }
        let lag = (stored - second).num_microseconds().unwrap_or(i64::MAX);
        if let Some(intended) = scheduled_at(&message.headers) {
            if stored < intended {
                early += 1;
            }
        }
        lags_us.push(lag);
    }
    lags_us.sort_unstable();
    Ok(StoredFires { lags_us, early })
}

/// The fire's scheduled time, if the server says it on the copy: it names
/// the next fire, one second after this one for [`LINE`].
fn scheduled_at(headers: &Option<async_nats::HeaderMap>) -> Option<DateTime<Utc>> {
    let value = headers.as_ref()?.get("Nats-Schedule-Next")?;
    DateTime::parse_from_rfc3339(value.as_str())
        .ok()
        .map(|t| t.with_timezone(&Utc) - chrono::Duration::seconds(1))
}
