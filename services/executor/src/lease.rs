//! A pulled due event's lease: how long it is this executor's to act on.
//!
//! JetStream hands a message to another delivery once the consumer's
//! `ack_wait` has passed since it was delivered or last kept alive, and
//! nats-server takes an ack, a nak or a progress ack of a message from
//! whoever sends it, without asking which delivery it answers
//! (`server/consumer.go`: `progressUpdate`, `processAckMsg`, `processNak`
//! look the message up by its stream sequence only). An executor that
//! stalled past that time (SIGSTOP, a paused VM, a swap storm, a debugger)
//! and woke still holding the message called its target a second time,
//! recorded a stale `started` or `retrying` after the other delivery's
//! `succeeded`, and could release the other delivery's overlap claim or
//! settle its message (issue 39: 228 and 269 fires called twice after a
//! 40 s pause).
//!
//! So every act on a delivery asks a lease first ([`Delivery::is_ours`],
//! [`Delivery::may_record`]). A lease is counted on this process's
//! monotonic clock, which goes on counting while the process is stopped,
//! from a moment before which the server cannot have handed the message to
//! anyone: when the pull request that brought it was sent, or when a
//! keep-alive was sent while the lease still held. A process that stalled
//! sent nothing meanwhile, so its leases ran out with the stall and it acts
//! on nothing when it wakes. A margin covers the time from the check to the
//! act, and the second by which a consumer's stored state rounds its
//! timestamps down, which a new consumer leader starts from.
//!
//! Keep-alives are not waited for. Counting only confirmed ones, every
//! attempt lost its lease while the consumer elected a leader or its server
//! was cut off, recorded nothing of a call it had made, and the next
//! delivery called again (426 fires twice in the first trial of the
//! partition test). Only a nak or a term, which hand the fire on, count
//! just the keep-alives a consumer leader answered, when the answer comes
//! ([`Delivery`], [`crate::ack_replies`]). Other NATS faults are met
//! elsewhere: no call goes out through a server that does not answer
//! ([`crate::call_gate`]), none whose start could not be recorded while
//! JetStream does not answer (`attempt/start.rs`), and a later delivery of
//! a run whose outcome is recorded does not call.

//! What a lease cannot cover: a stall that falls between the last check and
//! the act itself (a few instructions), and a host whose monotonic clock
//! stops while it is paused (the lease then looks younger than it is).
//! Targets that must never see an older attempt after a newer one compare
//! `Jetcron-Attempt`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use jetcron_io::retry::RetryDelay;

use crate::ack_deadlines::AckDeadlines;
use tokio::time::Instant;
use tracing::{debug, warn};

/// The most a lease's margin is (see [`Lease::margin`]): the second a new
/// consumer leader's timestamps may be rounded down by, and the moment from
/// a check to its act.
const MAX_MARGIN: Duration = Duration::from_millis(1_500);

/// The most time a keep-alive is sent before its lease would run out.
const MAX_RENEWAL_TIME: Duration = Duration::from_secs(1);

/// How long a nak or term is retried: longer than a leader election (4-9 s),
/// unless the lease ends first.
const SETTLE_BUDGET: Duration = Duration::from_secs(20);

/// Until when a delivery is this executor's.
#[derive(Debug)]
pub struct Lease {
    ack_wait: Duration,
    expires: Mutex<Instant>,
}

impl Lease {
    /// A lease on a message the server handed out no earlier than `since`,
    /// under a consumer whose ack wait is `ack_wait`.
    pub fn new(since: Instant, ack_wait: Duration) -> Self {
        Self {
            ack_wait,
            expires: Mutex::new(since + ack_wait),
        }
    }

