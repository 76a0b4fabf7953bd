//! How long JetStream leaves a due event to the executor it delivered it
//! to: a first delivery the ack wait, a redelivery a shorter wait.
//!
//! A first delivery comes up to the lookahead before its instant and is
//! held until then, so its ack wait is the lookahead and 3 s: a fire held
//! by an executor that dies comes to another about 3 s after its instant,
//! with no keep-alive spent on it meanwhile. A redelivery comes at or after
//! its instant; with the same wait, one lost on its way (its consumer
//! leader's or its executor's node killed as it was sent) came back 13 s
//! later, and its fire was first called 16-17 s late (issue 39, the
//! one-at-a-time and leader-kill scenarios: p99 13.4 s, a run at 34.5 s).
//! So the pool's consumer carries a `backoff` of two waits, the ack wait
//! for the first delivery and the redelivery wait for every later one
//! (nats-server counts a message's wait from `BackOff[redeliveries]`,
//! the last entry standing for the rest), and a redelivery is kept alive as
//! often as its shorter lease needs.
//!
//! One quirk of the server is met here: a nak with a delay restarts the
//! message's clock as if the ack wait (`BackOff[0]`) had passed, then counts
//! the entry of the delivery's own number, so a redelivery nak'd for 5 s
//! came back after 5 s less the difference of the two waits
//! (`server/consumer.go`, `processNak`: `now - AckWait + delay`;
//! `checkPending`: `BackOff[rdc]`). [`AckDeadlines::nak_extra`] is that
//! difference back.

use std::time::Duration;

/// The waits of a pool's consumer: before a first delivery and before each
/// later one is handed to another executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckDeadlines {
    /// The consumer's ack wait, for a message's first delivery.
    pub first: Duration,
    /// For every later delivery (no longer than `first`).
    pub redelivered: Duration,
}

impl AckDeadlines {
    /// `first` for first deliveries, `redelivered` (at most `first`) for
    /// the rest.
    pub fn new(first: Duration, redelivered: Duration) -> Self {
        Self {
            first,
            redelivered: redelivered.min(first),
        }
    }

    /// The waits a consumer's configuration makes: its ack wait, or its
    /// `backoff` where it has one (the last entry counts for every later
    /// delivery).
    pub fn of_consumer(ack_wait: Duration, backoff: &[Duration]) -> Self {
        match backoff {
            [] => Self::new(ack_wait, ack_wait),
            [only] => Self::new(*only, *only),
            [first, .., last] => Self::new(*first, *last),
        }
    }

    /// The consumer's `backoff` for these waits (none when they are equal).
    pub fn backoff(&self) -> Vec<Duration> {
        if self.redelivered < self.first {
            vec![self.first, self.redelivered]
        } else {
            Vec::new()
        }
    }

    /// The shorter of each of the two waits: an executor whose own
    /// settings are shorter than its consumer's counts with them.
    pub fn min(self, other: Self) -> Self {
        Self::new(
            self.first.min(other.first),
            self.redelivered.min(other.redelivered),
        )
    }

    /// The wait of a message's `delivered`-th delivery (1: the first).
    pub fn for_delivery(&self, delivered: i64) -> Duration {
        if delivered <= 1 {
            self.first
        } else {
            self.redelivered
        }
    }

    /// The shortest wait any delivery has.
    pub fn shortest(&self) -> Duration {
        self.redelivered
    }

    /// What a nak of the `delivered`-th delivery adds to the delay it asks
    /// for the message to come back after that delay (see the module docs).
    pub fn nak_extra(&self, delivered: i64) -> Duration {
        self.first - self.for_delivery(delivered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S13: Duration = Duration::from_secs(13);
    const S4: Duration = Duration::from_secs(4);

    #[test]
    fn a_first_delivery_has_the_ack_wait_and_every_later_one_the_redelivery_wait() {
        let waits = AckDeadlines::new(S13, S4);
        assert_eq!(waits.for_delivery(1), S13);
        assert_eq!(waits.for_delivery(2), S4);
        assert_eq!(waits.for_delivery(9), S4);
        assert_eq!(waits.backoff(), vec![S13, S4]);
        assert_eq!(waits.shortest(), S4);
    }

    #[test]
    fn a_consumer_without_backoff_has_one_wait_and_asks_naks_as_they_are() {
        let waits = AckDeadlines::of_consumer(S13, &[]);
        assert_eq!(waits, AckDeadlines::new(S13, S13));
        assert!(waits.backoff().is_empty());
        assert_eq!(S4 + waits.nak_extra(3), S4);
    }

    #[test]
    fn a_consumer_backoff_reads_back_as_the_waits_it_was_made_from() {
        let waits = AckDeadlines::new(S13, S4);
        assert_eq!(AckDeadlines::of_consumer(S13, &waits.backoff()), waits);
        assert_eq!(
            AckDeadlines::of_consumer(S13, &[S13, Duration::from_secs(8), S4]),
            waits,
            "the last entry counts for every later delivery"
        );
    }

    #[test]
    fn a_redelivery_wait_longer_than_the_ack_wait_is_the_ack_wait() {
        let waits = AckDeadlines::new(S4, S13);
        assert_eq!(waits.redelivered, S4);
        assert!(waits.backoff().is_empty());
    }

    #[test]
    fn a_redeliverys_nak_asks_the_difference_of_the_waits_more() {
        let waits = AckDeadlines::new(S13, S4);
        let five = Duration::from_secs(5);
        assert_eq!(five + waits.nak_extra(1), five);
        assert_eq!(five + waits.nak_extra(2), Duration::from_secs(14));
    }
}
