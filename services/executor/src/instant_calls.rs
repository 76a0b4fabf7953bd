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
//! The replies of an instant's calls reach their attempts only once every
//! request of that instant is flushed to the server, so that recording the
//! first outcomes (a run event and an ack each) does not compete with the
//! calls still going out.
//!
//! A booking is withdrawn when its attempt stops waiting for it (a kill
//! broadcast, the end of a shutdown's grace): exactly one of "withdrawn"
//! and "sent" happens, decided by one atomic step on both sides.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use async_nats::{Message, Request, RequestError, Subject};
use chrono::{DateTime, Utc};
use futures::stream::FuturesUnordered;
use futures::StreamExt as _;
use jetcron_core::control::KillMarker;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::ExecutorContext;

/// Longest a reply waits for the flush of its instant's requests.
const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

const WAITING: u8 = 0;
const SENT: u8 = 1;
const WITHDRAWN: u8 = 2;

/// What became of a booked call at its instant.
pub enum Dispatched {
    /// Sent; the reply, or why there is none.
    Reply(Result<Message, RequestError>),
    /// Not sent: the run was killed before its instant.
    Killed(KillMarker),
    /// Not sent: the kill request could not be looked up.
    Unchecked(String),
}

/// The booking side the dispatcher keeps.
pub struct Booked {
    run_id: String,
    subject: Subject,
    request: Request,
    state: Arc<AtomicU8>,
    answer: oneshot::Sender<Dispatched>,
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
}

impl InstantCalls {
    /// The booking desk, and the queue its dispatcher ([`dispatch`]) serves.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<(DateTime<Utc>, Booked)>) {
        let (bookings, queue) = mpsc::unbounded_channel();
        (Self { bookings }, queue)
    }

    /// Book `request` to `subject` for `at`; `None` when the dispatcher is
    /// gone (shutting down): call the target directly then.
    pub fn book(
        &self,
        at: DateTime<Utc>,
        run_id: &str,
        subject: Subject,
        request: Request,
    ) -> Option<Booking> {
        let state = Arc::new(AtomicU8::new(WAITING));
        let (answer, receiver) = oneshot::channel();
        let booked = Booked {
            run_id: run_id.to_string(),
            subject,
            request,
            state: Arc::clone(&state),
            answer,
        };
        self.bookings.send((at, booked)).ok()?;
        Some(Booking {
            state,
            answer: receiver,
        })
    }
}

/// Send each booked call at its instant until `stop`; calls already sent
/// keep their reply future until the attempt stops waiting for it.
pub async fn dispatch(
    ctx: Arc<ExecutorContext>,
    mut queue: mpsc::UnboundedReceiver<(DateTime<Utc>, Booked)>,
    stop: CancellationToken,
) {
    let mut booked: BTreeMap<(DateTime<Utc>, u64), Booked> = BTreeMap::new();
    // Opened once the requests of the instant being sent are flushed.
    let mut flushed = CancellationToken::new();
    let mut order = 0u64;
    let mut calls = FuturesUnordered::new();
    loop {
        let next = booked.first_key_value().map(|((at, _), _)| *at);
        let wait = next.map(|at| (at - ctx.clock.now()).to_std().unwrap_or_default());
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = sleep_for(wait) => {
                let now = ctx.clock.now();
                while let Some(entry) = booked.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    let call = entry.remove();
                    if let Some(sent) = send(&ctx, call, flushed.clone()) {
                        calls.push(sent);
                    }
                }
                // Poll until every request of the instant is sent (a poll
                // stops at the first call that completes).
                while let std::task::Poll::Ready(Some(())) = futures::poll!(calls.next()) {}
                let (client, gate) = (ctx.calls.clone(), std::mem::take(&mut flushed));
                tokio::spawn(async move {
                    let _ = client.flush().await;
                    gate.cancel();
                });
            }
            Some(()) = calls.next(), if !calls.is_empty() => {}
            booking = queue.recv() => match booking {
                Some((at, call)) => {
                    order += 1;
                    booked.insert((at, order), call);
                }
                None => return,
            },
        }
    }
}

async fn sleep_for(wait: Option<std::time::Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

type CallFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Send one call at its instant, unless withdrawn or killed. The future it
/// returns sends the request on its first poll and ends with the reply, or
/// when the attempt stops waiting.
fn send(
    ctx: &Arc<ExecutorContext>,
    call: Booked,
    flushed: CancellationToken,
) -> Option<CallFuture> {
    if call
        .state
        .compare_exchange(WAITING, SENT, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return None;
    }
    let Booked {
        run_id,
        subject,
        request,
        answer,
        ..
    } = call;
    match ctx.kill_markers.known(&run_id) {
        Some(Some(marker)) => {
            let _ = answer.send(Dispatched::Killed(marker));
            None
        }
        Some(None) => Some(Box::pin(request_and_answer(
            ctx.calls.clone(),
            subject,
            request,
            answer,
            flushed,
        ))),
        // The kill requests are not followed yet: read this one first.
        None => {
            let ctx = Arc::clone(ctx);
            Some(Box::pin(async move {
                match ctx.kill_markers.requested(&ctx.running, &run_id).await {
                    Ok(Some(marker)) => {
                        let _ = answer.send(Dispatched::Killed(marker));
                    }
                    Ok(None) => {
                        request_and_answer(ctx.calls.clone(), subject, request, answer, flushed)
                            .await
                    }
                    Err(e) => {
                        let _ = answer.send(Dispatched::Unchecked(format!("{e:#}")));
                    }
                }
            }))
        }
    }
}

/// Send the request; hand its reply to the attempt once the requests of
/// the instant are flushed, or stop when the attempt stops waiting.
async fn request_and_answer(
    client: async_nats::Client,
    subject: Subject,
    request: Request,
    mut answer: oneshot::Sender<Dispatched>,
    flushed: CancellationToken,
) {
    tokio::select! {
        reply = client.send_request(subject, request) => {
            // Not past a reconnect, though: the flush may wait for one, the
            // reply must not.
            let _ = tokio::time::timeout(FLUSH_WAIT, flushed.cancelled()).await;
            let _ = answer.send(Dispatched::Reply(reply));
        }
        _ = answer.closed() => {}
    }
}