    fn expires(&self) -> Instant {
        *self.expires.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long the server leaves the message to this delivery from now.
    pub fn left(&self) -> Duration {
        self.expires().saturating_duration_since(Instant::now())
    }

    /// What is kept back from the end of the lease: a quarter of the ack
    /// wait, at most 1.5 s.
    pub fn margin(&self) -> Duration {
        (self.ack_wait / 4).min(MAX_MARGIN)
    }

    /// How long before the end of the margin a keep-alive is sent, at the
    /// latest: a quarter of the ack wait, at most 1 s.
    fn renewal_time(&self) -> Duration {
        (self.ack_wait / 4).min(MAX_RENEWAL_TIME)
    }

    /// Whether the message is still this delivery's, with the margin to act.
    pub fn holds(&self) -> bool {
        self.left() > self.margin()
    }

    /// Whether it will still hold at `at` without a renewal.
    pub fn holds_at(&self, at: Instant) -> bool {
        self.expires().saturating_duration_since(at) > self.margin()
    }

    /// The latest moment a keep-alive is sent to keep the lease.
    pub fn renew_by(&self) -> Instant {
        self.expires()
            .checked_sub(self.margin() + self.renewal_time())
            .unwrap_or_else(Instant::now)
    }

    /// The server restarted its wait at `sent` or later.
    fn restarted_at(&self, sent: Instant) {
        let mut expires = self.expires.lock().unwrap_or_else(|e| e.into_inner());
        *expires = (*expires).max(sent + self.ack_wait);
    }

    /// The consumer's ack wait this lease counts with.
    pub fn ack_wait(&self) -> Duration {
        self.ack_wait
    }
}

/// The waits of a pool's consumer, as the server counts them (for naks) and
/// as this executor's leases count them (the shorter of the consumer's and
/// its own settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolWaits {
    pub consumer: AckDeadlines,
    pub leases: AckDeadlines,
}

/// A pulled due event and its leases: every ack, nak, term and progress
/// ack of an attempt goes through it, and none is sent once its lease is
/// gone.
///
/// Two leases, both ended by a stall, for two kinds of act:
/// - **before the call** (record the start, take or release the claim,
///   call, hand the fire back with a nak or end it with a term): the
///   *held* lease, renewed by keep-alives sent on a connection that was up.
///   Keep-alives queued while the connection is away may reach no server
///   before the ack wait ends, and the fire come to another executor.
/// - **after the call** (record the outcome, write the retry ledger, queue
///   the notification, ack): the *alive* lease, renewed by every keep-alive
///   this process tried to send. A call made is recorded once NATS answers
///   again, so a later delivery finds the run ended instead of calling
///   again: held to the first lease alone, the calls of a hung node's last
///   seconds were all made twice (34 fires in a trial of the network test).
///   A process that stalled tried nothing meanwhile and records nothing.
///
/// And a third for the acts that hand the fire on (a nak or a term): the
/// *settling* lease, renewed like the held one but only by keep-alives a
/// consumer leader answered ([`crate::ack_replies`]), once the answer
/// comes. A keep-alive sent while the consumer elects a leader after a
/// node's death reaches none, and the new leader, counting the delivery
/// from its last replicated time, hands the fire out again when it is
/// elected; a nak sent after that (a retry's, once the outcome of a failed
/// call was stored) is taken as a nak of the new delivery, whose call the
/// server then hands out a third time: attempts 2 and 3 called 40-130 ms
/// apart (the crash tests, once a run). Not sent, the retry comes when the
/// ack wait of the last keep-alive that landed ends. (Counting keep-alives
/// sent while JetStream answered instead, a nak sent again while nobody
/// took it reached a new consumer leader that had handed the fire out
/// again: a chain of 48 fires came at attempt 3, 23-24 s late.)
pub struct Delivery {
    message: Message,
    held: Arc<Lease>,
    alive: Lease,
    settling: Arc<Lease>,
    /// Where the answers of keep-alives are routed.
    replies: Arc<crate::ack_replies::AckReplies>,
    /// The connection the acks go out on (whether it is up).
    client: async_nats::Client,
    /// The loss was logged (once per delivery).
    lost: AtomicBool,
    /// What a nak's delay needs added for the server to keep it
    /// ([`AckDeadlines::nak_extra`]).
    nak_extra: Duration,
}

/// How long a keep-alive may wait for room in the client's queue of
/// commands (full while its server hangs, before the client gives it up).
const HAND_OVER_WITHIN: Duration = Duration::from_millis(100);

/// How long a nak or term waits for the consumer leader's answer.
const SETTLE_ANSWER_WITHIN: Duration = Duration::from_secs(2);

