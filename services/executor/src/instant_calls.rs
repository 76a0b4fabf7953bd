//! Calls of held fires, sent together at their instant.
//!
//! A fire stored ahead of its time is held by the executor that pulled it
//! ([`crate::hold`]). When every held attempt woke at the instant and built
//! and sent its own request, the calls of a burst (1,000 jobs due the same
//! second) went out one attempt's work apart, interleaved with the outcomes
//! of the first ones: seen at the target, p99 47 ms after the instant where
//! an ideal sender's burst of the same size is seen at 5-6 ms. So a held
//! attempt of a `nats` target builds its request before the instant and
//! books it here; at the instant one task looks for a kill request of each
//! run (in memory, [`crate::kill_markers`]) and sends every request due in
//! one go, and each attempt gets its reply, or the kill, back.
//!
//! Replies reach their attempts once every call of the instant has ended
//! ([`crate::instant_replies`] says why). The dispatcher sleeps on tokio's
//! timer until 2 ms before an instant and spins the rest: the timer's
//! millisecond ticks woke it up to 1.9 ms late. (With `jetcron all` the
//! calls' connection runs its I/O on a thread of its own, so requests are
//! written while the burst is still being handed over.)
//!
//! The requests are built whole when they are booked, reply subject
//! included (`<inbox>.<booking number>`, under one inbox subscribed once
//! per executor), and handed to the client as plain messages at the
//! instant; the dispatcher matches each reply to its call itself. Sent as
//! client requests, each call also made an inbox name, a map entry in the
//! client and a future of its own at the instant, and each reply a timer:
//! an instant's hand-over took 2.2-6.6 ms for 1,000 calls, 1.0-2.5 ms now.
//! An ideal sender of the same messages (`e2e-bench run`, "ideal caller")
//! is the measure.
//!
//! When the client's queue of commands is full (it reconnects, say), the
//! rest of an instant's calls go from a task of their own, in order, and
//! the dispatcher goes on reading replies meanwhile.
//!
//! A booking is withdrawn when its attempt stops waiting for it (a kill
//! broadcast, the end of a shutdown's grace): exactly one of "withdrawn"
//! and "sent" happens, decided by one atomic step on both sides. A call
//! sent whose attempt stops waiting is forgotten at the next sweep (every
//! [`BURST_WAIT`] while calls are out).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use async_nats::message::OutboundMessage;
use async_nats::{HeaderMap, Request, RequestError, RequestErrorKind, Subject};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::stream::FuturesUnordered;
use futures::{FutureExt as _, SinkExt as _, StreamExt as _};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

pub use crate::instant_replies::Dispatched;
use crate::instant_replies::{number_of, Out, BURST_WAIT};
use crate::lease::Lease;
use crate::ExecutorContext;

const WAITING: u8 = 0;
const SENT: u8 = 1;
const WITHDRAWN: u8 = 2;

/// A call as it is booked: the whole message, and where its answer goes.
pub struct Booked {
    run_id: String,
    /// Its number under the dispatcher's inbox (the reply subject's last
    /// token).
    number: u64,
    message: OutboundMessage,
    state: Arc<AtomicU8>,
    answer: oneshot::Sender<Dispatched>,
    /// The lease of the delivery that booked it: not sent once it is gone.
    lease: Arc<Lease>,
}

/// An attempt's booked call; dropping it withdraws the call if it was not
/// sent yet.
pub struct Booking {
    state: Arc<AtomicU8>,
    answer: oneshot::Receiver<Dispatched>,
}

impl Booking {
    /// What became of the call; `None` when the dispatcher stopped before
    /// the instant (the call was not sent then).
    pub async fn answer(&mut self) -> Option<Dispatched> {
        (&mut self.answer).await.ok()
    }
}

