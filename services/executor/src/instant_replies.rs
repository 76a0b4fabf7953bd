//! Which reply belongs to which call sent at an instant, and when each is
//! handed to its attempt ([`crate::instant_calls`] sends the calls).
//!
//! Each call's reply subject ends with its booking number, so a reply is
//! found by number. The replies of one instant's calls (a burst) are held
//! until every call of it has ended, or until [`BURST_WAIT`] after the
//! burst was sent: the last reply means the target has had every request,
//! so recording the first outcomes (a run event and an ack each) does not
//! compete with calls still on their way. A call whose attempt stopped
//! waiting (killed, timed out) counts as ended at the next sweep.

use std::collections::{BTreeMap, HashMap};

use async_nats::{Message, RequestError, RequestErrorKind, StatusCode};
use jetcron_core::control::KillMarker;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Longest a reply waits for the other calls of its instant to end.
pub const BURST_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// What became of a booked call at its instant.
pub enum Dispatched {
    /// Sent; the reply, or why there is none.
    Reply(Result<Message, RequestError>),
    /// Not sent: the run was killed before its instant.
    Killed(KillMarker),
    /// Not sent: the kill request could not be looked up.
    Unchecked(String),
    /// Not sent, for the reason given: the delivery's lease ran out
    /// ([`crate::lease`]).
    Withheld(String),
}

/// A call sent and not answered yet.
struct Sent {
    answer: oneshot::Sender<Dispatched>,
    burst: u64,
}

/// The calls of one instant: how many are still out, and the replies held
/// until none is (or until `release`).
struct Burst {
    going: usize,
    held: Vec<(oneshot::Sender<Dispatched>, Message)>,
    release: Instant,
}

/// The calls out, and their instants.
#[derive(Default)]
pub struct Out {
    calls: HashMap<u64, Sent>,
    bursts: BTreeMap<u64, Burst>,
    next_burst: u64,
}

impl Out {
    /// A new burst, released at the latest at `release`. It counts as
    /// going until [`Out::handed`]: a call that ends while the burst is
    /// still handed over must not end it.
    pub fn open(&mut self, release: Instant) -> u64 {
        self.next_burst += 1;
        self.bursts.insert(
            self.next_burst,
            Burst {
                going: 1,
                held: Vec::new(),
                release,
            },
        );
        self.next_burst
    }

    pub fn sent(&mut self, number: u64, answer: oneshot::Sender<Dispatched>, burst: u64) {
        if let Some(b) = self.bursts.get_mut(&burst) {
            b.going += 1;
        }
        self.calls.insert(number, Sent { answer, burst });
    }

    /// A reply came for call `number`: held with its burst's others, or
    /// answered at once when it was the last (or the burst is released).
    pub fn replied(&mut self, number: u64, reply: Message, now: Instant) {
        let Some(Sent { answer, burst }) = self.calls.remove(&number) else {
            return; // a late reply of a call its attempt gave up on
        };
        match self.bursts.get_mut(&burst) {
            Some(b) if b.release > now => b.held.push((answer, reply)),
            _ => {
                let _ = answer.send(Dispatched::Reply(as_reply(reply)));
            }
        }
        self.count_out(burst, 1);
    }

    /// `n` calls of `burst` ended; once none is out, its held replies are
    /// answered.
    fn count_out(&mut self, burst: u64, n: usize) {
        let Some(b) = self.bursts.get_mut(&burst) else {
            return;
        };
        b.going = b.going.saturating_sub(n);
        if b.going == 0 {
            if let Some(b) = self.bursts.remove(&burst) {
                answer_all(b.held);
            }
        }
    }

    /// The handing over of `burst` ended: it ends now if none of its calls
    /// is still out.
    pub fn handed(&mut self, burst: u64) {
        self.count_out(burst, 1);
    }

    /// Call `number` could not be sent: its attempt gets `error`.
    pub fn failed(&mut self, number: u64, error: RequestError) {
        if let Some(Sent { answer, burst }) = self.calls.remove(&number) {
            let _ = answer.send(Dispatched::Reply(Err(error)));
            self.count_out(burst, 1);
        }
    }

