//! Keep-alives while a delivery waits for something other than its
//! target: a history search, a free slot, a claim. Left without word past
//! `ack_wait`, JetStream hands the message to another delivery, and both
//! may call the target.

use crate::lease::Delivery;
use crate::ExecutorContext;

/// Await `work` while keeping `message` alive every `progress_interval`
/// (confirmed keep-alives, which renew its lease: [`crate::lease`]).
pub(crate) async fn kept_alive<T>(
    ctx: &ExecutorContext,
    message: &Delivery,
    work: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(work);
    // Beside the work, not in turn with it: a keep-alive waiting for its
    // confirmation must not hold back what the work returns.
    let keeping = message.keep_alive_every(ctx.config.progress_interval);
    tokio::pin!(keeping);
    tokio::select! {
        done = &mut work => done,
        never = &mut keeping => match never {},
    }
}