impl Drop for Booking {
    fn drop(&mut self) {
        let _ =
            self.state
                .compare_exchange(WAITING, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// Where attempts book their calls.
pub struct InstantCalls {
    bookings: mpsc::UnboundedSender<(DateTime<Utc>, Booked)>,
    /// The replies' subject prefix: a fresh inbox of the calls' client.
    inbox: String,
    numbers: AtomicU64,
}

/// The dispatcher's side of [`InstantCalls`]: the bookings, and the
/// replies' subscription.
pub struct BookedCalls {
    queue: mpsc::UnboundedReceiver<(DateTime<Utc>, Booked)>,
    inbox: String,
    replies: async_nats::Subscriber,
}

impl InstantCalls {
    /// The booking desk for calls sent with `calls` (subscribed to their
    /// replies), and the queue its dispatcher ([`dispatch`]) serves.
    pub async fn new(calls: &async_nats::Client) -> anyhow::Result<(Self, BookedCalls)> {
        let (bookings, queue) = mpsc::unbounded_channel();
        let inbox = calls.new_inbox();
        let replies = calls
            .subscribe(format!("{inbox}.*"))
            .await
            .context("subscribe to the replies of booked calls")?;
        Ok((
            Self {
                bookings,
                inbox: inbox.clone(),
                numbers: AtomicU64::new(0),
            },
            BookedCalls {
                queue,
                inbox,
                replies,
            },
        ))
    }

    /// Book `request` for `at`;
    /// `None` when the dispatcher is gone (shutting down): call the target
    /// directly then.
    pub fn book(
        &self,
        at: DateTime<Utc>,
        run_id: &str,
        request: CallRequest,
        lease: Arc<Lease>,
    ) -> Option<Booking> {
        let CallRequest {
            subject,
            headers,
            payload,
        } = request;
        let number = self.numbers.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(AtomicU8::new(WAITING));
        let (answer, receiver) = oneshot::channel();
        let booked = Booked {
            run_id: run_id.to_string(),
            number,
            message: OutboundMessage {
                subject,
                reply: Some(format!("{}.{number}", self.inbox).into()),
                payload,
                headers: Some(headers),
            },
            state: Arc::clone(&state),
            answer,
            lease,
        };
        self.bookings.send((at, booked)).ok()?;
        Some(Booking {
            state,
            answer: receiver,
        })
    }
}

/// The request a booked call sends to its target's subject.
pub struct CallRequest {
    pub subject: Subject,
    pub headers: HeaderMap,
    pub payload: Bytes,
}

/// Send each booked call at its instant until `stop`, and hand each reply
/// to its attempt.
pub async fn dispatch(
    ctx: Arc<ExecutorContext>,
    booked_calls: BookedCalls,
    stop: CancellationToken,
) {
    let BookedCalls {
        mut queue,
        inbox,
        mut replies,
    } = booked_calls;
    let mut sink = ctx.calls.clone();
    let mut booked: BTreeMap<(DateTime<Utc>, u64), Booked> = BTreeMap::new();
    let mut out = Out::default();
    // Calls whose kill request had to be read first (before the kill
    // requests are followed): sent as plain requests.
    let mut unchecked = FuturesUnordered::new();
    // Calls handed over by a task of their own (the client's queue was
    // full) that could not be sent.
    let (failed_tx, mut failed) = mpsc::unbounded_channel::<(u64, RequestError)>();
    let mut sweep_at: Option<Instant> = None;
    loop {
        let next = booked.first_key_value().map(|((at, _), _)| *at);
        let wait = next.map(|at| (at - ctx.clock.now()).to_std().unwrap_or_default());
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = sleep_for(wait) => {
                let now = ctx.clock.now();
                let woke = Instant::now();
                let instant = next.unwrap_or(now);
                let burst = out.open(Instant::now() + BURST_WAIT);
                let mut sent = 0usize;
                // Calls that wait for room in the client's queue, in order.
                let mut waiting: Vec<(u64, OutboundMessage)> = Vec::new();
                while let Some(entry) = booked.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    let call = entry.remove();
                    if call
                        .state
                        .compare_exchange(WAITING, SENT, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        continue;
                    }
                    // The last look before the call: a delivery that
                    // stalled past its lease may be another's by now.
                    if let Some(why) = withheld(&ctx, &call.lease) {
                        let _ = call.answer.send(Dispatched::Withheld(why));
                        continue;
                    }
                    match ctx.kill_markers.known(&call.run_id) {
                        Some(Some(marker)) => {
                            let _ = call.answer.send(Dispatched::Killed(marker));
                        }
                        Some(None) => {
                            let Booked { number, message, answer, .. } = call;
                            out.sent(number, answer, burst);
                            sent += 1;
                            if !waiting.is_empty() {
                                waiting.push((number, message));
                                continue;
                            }
                            match hand_now(&mut sink, message) {
                                Handed::Sent => {}
                                Handed::Failed(error) => out.failed(number, error),
                                Handed::Full(message) => waiting.push((number, message)),
                            }
                        }
                        None => unchecked.push(call_after_reading_kill(Arc::clone(&ctx), call)),
                    }
                }
                if !waiting.is_empty() {
                    // The dispatcher goes on reading replies meanwhile.
                    tokio::spawn(hand_when_room(ctx.calls.clone(), waiting, failed_tx.clone()));
                }
                out.handed(burst);
                let next_sweep = out.next_sweep(Instant::now());
                sweep_at = sweep_at.into_iter().chain(next_sweep).min();
                let handed = woke.elapsed();
                let client = ctx.calls.clone();
                tokio::spawn(async move {
                    let _ = client.flush().await;
                    debug!(
                        calls = sent,
                        woke_late_us = (now - instant).num_microseconds().unwrap_or(i64::MAX),
                        handed_us = handed.as_micros() as u64,
                        flushed_us = woke.elapsed().as_micros() as u64,
                        "an instant's calls sent"
                    );
                });
            }
            reply = replies.next() => {
                let Some(reply) = reply else {
                    warn!("the replies of booked calls can no longer come; calls go directly");
                    out.fail_all("the calls' connection was closed before the reply");
                    return;
                };
                // Every reply already here in one go: each pass of this
                // loop makes its timers anew.
                let now = Instant::now();
                let mut reply = Some(reply);
                while let Some(message) = reply {
                    if let Some(number) = number_of(&message.subject, &inbox) {
                        out.replied(number, message, now);
                    }
                    reply = replies.next().now_or_never().flatten();
                }
            }
            Some((number, error)) = failed.recv() => out.failed(number, error),
            _ = sleep_at(sweep_at) => {
                let now = Instant::now();
                out.sweep(now);
                sweep_at = out.next_sweep(now);
            }
            Some(()) = unchecked.next(), if !unchecked.is_empty() => {}
            booking = queue.recv() => match booking {
                Some((at, call)) => {
                    booked.insert((at, call.number), call);
                }
                None => return,
            },
        }
    }
}

/// What became of a call handed to the client without waiting.
enum Handed {
    Sent,
    Failed(RequestError),
    /// The client's queue is full: the call is handed back.
    Full(OutboundMessage),
}

/// Hand `message` to the client if its queue has room now.
fn hand_now(sink: &mut async_nats::Client, message: OutboundMessage) -> Handed {
    let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
    match sink.poll_ready_unpin(&mut cx) {
        std::task::Poll::Ready(Ok(())) => match sink.start_send_unpin(message) {
            Ok(()) => Handed::Sent,
            Err(e) => Handed::Failed(as_request_error(e)),
        },
        std::task::Poll::Ready(Err(e)) => Handed::Failed(as_request_error(e)),
        std::task::Poll::Pending => Handed::Full(message),
    }
}

/// Hand `calls` to the client as its queue makes room (while it
/// reconnects, say), reporting each that cannot be sent to `failed`.
async fn hand_when_room(
    mut sink: async_nats::Client,
    calls: Vec<(u64, OutboundMessage)>,
    failed: mpsc::UnboundedSender<(u64, RequestError)>,
) {
    for (number, message) in calls {
        if let Err(e) = sink.feed(message).await {
            let _ = failed.send((number, as_request_error(e)));
        }
    }
}

/// A publish that failed, as the request error the attempt reports.
fn as_request_error(e: async_nats::PublishError) -> RequestError {
    let kind = match e.kind() {
        async_nats::client::PublishErrorKind::MaxPayloadExceeded => {
            RequestErrorKind::MaxPayloadExceeded
        }
        _ => RequestErrorKind::Other,
    };
    RequestError::with_source(kind, e)
}

async fn sleep_at(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A call whose kill request is read from the bucket first (the kill
/// requests are not followed in memory yet), then sent as a request; ends
/// with its answer, or when the attempt stops waiting.
async fn call_after_reading_kill(ctx: Arc<ExecutorContext>, call: Booked) {
    let Booked {
        run_id,
        message,
        mut answer,
        lease,
        ..
    } = call;
    let call = async {
        match ctx.kill_markers.requested(&ctx.running, &run_id).await {
            Ok(Some(marker)) => Dispatched::Killed(marker),
            Ok(None) if withheld(&ctx, &lease).is_some() => {
                Dispatched::Withheld(withheld(&ctx, &lease).unwrap_or_default())
            }
            Ok(None) => {
                let mut request = Request::new().payload(message.payload).timeout(None);
                if let Some(headers) = message.headers {
                    request = request.headers(headers);
                }
                Dispatched::Reply(ctx.calls.send_request(message.subject, request).await)
            }
            Err(e) => Dispatched::Unchecked(format!("{e:#}")),
        }
    };
    tokio::select! {
        dispatched = call => {
            let _ = answer.send(dispatched);
        }
        _ = answer.closed() => {}
    }
}

/// Why a booked call must not go out now, if it must not: its delivery's
/// lease ran out (the executor stalled), or the call gate is closed
/// ([`crate::call_gate`]).
fn withheld(ctx: &ExecutorContext, lease: &Lease) -> Option<String> {
    if !lease.holds() {
        return Some("the delivery's lease ran out before its instant's call".into());
    }
    crate::call_gate::closed(ctx)
}

/// How long before an instant the dispatcher stops sleeping on tokio's
/// timer and spins: the timer has millisecond ticks and woke the
/// dispatcher 0.2-1.9 ms late (docs/benchmarks.md).
const SPIN_BEFORE: std::time::Duration = std::time::Duration::from_millis(2);

/// Sleep `wait`, the last [`SPIN_BEFORE`] of it spinning, so that the
/// instant's calls leave within microseconds of it (at most once per
/// instant: the wait is the next booked instant's).
async fn sleep_for(wait: Option<std::time::Duration>) {
    let Some(wait) = wait else {
        return std::future::pending().await;
    };
    let deadline = tokio::time::Instant::now() + wait;
    tokio::time::sleep_until(deadline - SPIN_BEFORE.min(wait)).await;
    while tokio::time::Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetcron_testkit::NatsServer;

    fn call(number: u64, payload: Bytes) -> (u64, OutboundMessage) {
        let message = OutboundMessage {
            subject: format!("calls.{number}").into(),
            reply: None,
            payload,
            headers: None,
        };
        (number, message)
    }

    /// While the calls' client reconnects its queue of commands fills: the
    /// dispatcher hands what fits at once ([`hand_now`]) and the rest of
    /// the instant from a task ([`hand_when_room`]), which sends them, in
    /// order, once the server is back, and reports a call it cannot send.
    #[tokio::test]
    async fn calls_past_a_full_queue_go_in_order_once_the_client_reconnects() {
        let mut server = NatsServer::start();
        let watcher = server.client().await;
        let js = async_nats::jetstream::new(watcher.clone());
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "CALLS".into(),
            subjects: vec!["calls.>".into()],
            ..Default::default()
        })
        .await
        .expect("stream of the calls");
        let mut sink = async_nats::ConnectOptions::new()
            .client_capacity(4)
            .connect(server.url())
            .await
            .expect("calls' client");
        sink.flush().await.expect("connected");
        server.kill();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while sink.connection_state() == async_nats::connection::State::Connected {
            assert!(std::time::Instant::now() < deadline, "still connected");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }

        let mut at_once = 0;
        let mut waiting = Vec::new();
        for (number, message) in (0..40).map(|n| call(n, Bytes::from(n.to_string()))) {
            if !waiting.is_empty() {
                waiting.push((number, message));
                continue;
            }
            match hand_now(&mut sink, message) {
                Handed::Sent => at_once += 1,
                Handed::Failed(error) => panic!("call {number} failed: {error}"),
                Handed::Full(message) => waiting.push((number, message)),
            }
        }
        assert!(
            at_once < 40,
            "the queue never filled ({at_once} handed at once)"
        );
        assert!(at_once > 0, "nothing was handed at once");
        // Over the server's payload limit: refused by the client, reported.
        waiting.push(call(99, Bytes::from(vec![b'x'; 2 * 1024 * 1024])));
        let (failed_tx, mut failed) = mpsc::unbounded_channel();
        let handing = tokio::spawn(hand_when_room(sink.clone(), waiting, failed_tx));
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(
            !handing.is_finished(),
            "the queue had room while disconnected"
        );

        server.restart();
        tokio::time::timeout(std::time::Duration::from_secs(20), handing)
            .await
            .expect("handed over once reconnected")
            .expect("the task ends");
        let (number, error) = failed.recv().await.expect("the oversize call reported");
        assert_eq!(number, 99);
        assert_eq!(error.kind(), RequestErrorKind::MaxPayloadExceeded);
        assert!(
            failed.recv().await.is_none(),
            "only the oversize call failed"
        );
        sink.flush().await.expect("flushed after the reconnect");

        let js = async_nats::jetstream::new(server.client().await);
        let mut stream = js.get_stream("CALLS").await.expect("stream");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while stream.info().await.expect("stream info").state.messages < 40 {
            assert!(std::time::Instant::now() < deadline, "calls missing");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let mut stored = Vec::new();
        for sequence in 1..=40 {
            let message = stream.get_raw_message(sequence).await.expect("stored call");
            stored.push(String::from_utf8(message.payload.to_vec()).expect("text"));
        }
        let sent: Vec<String> = (0..40).map(|n: u64| n.to_string()).collect();
        assert_eq!(stored, sent);
    }

    #[tokio::test]
    async fn the_spinning_sleep_never_ends_before_its_instant() {
        for wait_us in [0u64, 500, 1_500, 2_000, 2_500, 7_000] {
            let wait = std::time::Duration::from_micros(wait_us);
            let started = std::time::Instant::now();
            sleep_for(Some(wait)).await;
            let slept = started.elapsed();
            assert!(slept >= wait, "{wait:?}: woke after {slept:?}");
        }
    }

    /// tokio's timer alone rounds a deadline up to its next millisecond
    /// tick: 3.3 ms comes about 0.7 ms late or more. The median over a few
    /// sleeps stays clear of a busy machine's odd preemption.
    #[tokio::test]
    async fn the_spinning_sleep_ends_within_a_fraction_of_a_tick() {
        let wait = std::time::Duration::from_micros(3_300);
        let mut late: Vec<std::time::Duration> = Vec::new();
        for _ in 0..21 {
            let started = std::time::Instant::now();
            sleep_for(Some(wait)).await;
            late.push(started.elapsed() - wait);
        }
        late.sort_unstable();
        let median = late[late.len() / 2];
        assert!(
            median < std::time::Duration::from_micros(300),
            "median {median:?} late: {late:?}"
        );
    }
}
