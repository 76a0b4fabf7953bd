//! One read of a stream's messages on a subject filter, from a start to the
//! end of the stream, at the pace of its reader. It ends at the first
//! message after which the consumer has nothing pending: messages stored
//! during the read may be included.
//!
//! Used where a service must see *every* matching message, however many:
//! the gateway's pass over every job definition
//! (`jetcron_gateway::jobs::pass`), and the executor's search for the end of
//! a run among a busy job's run events (`jetcron_executor::run_end_lookup`). One
//! request per message (direct or `MSG.GET`) costs a round trip each; a
//! KV watch or a plain push consumer leaves what the reader has not taken
//! yet in the client's subscription buffer of 65,536 messages, which drops
//! the rest when it overflows.
//!
//! So a pass is an ephemeral push consumer (in memory, one replica) on a
//! fresh inbox, subscribed before the consumer exists. A task moves each
//! message from the subscription into an unbounded queue as it arrives,
//! and the server sends at most [`IN_FLIGHT`] messages the reader has not
//! acknowledged yet (`AckAll`, one ack per [`ACK_EVERY`] read): far fewer
//! than the subscription holds, so the client never drops one even when
//! the moving task waits for a busy runtime. (Flow control alone let the
//! server send up to 32 MiB, more than 65,536 small messages: a million
//! jobs' pass lost some at a cold start.) Flow control requests and
//! heartbeats are answered when the reader reaches them. A lost message (a
//! gap in the consumer sequence, say after a reconnect) or one sent again
//! fails the pass; callers try again.
//!
//! It needs consumer creation on the stream, and to answer the messages and
//! flow control requests it gets: `$JS.ACK.<stream>.>` and
//! `$JS.FC.<stream>.>`, or `allow_responses`, which nats-server honours
//! only for 2 minutes after a message arrived. A reader that may take
//! longer between acks (the gateway's missed-fire scan works on each chunk)
//! needs the subjects; the NATS roles of `infra/nats/roles.conf` say which.
//!
//! The server drops the consumer a while after its reader stops asking
//! ([`INACTIVE_THRESHOLD`]); dropping the pass unsubscribes.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer};

use async_nats::StatusCode;
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use tokio::sync::mpsc;

/// Most messages sent and not yet acknowledged by the reader.
pub const IN_FLIGHT: i64 = 4_096;
/// The reader acknowledges (all up to) every this many messages it read.
const ACK_EVERY: u64 = 1_024;
/// Long enough that nothing is sent again while its reader works on a chunk.
const ACK_WAIT: Duration = Duration::from_secs(600);
/// How often an idle consumer says it is still there.
const IDLE_HEARTBEAT: Duration = Duration::from_secs(5);
/// No message for this long while some are still due (heartbeats alone are
/// no progress): the consumer or the connection is gone.
const STALLED_AFTER: Duration = Duration::from_secs(20);
/// How long the server keeps the consumer of a pass nobody reads any more.
const INACTIVE_THRESHOLD: Duration = Duration::from_secs(30);
/// The header of a heartbeat sent while the server waits for a flow control
/// reply (the request may have been lost): where to reply.
const CONSUMER_STALLED: &str = "Nats-Consumer-Stalled";

/// Where a pass starts, and what it reads.
#[derive(Debug, Clone)]
pub struct PassOf {
    /// Subjects read (one filter, wildcards allowed).
    pub filter_subject: String,
    /// Where to start (`LastPerSubject` for a KV bucket's current values).
    pub deliver_policy: consumer::DeliverPolicy,
    /// Shown in the server's consumer info: who reads, and why.
    pub description: String,
}

/// A message of a pass, with what its metadata says.
pub struct PassMessage {
    pub message: async_nats::Message,
    /// Its sequence in the stream.
    pub stream_sequence: u64,
    /// When the stream stored it.
    pub stored_at: DateTime<Utc>,
}

/// One read of a stream's messages (see the module docs).
pub struct StreamPass {
    client: async_nats::Client,
    /// Everything the consumer sent, in order, as it arrived.
    queue: mpsc::UnboundedReceiver<async_nats::Message>,
    /// Moves messages from the subscription into `queue`.
    drain: tokio::task::JoinHandle<()>,
    /// The consumer sequence of the last message read.
    delivered: u64,
    /// Nothing was pending after the last message read.
    done: bool,
}

impl Drop for StreamPass {
    fn drop(&mut self) {
        // Unsubscribes; the server drops the consumer after its inactive threshold.
        self.drain.abort();
    }
}

