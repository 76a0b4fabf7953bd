//! One read of every current definition in `jetcron_jobs`, a chunk at a
//! time: what the missed-fire scan, the missed-fires gauge and `/v1/stats`
//! walk over.
//!
//! Why it streams: with a million jobs, listing the keys and reading each
//! (one request per key), then keeping every parsed job for the whole scan,
//! cost about 8 KB per job (a parsed cron line alone is about 6 KB). A pass
//! instead reads the bucket's current values in one go (an ephemeral push
//! consumer with `LastPerSubject`), hands them out [`JobPass::next_chunk`] by
//! chunk, and keeps nothing of a chunk once the caller drops it. Jobs with
//! the same schedule line share one parsed line (the process's
//! [`SharedLines`]).
//!
//! Why its own consumer rather than a KV watch ([`jetcron_io::bucket_follow`]
//! follows the bucket for good, applying each entry at once): a caller works
//! on a chunk (ClickHouse, publishes) before it asks for the next, and
//! meanwhile the server keeps sending, up to its flow control window (at
//! most 32 MiB). A watch leaves those messages in the client's subscription
//! buffer of 65,536 messages; small definitions overflow it, the client
//! drops messages, and the watch's ordered consumer restarts from the last
//! sequence it saw with every revision after it, old ones included. Here a
//! task moves each message from the subscription into an unbounded queue as
//! it arrives (nothing is dropped), and a flow control request is answered
//! only when the reader reaches it in that queue: the server still stops at
//! its window, so the queue holds at most that much ahead of the reader,
//! however many jobs there are. A lost message (a gap in the consumer
//! sequence, say after a reconnect) fails the pass; callers try again
//! later. It needs only consumer creation and flow control replies on
//! `KV_jetcron_jobs`, which the gateway's NATS role has
//! (`infra/nats/roles.conf`).
//!
//! As with the old per-key reads, a key written during a pass may be seen
//! at its old value, or at both (the new one later); deleted keys, delete
//! markers and definitions that do not validate are skipped.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer, kv};
use async_nats::StatusCode;
use futures::StreamExt as _;
use jetcron_core::job::parse_written_with;
use jetcron_core::schedule_lines::SharedLines;
use tokio::sync::mpsc;

use crate::stats::CurrentJob;

/// How often an idle consumer says it is still there.
const IDLE_HEARTBEAT: Duration = Duration::from_secs(5);
/// No value for this long while some are still due (heartbeats alone are
/// no progress): the consumer or the connection is gone.
const STALLED_AFTER: Duration = Duration::from_secs(20);
/// How long the server keeps the consumer of a pass nobody reads any more.
const INACTIVE_THRESHOLD: Duration = Duration::from_secs(30);
/// The header of a heartbeat sent while the server waits for a flow control
/// reply (the request may have been lost): where to reply.
const CONSUMER_STALLED: &str = "Nats-Consumer-Stalled";

/// One read of the current definitions of a bucket (see the module docs).
pub struct JobPass {
    client: async_nats::Client,
    context: jetstream::Context,
    /// `$KV.<bucket>.`: what the subjects of values start with.
    prefix: String,
    /// Everything the consumer sent, in order, as it arrived.
    queue: mpsc::UnboundedReceiver<async_nats::Message>,
    /// Moves messages from the subscription into `queue`.
    drain: tokio::task::JoinHandle<()>,
    /// The consumer sequence of the last value read.
    delivered: u64,
    /// Every value the bucket held when the pass opened has been read.
    done: bool,
    /// The process's parsed lines (shared with the ticker in `jetcron all`).
    schedules: SharedLines,
}

impl Drop for JobPass {
    fn drop(&mut self) {
        // Unsubscribes; the server drops the consumer after its inactive threshold.
        self.drain.abort();
    }
}

impl JobPass {
    /// Open a pass over `bucket`'s current values, on `js`'s connection.
    pub async fn open(
        bucket: &kv::Store,
        js: &jetstream::Context,
        lines: SharedLines,
    ) -> anyhow::Result<Self> {
        let client = js.client();
        let deliver_subject = client.new_inbox();
        // Subscribed before the consumer exists, so its first messages find us.
        let mut subscription = client
            .subscribe(deliver_subject.clone())
            .await
            .context("subscribe to the job pass")?;
        let consumer = bucket
            .stream
            .create_consumer(consumer::push::Config {
                deliver_subject,
                description: Some("gateway: one read of every job".into()),
                filter_subject: format!("{}>", bucket.prefix),
                deliver_policy: consumer::DeliverPolicy::LastPerSubject,
                ack_policy: consumer::AckPolicy::None,
                replay_policy: consumer::ReplayPolicy::Instant,
                flow_control: true,
                idle_heartbeat: IDLE_HEARTBEAT,
                inactive_threshold: INACTIVE_THRESHOLD,
                memory_storage: true,
                num_replicas: 1,
                ..Default::default()
            })
            .await
            .context("create the consumer of a job pass")?;
        let done = consumer.cached_info().num_pending == 0;
        let (sender, queue) = mpsc::unbounded_channel();
        let drain = tokio::spawn(async move {
            while let Some(message) = subscription.next().await {
                if sender.send(message).is_err() {
                    return;
                }
            }
        });
        Ok(Self {
            client,
            context: js.clone(),
            prefix: bucket.prefix.clone(),
            queue,
            drain,
            delivered: 0,
            done,
            schedules: lines,
        })
    }

