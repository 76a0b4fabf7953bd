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
//! call of that instant has ended (the last reply means the target has had
//! every request), or 100 ms after the reply, so that recording the first
//! outcomes (a run event and an ack each) does not compete with the calls
//! still on their way. The dispatcher sleeps on tokio's timer until 2 ms
//! before an instant and spins the rest: the timer's millisecond ticks woke
//! it up to 1.9 ms late. (With `jetcron all` the calls' connection runs its
//! I/O on a thread of its own, so requests are written while the burst is
//! still being handed over.)
//!
//! A booking is withdrawn when its attempt stops waiting for it (a kill
//! broadcast, the end of a shutdown's grace): exactly one of "withdrawn"
//! and "sent" happens, decided by one atomic step on both sides.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use async_nats::{Message, Request, RequestError, Subject};
use chrono::{DateTime, Utc};
use futures::stream::FuturesUnordered;
use futures::StreamExt as _;
use jetcron_core::control::KillMarker;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::ExecutorContext;

/// Longest a reply waits for the other calls of its instant to end.
const BURST_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

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
                let woke = std::time::Instant::now();
                let instant = next.unwrap_or(now);
                let mut sent = 0usize;
                let burst = Burst::default();
                // Counted until every call is in: a call that ends at once
                // (killed) must not end the burst.
                let handing = burst.member();
                while let Some(entry) = booked.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    let call = entry.remove();
                    if let Some(call) = send(&ctx, call, burst.member()) {
                        calls.push(call);
                        sent += 1;
                    }
                }
                // Poll until every request of the instant is sent (a poll
                // stops at the first call that completes).
                while let std::task::Poll::Ready(Some(())) = futures::poll!(calls.next()) {}
                drop(handing);
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

type CallFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Send one call at its instant, unless withdrawn or killed. The future it
/// returns sends the request on its first poll and ends with the reply, or
/// when the attempt stops waiting.
fn send(ctx: &Arc<ExecutorContext>, call: Booked, burst: BurstMember) -> Option<CallFuture> {
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
            burst,
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
                        request_and_answer(ctx.calls.clone(), subject, request, answer, burst).await
                    }
                    Err(e) => {
                        let _ = answer.send(Dispatched::Unchecked(format!("{e:#}")));
                    }
                }
            }))
        }
    }
}

/// Send the request; hand its reply to the attempt once every call of its
/// instant has ended (its target was reached, or it failed), or
/// [`BURST_WAIT`] after the reply, or stop when the attempt stops waiting.
async fn request_and_answer(
    client: async_nats::Client,
    subject: Subject,
    request: Request,
    mut answer: oneshot::Sender<Dispatched>,
    burst: BurstMember,
) {
    tokio::select! {
        reply = client.send_request(subject, request) => {
            let all_ended = burst.ended();
            let _ = tokio::time::timeout(BURST_WAIT, all_ended.cancelled()).await;
            let _ = answer.send(Dispatched::Reply(reply));
        }
        _ = answer.closed() => {}
    }
}

/// The calls sent at one instant, counted down as they end.
#[derive(Default)]
struct Burst {
    going: Arc<AtomicUsize>,
    ended: CancellationToken,
}

impl Burst {
    fn member(&self) -> BurstMember {
        self.going.fetch_add(1, Ordering::AcqRel);
        BurstMember {
            going: Arc::clone(&self.going),
            ended: self.ended.clone(),
        }
    }
}

/// One call of a [`Burst`]; ending (dropped) counts it out.
struct BurstMember {
    going: Arc<AtomicUsize>,
    ended: CancellationToken,
}

impl BurstMember {
    /// Count this call out; the token is cancelled once every call of the
    /// burst is.
    fn ended(self) -> CancellationToken {
        self.ended.clone()
    }
}

impl Drop for BurstMember {
    fn drop(&mut self) {
        if self.going.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.ended.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_ends_when_its_last_call_ends_and_not_while_calls_are_handed_over() {
        let burst = Burst::default();
        let handing = burst.member();
        let killed = burst.member();
        drop(killed);
        let first = burst.member();
        let second = burst.member();
        let ended = burst.ended.clone();
        drop(handing);
        assert!(!ended.is_cancelled(), "two calls still going");
        let token = first.ended();
        assert!(!token.is_cancelled(), "one call still going");
        drop(second);
        assert!(token.is_cancelled() && ended.is_cancelled());
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