impl StreamPass {
    /// Open a pass over the stream named `stream`, on `js`'s connection
    /// and with its request timeout (a pass from every key's last value
    /// wants [`crate::topology::whole_stream_context`]: the server finds them all
    /// before it answers).
    pub async fn open(stream: &str, js: &jetstream::Context, of: PassOf) -> anyhow::Result<Self> {
        let client = js.client();
        let deliver_subject = client.new_inbox();
        // Subscribed before the consumer exists, so its first messages find us.
        let mut subscription = client
            .subscribe(deliver_subject.clone())
            .await
            .context("subscribe to the pass")?;
        let consumer: consumer::PushConsumer = js
            .create_consumer_on_stream(
                consumer::push::Config {
                    deliver_subject,
                    description: Some(of.description),
                    filter_subject: of.filter_subject,
                    deliver_policy: of.deliver_policy,
                    ack_policy: consumer::AckPolicy::All,
                    max_ack_pending: IN_FLIGHT,
                    ack_wait: ACK_WAIT,
                    replay_policy: consumer::ReplayPolicy::Instant,
                    flow_control: true,
                    idle_heartbeat: IDLE_HEARTBEAT,
                    inactive_threshold: INACTIVE_THRESHOLD,
                    memory_storage: true,
                    num_replicas: 1,
                    ..Default::default()
                },
                stream,
            )
            .await
            .context("create the consumer of a pass")?;
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
            queue,
            drain,
            delivered: 0,
            done,
        })
    }

    /// Whether the pass has read to the end of the stream (nothing was
    /// pending after the last message read).
    pub fn done(&self) -> bool {
        self.done
    }

    /// The next message, in stream order; `None` once the pass has read to
    /// the end of the stream. Answers flow control on the way.
    pub async fn next_message(&mut self) -> anyhow::Result<Option<PassMessage>> {
        if self.done {
            return Ok(None);
        }
        // A consumer stalled for good (a flow control reply refused, say)
        // would send heartbeats forever.
        let deadline = tokio::time::Instant::now() + STALLED_AFTER;
        loop {
            let message = match tokio::time::timeout_at(deadline, self.queue.recv()).await {
                Ok(Some(message)) => message,
                Ok(None) => anyhow::bail!("the pass's subscription ended"),
                Err(_) => anyhow::bail!(
                    "the pass got no message for {STALLED_AFTER:?}: consumer or connection lost"
                ),
            };
            match message.status {
                None => {
                    let read = self.delivered(message)?;
                    if self.delivered.is_multiple_of(ACK_EVERY) && !self.done {
                        self.acknowledge(&read.message).await?;
                    }
                    return Ok(Some(read));
                }
                Some(StatusCode::IDLE_HEARTBEAT) => self.control(&message).await?,
                Some(status) => anyhow::bail!(
                    "the pass's consumer sent {status} {}",
                    message.description.as_deref().unwrap_or_default()
                ),
            }
        }
    }

    /// A heartbeat or a flow control request, reached in order: everything
    /// sent before it has been read, so the server may send more.
    async fn control(&mut self, message: &async_nats::Message) -> anyhow::Result<()> {
        let headers = message.headers.as_ref();
        // A heartbeat names the last message sent: all of them must have come.
        let last_sent = headers.and_then(|h| h.get(async_nats::header::NATS_LAST_CONSUMER));
        if let Some(last) = last_sent.and_then(|v| v.as_str().parse::<u64>().ok()) {
            anyhow::ensure!(
                last == self.delivered,
                "the pass lost messages ({last} sent, {} read)",
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
                .context("answer the pass's flow control")?;
        }
        Ok(())
    }

    /// Acknowledge `message` and every one before it: the server may send
    /// more.
    async fn acknowledge(&self, message: &async_nats::Message) -> anyhow::Result<()> {
        let Some(reply) = message.reply.clone() else {
            anyhow::bail!("a pass message has no subject to acknowledge it on");
        };
        self.client
            .publish(reply, bytes::Bytes::from_static(b"+ACK"))
            .await
            .context("acknowledge a pass's messages")
    }

    fn delivered(&mut self, message: async_nats::Message) -> anyhow::Result<PassMessage> {
        let info = message
            .reply
            .as_deref()
            .context("a pass message has no metadata (reply subject)")
            .and_then(AckSubject::parse)
            .context("read a pass message's metadata")?;
        // Sent again (its ack wait ran out): the server resends everything
        // after the last ack under new consumer sequences, which the gap
        // check cannot see.
        anyhow::ensure!(
            info.delivered == 1,
            "the pass got stream message {} again",
            info.stream_sequence
        );
        anyhow::ensure!(
            info.consumer_sequence == self.delivered + 1,
            "the pass lost messages (got {}, expected {})",
            info.consumer_sequence,
            self.delivered + 1
        );
        self.delivered = info.consumer_sequence;
        self.done = info.pending == 0;
        Ok(PassMessage {
            message,
            stream_sequence: info.stream_sequence,
            stored_at: info.stored_at,
        })
    }
}