    /// The next valid definitions, at most `max` (fewer at the end), each
    /// with the time its revision was written; `None` once every value has
    /// been read. The chunk is the caller's: the pass keeps none of it.
    pub async fn next_chunk(&mut self, max: usize) -> anyhow::Result<Option<Vec<CurrentJob>>> {
        let mut jobs = Vec::new();
        while !self.done && jobs.len() < max {
            let Some(value) = self.next_value().await? else {
                continue;
            };
            let Some(key) = value.subject.strip_prefix(self.prefix.as_str()) else {
                continue;
            };
            let schedules = &self.schedules;
            let parsed =
                parse_written_with(&value.payload, Some(key), value.written_at, &mut |line| {
                    schedules.parse(line)
                });
            if let Ok(job) = parsed {
                jobs.push(CurrentJob {
                    job,
                    written_at: value.written_at,
                });
            }
        }
        Ok((!jobs.is_empty()).then_some(jobs))
    }

    /// The next message of the consumer that is a value: `None` for a delete
    /// or purge marker. Answers flow control on the way.
    async fn next_value(&mut self) -> anyhow::Result<Option<RawDefinition>> {
        // A consumer stalled for good (a flow control reply refused, say)
        // would send heartbeats forever.
        let deadline = tokio::time::Instant::now() + STALLED_AFTER;
        loop {
            let message = match tokio::time::timeout_at(deadline, self.queue.recv()).await {
                Ok(Some(message)) => message,
                Ok(None) => anyhow::bail!("the job pass's subscription ended"),
                Err(_) => anyhow::bail!(
                    "the job pass got no value for {STALLED_AFTER:?}: consumer or connection lost"
                ),
            };
            match message.status {
                None => return self.value(message),
                Some(StatusCode::IDLE_HEARTBEAT) => self.control(&message).await?,
                Some(status) => anyhow::bail!(
                    "the job pass's consumer sent {status} {}",
                    message.description.as_deref().unwrap_or_default()
                ),
            }
        }
    }

    /// A heartbeat or a flow control request, reached in order: everything
    /// sent before it has been read, so the server may send more.
    async fn control(&mut self, message: &async_nats::Message) -> anyhow::Result<()> {
        let headers = message.headers.as_ref();
        // A heartbeat names the last value sent: all of them must have come.
        let last_sent = headers.and_then(|h| h.get(async_nats::header::NATS_LAST_CONSUMER));
        if let Some(last) = last_sent.and_then(|v| v.as_str().parse::<u64>().ok()) {
            anyhow::ensure!(
                last == self.delivered,
                "the job pass lost values ({last} sent, {} read)",
                self.delivered
            );
        }
        let reply = message.reply.as_ref().map(|r| r.to_string()).or_else(|| {
            headers
                .and_then(|h| h.get(CONSUMER_STALLED))
                .map(|v| v.to_string())
        });
        if let Some(reply) = reply {
            self.client
                .publish(reply, bytes::Bytes::new())
                .await
                .context("answer the job pass's flow control")?;
        }
        Ok(())
    }

    fn value(&mut self, message: async_nats::Message) -> anyhow::Result<Option<RawDefinition>> {
        let message = jetstream::Message {
            message,
            context: self.context.clone(),
        };
        let info = message
            .info()
            .map_err(|e| anyhow::anyhow!("read a job pass message's metadata: {e}"))?;
        anyhow::ensure!(
            info.consumer_sequence == self.delivered + 1,
            "the job pass lost values (got {}, expected {})",
            info.consumer_sequence,
            self.delivered + 1
        );
        self.delivered = info.consumer_sequence;
        self.done = info.pending == 0;
        let written_at = info.published;
        let message = message.message;
        if !is_put(&message) {
            return Ok(None);
        }
        Ok(Some(RawDefinition {
            subject: message.subject,
            payload: message.payload,
            written_at,
        }))
    }
}

/// A value read by a pass, not parsed yet.
struct RawDefinition {
    subject: async_nats::Subject,
    payload: bytes::Bytes,
    written_at: chrono::DateTime<chrono::Utc>,
}

/// Whether a message of a KV stream is a value (not a delete or purge marker).
fn is_put(message: &async_nats::Message) -> bool {
    let Some(headers) = message.headers.as_ref() else {
        return true;
    };
    if headers
        .get(async_nats::header::NATS_MARKER_REASON)
        .is_some()
    {
        return false;
    }
    headers
        .get("KV-Operation")
        .is_none_or(|op| op.as_str().parse::<kv::Operation>().ok() == Some(kv::Operation::Put))
}

#[cfg(test)]
mod tests;
