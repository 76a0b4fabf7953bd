//! Which keep-alives a consumer's leader took.
//!
//! A keep-alive (a progress ack) is sent without waiting for an answer: its
//! leases must not wait on one ([`crate::lease`]). But the lease that lets
//! a delivery hand its fire on (a nak, a term) may count only keep-alives a
//! consumer leader took: one sent while the consumer elects a leader reaches
//! nobody, the new leader counts the delivery from its last replicated time,
//! and a nak sent after that leader handed the fire out again is taken as a
//! nak of the new delivery (nats-server looks a nak up by stream sequence),
//! whose call it hands out a third time.
//!
//! So each keep-alive carries a reply subject under this executor's inbox
//! (`<inbox>.<number>`), the leader's empty answer confirms it, and
//! nats-server's "no responders" status (nobody subscribed to the
//! consumer's acks: no leader) says it reached nobody. One subscription
//! routes every answer by its number, the way the replies of booked calls
//! are found ([`instant_replies::number_of`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use async_nats::StatusCode;
use futures::StreamExt as _;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::instant_replies;

/// How long a keep-alive's answer is waited for; later ones are dropped.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// The answers expected, by number.
pub struct AckReplies {
    inbox: String,
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<bool>>>,
}

/// An answer expected for the ack sent with [`Expected::reply`].
pub struct Expected {
    replies: Arc<AckReplies>,
    number: u64,
    answer: oneshot::Receiver<bool>,
    /// The reply subject the ack carries.
    pub reply: String,
}

impl AckReplies {
    /// The answers of acks sent through `client`, and the subscription
    /// [`AckReplies::route`] reads them from.
    pub async fn subscribe(
        client: &async_nats::Client,
    ) -> anyhow::Result<(Arc<Self>, async_nats::Subscriber)> {
        let inbox = client.new_inbox();
        let subscriber = client
            .subscribe(format!("{inbox}.*"))
            .await
            .context("subscribe to the answers of keep-alives")?;
        let replies = Arc::new(Self {
            inbox,
            next: AtomicU64::new(0),
            waiting: Mutex::new(HashMap::new()),
        });
        Ok((replies, subscriber))
    }

    /// Expect the answer of one ack.
    pub fn expect(self: &Arc<Self>) -> Expected {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let (sender, answer) = oneshot::channel();
        self.lock().insert(number, sender);
        Expected {
            replies: self.clone(),
            number,
            answer,
            reply: format!("{}.{number}", self.inbox),
        }
    }

    /// Hand every answer to the ack it belongs to, until `stop` (the client
    /// subscribes again by itself after a reconnect).
    pub async fn route(&self, mut answers: async_nats::Subscriber, stop: CancellationToken) {
        loop {
            let message = tokio::select! {
                _ = stop.cancelled() => return,
                message = answers.next() => match message {
                    Some(message) => message,
                    None => return,
                },
            };
            let Some(number) = instant_replies::number_of(&message.subject, &self.inbox) else {
                continue;
            };
            if let Some(sender) = self.lock().remove(&number) {
                let _ = sender.send(taken(message.status));
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<bool>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Expected {
    /// Whether a consumer leader took the ack: `false` when nobody did or
    /// no answer came within [`ANSWER_WITHIN`].
    pub async fn taken(mut self) -> bool {
        matches!(
            tokio::time::timeout(ANSWER_WITHIN, &mut self.answer).await,
            Ok(Ok(true))
        )
    }
}

impl Drop for Expected {
    fn drop(&mut self) {
        self.replies.lock().remove(&self.number);
    }
}

/// Whether an answer with `status` means a consumer leader took the ack:
/// any answer but "no responders".
fn taken(status: Option<StatusCode>) -> bool {
    status != Some(StatusCode::NO_RESPONDERS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_answer_but_no_responders_is_taken() {
        assert!(taken(None));
        assert!(taken(Some(StatusCode::OK)));
        assert!(!taken(Some(StatusCode::NO_RESPONDERS)));
    }
}
