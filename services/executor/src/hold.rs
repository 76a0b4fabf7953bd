//! Due events stored ahead of their time, held until it comes.
//!
//! With the ticker's `--lookahead` a fire is in `JETCRON_DUE` seconds before
//! it is due (header `Jetcron-Fire-At`), so that a leader election of the
//! stream at the scheduled instant delays nothing. The executor that pulls
//! it keeps it without an in-flight slot, sends progress acks so JetStream
//! does not hand it to another executor, and starts the attempt at its
//! instant with a slot like any other. On shutdown it runs the events due
//! within a few seconds ([`HAND_BACK_AHEAD`]) and hands the others back to
//! come to another executor that long before their instants.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use chrono::{DateTime, Utc};
use jetcron_io::due;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::ExecutorContext;

/// At a shutdown, a held due event whose instant is further off than this
/// is handed back to come to another executor this long before it, to be
/// held there in turn; one due sooner is run here, within the shutdown's
/// grace. Handed back with all its time left, an event came back late: the
/// server's redelivery of a delayed nak and the next executor's pull took
/// 0.9-3.4 s past the instant on a 3-node cluster, up to 8.6 s on one
/// server; one handed back at once still reached the other executor only
/// with its next pull, up to 4.8 s later.
const HAND_BACK_AHEAD: Duration = Duration::from_secs(5);

/// The time from now to `fire_at` (zero once it passed).
fn time_left(ctx: &ExecutorContext, fire_at: DateTime<Utc>) -> Duration {
    (fire_at - ctx.clock.now()).to_std().unwrap_or_default()
}

/// At a shutdown with `left` before a held event's instant: the delay of
/// its nak, or `None` to run it here.
fn hand_back_delay(left: Duration) -> Option<Duration> {
    left.checked_sub(HAND_BACK_AHEAD).filter(|d| !d.is_zero())
}

/// Events due this soon are not worth holding apart.
const SLACK: chrono::Duration = chrono::Duration::milliseconds(5);

/// When `message` may start, if that is still to come.
pub fn until(ctx: &ExecutorContext, message: &Message) -> Option<DateTime<Utc>> {
    due::fire_at(message.headers.as_ref()).filter(|at| *at > ctx.clock.now() + SLACK)
}

/// Hold `message` until `fire_at`, then wait for an in-flight slot; `None`
/// when shutdown came first (the message is handed back).
pub async fn wait(
    ctx: &ExecutorContext,
    message: &Message,
    fire_at: DateTime<Utc>,
    permits: &Arc<Semaphore>,
    shutdown: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    let held = metrics::gauge!("jetcron_executor_held");
    held.increment(1.0);
    let ready = hold_until(ctx, message, fire_at, shutdown).await;
    held.decrement(1.0);
    if !ready {
        return None;
    }
    // Held through a shutdown to be run here: it waits for its slot.
    let run_here = shutdown.is_cancelled();
    tokio::select! {
        biased;
        permit = permits.clone().acquire_owned() => permit.ok(),
        _ = shutdown.cancelled(), if !run_here => {
            let _ = message.ack_with(AckKind::Nak(None)).await;
            None
        }
    }
}

/// Sleep until `fire_at` in steps of the progress interval, keeping the
/// message alive; `false` when a shutdown handed it back. At a shutdown an
/// event due within [`HAND_BACK_AHEAD`] is held on, to be run here.
pub(crate) async fn hold_until(
    ctx: &ExecutorContext,
    message: &Message,
    fire_at: DateTime<Utc>,
    shutdown: &CancellationToken,
) -> bool {
    let mut run_here = false;
    loop {
        let Ok(left) = (fire_at - ctx.clock.now()).to_std() else {
            return true;
        };
        if left.is_zero() {
            return true;
        }
        let step = left.min(ctx.config.progress_interval);
        tokio::select! {
            _ = tokio::time::sleep(step) => {
                if step < left {
                    let _ = message.ack_with(AckKind::Progress).await;
                }
            }
            // What is left now: `left` was taken when this step began, up
            // to a progress interval ago. (Handed back with that, events
            // came back that much late.)
            _ = shutdown.cancelled(), if !run_here => match hand_back_delay(time_left(ctx, fire_at)) {
                Some(delay) => {
                    debug!(delay_ms = delay.as_millis() as u64, "shutting down, handing a held due event back");
                    let _ = message.ack_with(AckKind::Nak(Some(delay))).await;
                    return false;
                }
                None => {
                    debug!("shutting down, a held due event is due soon enough to run here");
                    run_here = true;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_event_comes_back_ahead_of_its_instant() {
        let secs = Duration::from_secs;
        assert_eq!(hand_back_delay(secs(10)), Some(secs(5)));
        assert_eq!(
            hand_back_delay(secs(5)),
            None,
            "due within the margin: at once"
        );
        assert_eq!(hand_back_delay(Duration::from_millis(300)), None);
        assert_eq!(hand_back_delay(Duration::ZERO), None);
    }
}