impl Delivery {
    /// `message`, brought by a pull request sent at `requested_at` through
    /// `client` on a consumer with `waits`: its lease is the wait of its
    /// delivery's number. `replies` routes the answers of its keep-alives
    /// (the settling lease).
    pub fn pulled(
        message: Message,
        requested_at: Instant,
        waits: PoolWaits,
        client: async_nats::Client,
        replies: Arc<crate::ack_replies::AckReplies>,
    ) -> Self {
        let delivered = message.info().map_or(1, |info| info.delivered);
        let ack_wait = waits.leases.for_delivery(delivered);
        Self {
            message,
            held: Arc::new(Lease::new(requested_at, ack_wait)),
            alive: Lease::new(requested_at, ack_wait),
            settling: Arc::new(Lease::new(requested_at, ack_wait)),
            replies,
            client,
            lost: AtomicBool::new(false),
            nak_extra: waits.consumer.nak_extra(delivered),
        }
    }

    pub fn message(&self) -> &Message {
        &self.message
    }

    /// The lease of the acts before the call.
    pub fn lease(&self) -> &Arc<Lease> {
        &self.held
    }

    /// Whether this executor may still act on the delivery before its call
    /// (the held lease). The first time a lease is found gone it is said:
    /// the message may be another delivery's by now.
    pub fn is_ours(&self) -> bool {
        self.holds(&self.held, "held")
    }

    /// Whether this executor may still record what its call did (the alive
    /// lease).
    pub fn may_record(&self) -> bool {
        self.holds(&self.alive, "alive")
    }

    fn holds(&self, lease: &Lease, name: &'static str) -> bool {
        if lease.holds() {
            return true;
        }
        if !self.lost.swap(true, Ordering::Relaxed) {
            metrics::counter!("jetcron_executor_leases_lost_total", "lease" => name).increment(1);
            warn!(
                lease = name,
                ack_wait_ms = lease.ack_wait.as_millis() as u64,
                "this delivery's lease ran out (the executor stalled, or its NATS connection was away): \
                 JetStream may have handed the fire to another executor, so it is not acted on here"
            );
        }
        false
    }

    /// Tell JetStream the delivery is still worked on; `true` while it may
    /// be recorded. Each lease counts from this keep-alive when it still
    /// held (a delivery whose lease ran out may be another's already, and
    /// nothing revives it); the held lease only when the connection is up,
    /// the settling lease only when a consumer leader answers it.
    pub async fn keep_alive(&self) -> bool {
        if !self.may_record() {
            return false;
        }
        let tried = Instant::now();
        let connected = self.client.connection_state() == async_nats::connection::State::Connected;
        let renews_held = self.held.holds() && connected;
        self.alive.restarted_at(tried);
        let Some(subject) = self.message.reply.clone() else {
            return self.may_record();
        };
        // An answer is asked for only where it can renew the settling lease.
        let expected = (renews_held && self.settling.holds()).then(|| self.replies.expect());
        let progress = async {
            let payload = AckKind::Progress.into();
            match &expected {
                Some(expected) => {
                    let reply = expected.reply.clone();
                    self.client
                        .publish_with_reply(subject, reply, payload)
                        .await
                }
                None => self.client.publish(subject, payload).await,
            }
        };
        let sent = tokio::time::timeout(HAND_OVER_WITHIN, progress).await;
        match sent {
            Ok(Ok(())) if renews_held => {
                self.held.restarted_at(tried);
                if let Some(expected) = expected {
                    let settling = self.settling.clone();
                    tokio::spawn(async move {
                        if expected.taken().await {
                            settling.restarted_at(tried);
                        }
                    });
                }
            }
            Ok(Ok(())) => {}
            Ok(Err(e)) => debug!(error = %e, "progress ack not sent"),
            Err(_) => debug!("progress ack not sent: the client's queue is full"),
        }
        self.may_record()
    }

    /// Keep the delivery alive, if a lease would otherwise not reach
    /// `until` with its margin; `true` while it may be recorded.
    pub async fn keep_until(&self, until: Instant) -> bool {
        if self.held.holds_at(until) && self.alive.holds_at(until) {
            return self.may_record();
        }
        self.keep_alive().await
    }

    /// Whether a keep-alive is due for a lease to last.
    pub fn renewal_due(&self) -> bool {
        Instant::now() >= self.renew_by()
    }

