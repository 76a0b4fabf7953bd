//! Due events stored ahead of their time, held until it comes.
//!
//! With the ticker's `--lookahead` a fire is in `JETCRON_DUE` seconds before
//! it is due (header `Jetcron-Fire-At`), so that a leader election of the
//! stream at the scheduled instant delays nothing. The executor that pulls
//! it keeps it without an in-flight slot, sends progress acks so JetStream
//! does not hand it to another executor, and starts the attempt at its
//! instant with a slot like any other. On shutdown it hands the message back
//! with a delay of the time left, so another executor gets it in time.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use chrono::{DateTime, Utc};
use jetcron_io::due;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::ExecutorContext;

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
    tokio::select! {
        permit = permits.clone().acquire_owned() => permit.ok(),
        _ = shutdown.cancelled() => {
            let _ = message.ack_with(AckKind::Nak(None)).await;
            None
        }
    }
}

/// Sleep until `fire_at` in steps of the progress interval, keeping the
/// message alive; `false` when shutdown came first.
pub(crate) async fn hold_until(
    ctx: &ExecutorContext,
    message: &Message,
    fire_at: DateTime<Utc>,
    shutdown: &CancellationToken,
) -> bool {
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
            _ = shutdown.cancelled() => {
                debug!(left_ms = left.as_millis() as u64, "shutting down, handing a held due event back");
                let _ = message.ack_with(AckKind::Nak(Some(left.max(Duration::from_millis(1))))).await;
                return false;
            }
        }
    }
}
