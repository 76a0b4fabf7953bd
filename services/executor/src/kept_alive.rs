//! Keep-alives while a delivery waits for something other than its
//! target: a history search, a free slot, a claim. Left without word past
//! `ack_wait`, JetStream hands the message to another delivery, and both
//! may call the target.

use std::time::Duration;

use jetcron_io::retry::RetryDelay;
use tokio::time::Instant;
use tracing::debug;

use crate::lease::Delivery;
use crate::ExecutorContext;

/// How long a lookup is tried again in place while NATS answers nothing
/// or "no leader": longer than an election (4-9 s, 12 s seen with a hung
/// node). Handed back instead, a delivery came again after a delay that
/// grows with each delivery, and each came to a lookup that failed again
/// (fires 70 s late, their 21st delivery, after a node hung for 15 s).
pub(crate) const THROUGH_ELECTIONS: Duration = Duration::from_secs(15);

/// Await `work` while keeping `message` alive every `progress_interval`
/// (confirmed keep-alives, which renew its lease: [`crate::lease`]).
pub(crate) async fn kept_alive<T>(
    ctx: &ExecutorContext,
    message: &Delivery,
    work: impl std::future::Future<Output = T>,
) -> T {
    message
        .while_kept_alive(ctx.config.progress_interval, work)
        .await
}

/// `lookup` (a read in `JETCRON_RUNS` or `jetcron_running`), tried again
/// while it fails, for up to [`THROUGH_ELECTIONS`] and while the delivery
/// is ours, keeping it alive meanwhile; its last error when it never
/// answered.
pub(crate) async fn through_elections<T, F, Fut>(
    ctx: &ExecutorContext,
    message: &Delivery,
    what: &str,
    mut lookup: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let started = Instant::now();
    let mut delay = RetryDelay::new(Duration::from_millis(100), Duration::from_secs(1));
    loop {
        let error = match kept_alive(ctx, message, lookup()).await {
            Ok(found) => return Ok(found),
            Err(error) => error,
        };
        let wait = delay.next_delay();
        if started.elapsed() + wait > THROUGH_ELECTIONS || !message.is_ours() {
            return Err(error);
        }
        debug!(what, error = %format!("{error:#}"), "lookup failed, trying again in place");
        kept_alive(ctx, message, tokio::time::sleep(wait)).await;
    }
}