    /// When the next keep-alive is due for a lease to last: the alive
    /// lease's time, or the held one's while it holds (a lost one is not
    /// revived, and counted in, its time long past, keep-alives went out
    /// back to back).
    fn renew_by(&self) -> Instant {
        let alive = self.alive.renew_by();
        if self.held.holds() {
            alive.min(self.held.renew_by())
        } else {
            alive
        }
    }

    /// Keep the delivery alive every `every`, and sooner when its lease
    /// would otherwise run out: while an attempt runs or waits. Never ends.
    pub async fn keep_alive_every(&self, every: Duration) -> std::convert::Infallible {
        let mut next = Instant::now() + every;
        loop {
            tokio::time::sleep_until(next.min(self.renew_by())).await;
            if !self.keep_alive().await {
                // Nothing keeps a lost lease: wait for the attempt to end.
                std::future::pending::<()>().await;
            }
            next = Instant::now() + every;
        }
    }

    /// Await `work` while keeping the delivery alive
    /// ([`Delivery::keep_alive_every`]) beside it, not in turn with it: a
    /// keep-alive waiting for room in the client's queue must not hold back
    /// what the work returns.
    pub async fn while_kept_alive<T>(
        &self,
        every: Duration,
        work: impl std::future::Future<Output = T>,
    ) -> T {
        tokio::pin!(work);
        let keeping = self.keep_alive_every(every);
        tokio::pin!(keeping);
        tokio::select! {
            done = &mut work => done,
            never = &mut keeping => match never {},
        }
    }