    /// No reply can come any more (the replies' subscription ended): every
    /// call out gets `why` as its error, every held reply goes.
    pub fn fail_all(&mut self, why: &str) {
        for (_, Sent { answer, .. }) in self.calls.drain() {
            let error = RequestError::with_source(RequestErrorKind::Other, why.to_string());
            let _ = answer.send(Dispatched::Reply(Err(error)));
        }
        for (_, b) in std::mem::take(&mut self.bursts) {
            answer_all(b.held);
        }
    }

    /// Answer the held replies of bursts released by `now`, and forget the
    /// calls whose attempts stopped waiting.
    pub fn sweep(&mut self, now: Instant) {
        for b in self.bursts.values_mut() {
            if b.release <= now {
                answer_all(std::mem::take(&mut b.held));
            }
        }
        let mut gone: HashMap<u64, usize> = HashMap::new();
        self.calls.retain(|_, sent| {
            let closed = sent.answer.is_closed();
            if closed {
                *gone.entry(sent.burst).or_default() += 1;
            }
            !closed
        });
        for (burst, n) in gone {
            self.count_out(burst, n);
        }
    }

    /// When the next sweep is due, while anything is out: the next release
    /// of a burst, or [`BURST_WAIT`] from `now` (to forget the calls given
    /// up on), whichever comes first.
    pub fn next_sweep(&self, now: Instant) -> Option<Instant> {
        if self.calls.is_empty() && self.bursts.is_empty() {
            return None;
        }
        let releases = self.bursts.values().map(|b| b.release);
        releases
            .filter(|release| *release > now)
            .chain([now + BURST_WAIT])
            .min()
    }
}

fn answer_all(held: Vec<(oneshot::Sender<Dispatched>, Message)>) {
    for (answer, reply) in held {
        let _ = answer.send(Dispatched::Reply(as_reply(reply)));
    }
}

/// A reply as a request's result: the server's "no responders" status is
/// an error, as `Client::request` makes it.
fn as_reply(reply: Message) -> Result<Message, RequestError> {
    if reply.status == Some(StatusCode::NO_RESPONDERS) {
        Err(RequestError::with_source(
            RequestErrorKind::NoResponders,
            "no responders",
        ))
    } else {
        Ok(reply)
    }
}

