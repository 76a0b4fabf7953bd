//! The pull loop of the executor's helper consumers (notifications, chains):
//! take messages one by one until shutdown, and when the consumer has no
//! leader (every pull fails at once with "no responders") wait longer each
//! time and say so once in a while.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::{consumer::PullConsumer, Message};
use futures::StreamExt as _;
use jetcron_io::retry::{LogLimiter, RetryDelay};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Hand every message of `consumer` to `handle`, one at a time, in batches
/// of up to `batch`, until `shutdown`. `what` names the messages in logs.
pub async fn each_message<F, Fut>(
    consumer: &PullConsumer,
    what: &'static str,
    batch: usize,
    shutdown: &CancellationToken,
    mut handle: F,
) where
    F: FnMut(Message) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut delay = RetryDelay::nats();
    let mut failures = LogLimiter::per_10s();
    while !shutdown.is_cancelled() {
        let mut messages = match consumer
            .stream()
            .max_messages_per_batch(batch)
            .heartbeat(Duration::from_secs(5))
            .expires(Duration::from_secs(30))
            .messages()
            .await
        {
            Ok(m) => m,
            Err(e) => {
                if let Some(failures) = failures.admit() {
                    warn!(error = %e, failures, "cannot pull {what}, retrying");
                }
                if delay.sleep(shutdown).await {
                    break;
                }
                continue;
            }
        };
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return,
                next = messages.next() => next,
            };
            match next {
                Some(Ok(message)) => {
                    delay.reset();
                    failures.reset();
                    handle(message).await;
                }
                Some(Err(e)) => {
                    if let Some(failures) = failures.admit() {
                        warn!(error = %e, failures, "pulling {what} failed, reopening");
                    }
                    break;
                }
                None => break,
            }
        }
        if delay.sleep(shutdown).await {
            break;
        }
    }
}
