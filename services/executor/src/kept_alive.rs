//! Progress acks while a delivery waits for something other than its
//! target: a history search, a free slot. Left without word past
//! `ack_wait`, JetStream hands the message to another delivery, and both
//! may call the target.

use async_nats::jetstream::{AckKind, Message};

use crate::ExecutorContext;

/// Await `work` while telling JetStream every `progress_interval` that
/// `message` is still worked on.
pub(crate) async fn kept_alive<T>(
    ctx: &ExecutorContext,
    message: &Message,
    work: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(work);
    let mut ticks = tokio::time::interval(ctx.config.progress_interval);
    ticks.tick().await; // the first tick is now
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = ticks.tick() => {
                let _ = message.ack_with(AckKind::Progress).await;
            }
        }
    }
}