/// What a JetStream message's reply subject says of it (ADR-15:
/// `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<stored, ns>.<pending>`,
/// or with `<domain>.<account hash>.` before the stream and tokens after
/// the pending count).
///
/// Read here rather than with `jetstream::Message::info`, which needs the
/// message wrapped with a clone of the JetStream context: cloning and
/// dropping it for every message of a million-job read was about 3 % of a
/// cold start's CPU (docs/benchmarks.md).
#[derive(Debug, PartialEq)]
struct AckSubject {
    delivered: i64,
    stream_sequence: u64,
    consumer_sequence: u64,
    stored_at: DateTime<Utc>,
    pending: u64,
}

impl AckSubject {
    fn parse(reply: &str) -> anyhow::Result<Self> {
        let tokens = reply
            .strip_prefix("$JS.ACK.")
            .with_context(|| format!("{reply:?} is not a JetStream ack subject"))?;
        // Without allocating: this is read for every message of a pass.
        let mut kept = [""; 9];
        let mut count = 0;
        for token in tokens.split('.') {
            if let Some(slot) = kept.get_mut(count) {
                *slot = token;
            }
            count += 1;
        }
        // The numbers follow the stream and consumer names.
        let numbers = match count {
            7 => &kept[2..7],
            n if n >= 9 => &kept[4..9],
            n => anyhow::bail!("{reply:?} has {n} tokens after $JS.ACK., not 7 or 9 and more"),
        };
        let number = |i: usize, what: &str| -> anyhow::Result<i64> {
            numbers[i]
                .parse::<i64>()
                .with_context(|| format!("{what} {:?} in {reply:?}", numbers[i]))
        };
        let unsigned = |i: usize, what: &str| -> anyhow::Result<u64> {
            let n = number(i, what)?;
            u64::try_from(n).with_context(|| format!("{what} {n} in {reply:?}"))
        };
        Ok(Self {
            delivered: number(0, "delivery count")?,
            stream_sequence: unsigned(1, "stream sequence")?,
            consumer_sequence: unsigned(2, "consumer sequence")?,
            stored_at: DateTime::from_timestamp_nanos(number(3, "stored time")?),
            pending: unsigned(4, "pending count")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(nanos: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_nanos(nanos)
    }

    #[test]
    fn an_ack_subject_of_either_format_says_what_the_server_put_in_it() {
        let wanted = AckSubject {
            delivered: 1,
            stream_sequence: 42,
            consumer_sequence: 7,
            stored_at: at(1_765_000_000_123_456_789),
            pending: 99,
        };
        for reply in [
            "$JS.ACK.KV_jetcron_jobs.pass1.1.42.7.1765000000123456789.99",
            // ADR-15's longer form: domain and account hash first, a token after.
            "$JS.ACK._.ACCHASH.KV_jetcron_jobs.pass1.1.42.7.1765000000123456789.99",
            "$JS.ACK.hub.ACCHASH.KV_jetcron_jobs.pass1.1.42.7.1765000000123456789.99.r4nd",
            "$JS.ACK.hub.ACCHASH.KV_jetcron_jobs.pass1.1.42.7.1765000000123456789.99.r4nd.later",
        ] {
            assert_eq!(AckSubject::parse(reply).expect(reply), wanted, "{reply}");
        }
    }

    #[test]
    fn a_subject_that_is_not_an_ack_subject_is_refused_with_what_is_wrong() {
        for (reply, says) in [
            ("_INBOX.abc", "is not a JetStream ack subject"),
            ("$JS.ACK.S.C.1.42.7.99", "has 6 tokens"),
            ("$JS.ACK.D.H.S.C.1.42.7.5", "has 8 tokens"),
            ("$JS.ACK.S.C.x.42.7.1.99", "delivery count \"x\""),
            ("$JS.ACK.S.C.1.-42.7.1.99", "stream sequence -42"),
            ("$JS.ACK.S.C.1.42.7.soon.99", "stored time \"soon\""),
        ] {
            let error = format!("{:#}", AckSubject::parse(reply).expect_err(reply));
            assert!(error.contains(says), "{reply}: {error}");
        }
    }
}