    /// Settle the message, unless the lease is gone. An ack is sent once,
    /// unconfirmed: every ack follows a stored outcome (or a run found
    /// ended), so a delivery that comes again because its ack was lost finds
    /// the run ended and is settled without a call (docs/architecture.md,
    /// "What one run costs"). A nak or term waits for the server's
    /// confirmation and is retried while it does not come (the consumer's
    /// leader is being elected) and the lease holds: a lost nak would bring
    /// the retry back after `ack_wait` instead of its backoff. Neither is
    /// sent once the settling lease is gone ([`Delivery`]). A nak nobody
    /// took (no consumer leader: [`Delivery::settle_once`]) is sent again
    /// while the leases hold; one that went unanswered, only within the
    /// first half of its delay ([`nak_retry_until`]): a nak whose
    /// confirmation alone was lost has handed the fire on, and
    /// once its delay is over the server takes a retry of it as a nak of the
    /// next delivery, whose call it hands out again (the leader-kill test: a
    /// retry's success at attempt 2, then attempt 3's call 130 ms later).
    pub async fn settle(&self, kind: AckKind) {
        // An ack ends a run whose outcome this delivery recorded; a nak or a
        // term hands the fire on or ends it, which only its holder may.
        let allowed = match kind {
            AckKind::Ack | AckKind::Progress => self.may_record(),
            _ => self.is_ours() && self.settling.holds(),
        };
        if !allowed {
            return;
        }
        if matches!(kind, AckKind::Ack | AckKind::Progress) {
            if let Err(e) = self.message.ack_with(kind).await {
                if matches!(kind, AckKind::Ack) {
                    warn!(error = %e, "cannot send the ack; the message will be handed out again");
                }
            }
            return;
        }
        // The nak's delay as asked, before the server's extra is added.
        let asked = kind;
        let kind = match kind {
            AckKind::Nak(Some(wanted)) => AckKind::Nak(Some(wanted + self.nak_extra)),
            other => other,
        };
        let started = Instant::now();
        let retry_until = nak_retry_until(started, &asked);
        let mut delay = RetryDelay::new(Duration::from_millis(100), Duration::from_secs(2));
        loop {
            let unheard = match self.settle_once(kind).await {
                Ok(()) => return,
                Err(e) => e,
            };
            let wait = delay.next_delay();
            let retry_at = Instant::now() + wait;
            if started.elapsed() + wait > SETTLE_BUDGET
                || !self.held.holds_at(retry_at)
                || !self.settling.holds_at(retry_at)
                || !may_send_again(unheard.kind(), retry_at, retry_until)
            {
                warn!(error = %unheard, tried_ms = started.elapsed().as_millis() as u64, "cannot settle due message; it will be handed out again");
                return;
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// Send a nak or a term once, as a request the consumer's leader
    /// answers. While the consumer elects a leader nobody subscribes to its
    /// acks, and the server answers "no responders" at once: then nothing
    /// took it, and it may be sent again. (async-nats' `double_ack_with`
    /// takes that answer for a confirmation: every nak sent during an
    /// election was lost, and its fire came back only after the ack wait,
    /// 11 s late in the leader-kill runs.)
    async fn settle_once(&self, kind: AckKind) -> Result<(), async_nats::RequestError> {
        let Some(reply) = self.message.reply.clone() else {
            return Ok(());
        };
        let request = async_nats::Request::new()
            .payload(kind.into())
            .timeout(Some(SETTLE_ANSWER_WITHIN));
        self.client.send_request(reply, request).await.map(drop)
    }
}

/// Until when a settle first sent at `sent` may be sent again: a nak within
/// the first half of its delay (one without a delay, never), so that no
/// retry reaches the server after the delivery it hands on; a term as long
/// as the lease holds.
fn nak_retry_until(sent: Instant, kind: &AckKind) -> Option<Instant> {
    match kind {
        AckKind::Nak(delay) => Some(sent + delay.unwrap_or_default() / 2),
        _ => None,
    }
}

/// Whether a nak or term whose sending ended with `unheard` may be sent
/// again at `retry_at`: where nobody took it (no consumer leader), or
/// before `retry_until` ([`nak_retry_until`]); an unanswered one may have
/// been taken.
fn may_send_again(
    unheard: async_nats::RequestErrorKind,
    retry_at: Instant,
    retry_until: Option<Instant>,
) -> bool {
    unheard == async_nats::RequestErrorKind::NoResponders
        || retry_until.is_none_or(|until| retry_at < until)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settle_nobody_took_is_sent_again_and_an_unanswered_nak_only_within_its_window() {
        use async_nats::RequestErrorKind::{NoResponders, TimedOut};
        let now = Instant::now();
        let until = Some(now + Duration::from_secs(1));
        let later = now + Duration::from_secs(2);
        assert!(may_send_again(NoResponders, later, until));
        assert!(may_send_again(TimedOut, now, until));
        assert!(!may_send_again(TimedOut, later, until));
        // A term: as long as the leases hold.
        assert!(may_send_again(TimedOut, later, None));
    }

    #[test]
    fn a_nak_is_retried_only_within_half_its_delay_and_a_term_while_the_lease_holds() {
        let sent = Instant::now();
        assert_eq!(
            nak_retry_until(sent, &AckKind::Nak(Some(Duration::from_secs(2)))),
            Some(sent + Duration::from_secs(1))
        );
        assert_eq!(nak_retry_until(sent, &AckKind::Nak(None)), Some(sent));
        assert_eq!(nak_retry_until(sent, &AckKind::Term), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_holds_until_its_margin_before_the_ack_wait_ends() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(10));
        assert_eq!(lease.margin(), Duration::from_millis(1_500));
        assert!(lease.holds());
        tokio::time::advance(Duration::from_millis(8_400)).await;
        assert!(lease.holds(), "1.6 s left");
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(!lease.holds(), "1.4 s left is within the margin");
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_ack_wait_keeps_a_quarter_back() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(3));
        assert_eq!(lease.margin(), Duration::from_millis(750));
        assert_eq!(lease.renewal_time(), Duration::from_millis(750));
        assert_eq!(
            lease.renew_by(),
            Instant::now() + Duration::from_millis(1_500)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_counts_from_when_it_was_sent_and_never_shortens() {
        let start = Instant::now();
        let lease = Lease::new(start, Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(6)).await;
        lease.restarted_at(start + Duration::from_secs(5));
        assert_eq!(lease.left(), Duration::from_secs(9));
        lease.restarted_at(start + Duration::from_secs(1));
        assert_eq!(
            lease.left(),
            Duration::from_secs(9),
            "an older renewal changes nothing"
        );
        assert!(lease.holds_at(start + Duration::from_millis(13_400)));
        assert!(!lease.holds_at(start + Duration::from_millis(13_600)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_past_the_ack_wait_loses_the_lease() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(15));
        tokio::time::advance(Duration::from_secs(40)).await;
        assert!(!lease.holds());
        assert_eq!(lease.left(), Duration::ZERO);
    }
}