/// The booking number a reply subject ends with.
pub fn number_of(subject: &str, inbox: &str) -> Option<u64> {
    subject.strip_prefix(inbox)?.strip_prefix('.')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn reply(number: u64) -> Message {
        Message {
            subject: format!("_INBOX.x.{number}").into(),
            reply: None,
            payload: Bytes::from_static(b"ok"),
            headers: None,
            status: None,
            description: None,
            length: 2,
        }
    }

    type Answer = oneshot::Receiver<Dispatched>;

    /// Calls 1 and 2 sent in one burst released at `now + BURST_WAIT`,
    /// handed over.
    fn two_calls_sent(now: Instant) -> (Out, Answer, Answer) {
        let mut out = Out::default();
        let burst = out.open(now + BURST_WAIT);
        let (first, first_rx) = oneshot::channel();
        let (second, second_rx) = oneshot::channel();
        out.sent(1, first, burst);
        out.sent(2, second, burst);
        out.handed(burst);
        (out, first_rx, second_rx)
    }

    fn answered(receiver: &mut oneshot::Receiver<Dispatched>) -> bool {
        match receiver.try_recv() {
            Ok(Dispatched::Reply(Ok(_))) => true,
            Ok(_) => panic!("not a reply"),
            Err(_) => false,
        }
    }

    #[test]
    fn replies_wait_for_the_last_call_of_their_instant() {
        let now = Instant::now();
        let (mut out, mut first_rx, mut second_rx) = two_calls_sent(now);
        out.replied(1, reply(1), now);
        assert!(
            !answered(&mut first_rx),
            "held while the second call is out"
        );
        out.replied(2, reply(2), now);
        assert!(answered(&mut first_rx) && answered(&mut second_rx));
        assert!(out.calls.is_empty() && out.bursts.is_empty());
        assert_eq!(out.next_sweep(now), None);
    }

    #[test]
    fn held_replies_go_at_the_release_and_later_ones_at_once() {
        let now = Instant::now();
        let (mut out, mut first_rx, mut slow_rx) = two_calls_sent(now);
        out.replied(1, reply(1), now);
        out.sweep(now + BURST_WAIT / 2);
        assert!(!answered(&mut first_rx));
        out.sweep(now + BURST_WAIT);
        assert!(answered(&mut first_rx), "released");
        out.replied(2, reply(2), now + BURST_WAIT * 3);
        assert!(answered(&mut slow_rx), "after the release, at once");
        assert!(out.calls.is_empty() && out.bursts.is_empty());
    }

    #[test]
    fn a_call_given_up_on_ends_for_its_burst_and_its_late_reply_changes_nothing() {
        let now = Instant::now();
        let (mut out, mut first_rx, gone_rx) = two_calls_sent(now);
        out.replied(1, reply(1), now);
        drop(gone_rx);
        out.sweep(now);
        assert!(answered(&mut first_rx), "the other call ended: not waiting");
        out.replied(2, reply(2), now);
        assert!(out.calls.is_empty() && out.bursts.is_empty());
    }

    #[test]
    fn a_call_that_fails_while_its_burst_is_handed_over_does_not_end_it() {
        let now = Instant::now();
        let mut out = Out::default();
        let burst = out.open(now + BURST_WAIT);
        let (failing, mut failing_rx) = oneshot::channel();
        let (second, mut second_rx) = oneshot::channel();
        out.sent(1, failing, burst);
        out.failed(1, RequestError::new(RequestErrorKind::Other));
        assert!(matches!(
            failing_rx.try_recv(),
            Ok(Dispatched::Reply(Err(_)))
        ));
        out.sent(2, second, burst);
        out.handed(burst);
        assert!(out.bursts.contains_key(&burst), "call 2 is out");
        out.replied(2, reply(2), now);
        assert!(answered(&mut second_rx));
        assert!(out.bursts.is_empty());
    }

    #[test]
    fn the_next_sweep_comes_at_a_bursts_release_when_that_is_sooner() {
        let now = Instant::now();
        let (mut out, _first_rx, _second_rx) = two_calls_sent(now);
        assert_eq!(out.next_sweep(now), Some(now + BURST_WAIT));
        let later = now + BURST_WAIT / 2;
        let burst = out.open(later + BURST_WAIT);
        let (third, _third_rx) = oneshot::channel();
        out.sent(3, third, burst);
        out.handed(burst);
        // At `now + BURST_WAIT` the first burst is released; the second's
        // release then comes before another full wait.
        let at = now + BURST_WAIT;
        out.sweep(at);
        assert_eq!(out.next_sweep(at), Some(later + BURST_WAIT));
    }

    #[test]
    fn when_replies_can_no_longer_come_every_call_out_fails() {
        let now = Instant::now();
        let (mut out, mut first_rx, mut second_rx) = two_calls_sent(now);
        out.replied(1, reply(1), now);
        out.fail_all("the connection is closed");
        assert!(answered(&mut first_rx), "its reply had come");
        assert!(matches!(
            second_rx.try_recv(),
            Ok(Dispatched::Reply(Err(_)))
        ));
        assert!(out.calls.is_empty() && out.bursts.is_empty());
    }

    #[test]
    fn a_burst_of_no_call_is_gone_once_handed_over() {
        let mut out = Out::default();
        let burst = out.open(Instant::now());
        out.handed(burst);
        assert!(out.bursts.is_empty());
    }

    #[test]
    fn no_responders_is_an_error_and_reply_numbers_are_read_back() {
        let mut status = reply(1);
        status.status = Some(StatusCode::NO_RESPONDERS);
        assert!(matches!(
            as_reply(status).map_err(|e| e.kind()),
            Err(RequestErrorKind::NoResponders)
        ));
        assert!(as_reply(reply(1)).is_ok());
        assert_eq!(number_of("_INBOX.abc.17", "_INBOX.abc"), Some(17));
        assert_eq!(number_of("_INBOX.abcd.17", "_INBOX.abc"), None);
        assert_eq!(number_of("_INBOX.abc.x", "_INBOX.abc"), None);
    }
}
