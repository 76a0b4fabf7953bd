//! Due events stored ahead of their time, held until it comes.
//!
//! With the ticker's `--lookahead` a fire is in `JETCRON_DUE` seconds before
//! it is due (header `Jetcron-Fire-At`), so that a leader election of the
//! stream at the scheduled instant delays nothing. The executor that pulls
//! it keeps it without an in-flight slot and starts the attempt at its
//! instant with a slot like any other. It keeps the delivery alive only when
//! its lease ([`crate::lease`]) would not otherwise reach past the instant,
//! and then as late as it can: each keep-alive also pushes back the moment
//! JetStream hands the fire to another executor if this one dies, so the
//! executors' ack wait (the lookahead and a few seconds) bounds how late a
//! dead executor's fires start. While every slot is busy at the instant it
//! keeps the delivery alive every progress interval. On shutdown it runs the
//! events due within a few seconds ([`HAND_BACK_AHEAD`]) and hands the
//! others back to come to another executor that long before their instants.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use chrono::{DateTime, Utc};
use jetcron_io::due;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::fair_slots::{FairSlots, SlotPermit};
use crate::lease::{Delivery, Lease};
use crate::ExecutorContext;

/// At a shutdown, a held due event whose instant is further off than this
/// is handed back to come to another executor this long before it, to be
/// held there in turn; one due sooner is run here when its instant comes
/// within the shutdown's grace (it then ends like any attempt running at a
/// stop: within the grace, or handed back when the grace is over), and is
/// handed back at once otherwise.
/// Handed back with all its time left, an event came back late: the
/// server's redelivery of a delayed nak and the next executor's pull took
/// 0.9-3.4 s past the instant on a 3-node cluster, up to 8.6 s on one
/// server. (Handed back at once, some events came back only after
/// `ack_wait`: the stopping executor's own pull request, still open at the
/// server, took them. Holds now hand back only after the pull loops read
/// their open requests to their ends; see `pull_loop`.)
const HAND_BACK_AHEAD: Duration = Duration::from_secs(5);

/// What a shutdown does with a held due event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AtShutdown {
    /// Hand it back, to come again after this delay (`None`: at once).
    HandBack(Option<Duration>),
    /// Hold it on and run it here, within the grace.
    RunHere,
}

/// With `left` before its instant and a shutdown `grace`. (Not the job's
/// timeout: by default 60 s, more than the default grace, while most calls
/// take milliseconds.)
fn at_shutdown(left: Duration, grace: Duration) -> AtShutdown {
    match left.checked_sub(HAND_BACK_AHEAD).filter(|d| !d.is_zero()) {
        Some(delay) => AtShutdown::HandBack(Some(delay)),
        // A second to call and store its outcome.
        None if left + Duration::from_secs(1) <= grace => AtShutdown::RunHere,
        None => AtShutdown::HandBack(None),
    }
}

/// The time from now to `fire_at` (zero once it passed).
fn time_left(ctx: &ExecutorContext, fire_at: DateTime<Utc>) -> Duration {
    (fire_at - ctx.clock.now()).to_std().unwrap_or_default()
}

/// Events due this soon are not worth holding apart.
const SLACK: chrono::Duration = chrono::Duration::milliseconds(5);

/// When `message` may start, if that is still to come.
pub fn until(
    ctx: &ExecutorContext,
    message: &async_nats::jetstream::Message,
) -> Option<DateTime<Utc>> {
    due::fire_at(message.headers.as_ref()).filter(|at| *at > ctx.clock.now() + SLACK)
}

/// Hold `message` until `fire_at`, counted in `jetcron_executor_held`;
/// `false` when it was handed back (a shutdown) or its lease lost.
pub async fn held_until(
    ctx: &ExecutorContext,
    message: &Delivery,
    fire_at: DateTime<Utc>,
    hand_back: &CancellationToken,
) -> bool {
    let held = metrics::gauge!("jetcron_executor_held");
    held.increment(1.0);
    let ready = hold_until(ctx, message, fire_at, hand_back).await;
    held.decrement(1.0);
    ready
}

/// A call slot of `namespace` for `message`, at once when the slots give
/// one, or after waiting its turn ([`crate::fair_slots`]); `None` when it
/// was handed back meanwhile (a shutdown) or its lease lost.
pub(crate) async fn free_slot(
    ctx: &ExecutorContext,
    message: &Delivery,
    slots: &Arc<FairSlots>,
    namespace: &str,
    hand_back: &CancellationToken,
) -> Option<SlotPermit> {
    if let Some(slot) = slots.try_take(namespace) {
        return Some(slot);
    }
    let waiting = metrics::gauge!("jetcron_executor_waiting_for_slot");
    waiting.increment(1.0);
    // Kept alive while it waits for a slot: every slot may stay busy past
    // `ack_wait`, and a message left without word meanwhile was delivered
    // again and called twice, once by each delivery (a 10 s run in the
    // only slot did it). Held through a shutdown to run here, it is handed
    // back if the grace ends first; otherwise at the shutdown.
    let stop = if hand_back.is_cancelled() {
        ctx.interrupt.cancelled()
    } else {
        hand_back.cancelled()
    };
    let slot = crate::kept_alive::kept_alive(ctx, message, async {
        tokio::select! {
            biased;
            slot = slots.take(namespace) => Some(slot),
            _ = stop => None,
        }
    })
    .await;
    waiting.decrement(1.0);
    match slot {
        // A lease lost while it waited: nothing more is done with it here.
        Some(_) if !message.is_ours() => None,
        Some(slot) => Some(slot),
        None => {
            message.settle(AckKind::Nak(None)).await;
            None
        }
    }
}

/// How long past its instant a held fire's lease must reach without a
/// keep-alive: the call and the outcome of a quick target (a longer run
/// keeps it alive itself).
const LEASE_PAST_INSTANT: Duration = Duration::from_secs(1);

/// When a held delivery must be kept alive for its lease to reach past its
/// `instant` (`None`: it reaches already). As early as that keep-alive
/// reaches (so that if this executor dies, the fire comes to another one
/// soon after its instant, not an ack wait after a keep-alive sent just
/// before it), and before the lease runs out meanwhile.
fn keep_alive_at(lease: &Lease, instant: Instant) -> Option<Instant> {
    let needed_until = instant + LEASE_PAST_INSTANT;
    if lease.holds_at(needed_until) {
        return None;
    }
    let reaching_from = (needed_until + lease.margin())
        .checked_sub(lease.ack_wait())
        .unwrap_or(instant);
    Some(reaching_from.max(Instant::now()).min(lease.renew_by()))
}

/// How long a held fire waits at its instant for the call gate to open.
/// Its calls' connection reconnects within a few hundred milliseconds of
/// its server's death, and handed back at once, the fires of that second
/// went to a nak the dead server never passed on: they came back only
/// after the ack wait, 8.7 s late (the leader-kill test). Well inside the
/// lease a held fire has past its instant ([`LEASE_PAST_INSTANT`] and the
/// margin).
const GATE_WAIT: Duration = Duration::from_secs(1);

/// How often a held fire looks at the call gate meanwhile.
const GATE_POLL: Duration = Duration::from_millis(50);

/// Why no call may go out, if the gate ([`crate::call_gate`]) stays closed
/// for [`GATE_WAIT`] or while the delivery's lease lasts.
async fn gate_closed_for_long(ctx: &ExecutorContext, message: &Delivery) -> Option<String> {
    closed_for_long(|| crate::call_gate::closed(ctx), || message.is_ours()).await
}

/// [`gate_closed_for_long`] from what it reads: why the gate is closed now
/// (`None`: open), and whether the delivery is still ours.
async fn closed_for_long(
    closed: impl Fn() -> Option<String>,
    ours: impl Fn() -> bool,
) -> Option<String> {
    let give_up = Instant::now() + GATE_WAIT;
    loop {
        let why = closed()?;
        if Instant::now() >= give_up || !ours() {
            return Some(why);
        }
        tokio::time::sleep(GATE_POLL).await;
    }
}

/// Sleep until `fire_at` (in steps of at most the progress interval, so a
/// wall clock that jumps is followed), keeping the delivery alive when its
/// lease would not reach past the instant; `false` when it was handed back,
/// or its lease ran out. At a shutdown an event due within
/// [`HAND_BACK_AHEAD`] and the grace is held on, to be run here, unless the
/// grace ends first.
pub(crate) async fn hold_until(
    ctx: &ExecutorContext,
    message: &Delivery,
    fire_at: DateTime<Utc>,
    hand_back: &CancellationToken,
) -> bool {
    let mut run_here = false;
    loop {
        let left = time_left(ctx, fire_at);
        if left.is_zero() {
            if let Some(why) = gate_closed_for_long(ctx, message).await {
                // Not called from here now (a clock that is off, a server
                // that does not answer): handed back, for another executor.
                info!(why, "handing a held due event back at its instant");
                message.settle(AckKind::Nak(None)).await;
                return false;
            }
            return message.is_ours();
        }
        let instant = Instant::now() + left;
        let keep_by = keep_alive_at(message.lease(), instant);
        let wake = keep_by.map_or(instant, |by| by.min(instant));
        let step = wake
            .saturating_duration_since(Instant::now())
            .min(ctx.config.progress_interval);
        // At a shutdown, what is left now: `left` was taken when this step
        // began, up to a progress interval ago. (Handed back with that,
        // events came back that much late.)
        let handing = tokio::select! {
            _ = tokio::time::sleep(step) => {
                let keep_now = keep_by.is_some_and(|by| Instant::now() >= by);
                if keep_now && !message.keep_until(instant + LEASE_PAST_INSTANT).await {
                    return false;
                }
                continue;
            }
            _ = hand_back.cancelled(), if !run_here => {
                at_shutdown(time_left(ctx, fire_at), ctx.config.shutdown_grace)
            }
            _ = ctx.interrupt.cancelled(), if run_here => AtShutdown::HandBack(None),
        };
        match handing {
            AtShutdown::HandBack(delay) => {
                debug!(
                    delay_ms = delay.map(|d| d.as_millis() as u64),
                    "shutting down, handing a held due event back"
                );
                message.settle(AckKind::Nak(delay)).await;
                return false;
            }
            AtShutdown::RunHere => {
                debug!("shutting down, a held due event is due soon enough to run here");
                run_here = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_held_fire_waits_up_to_a_second_for_the_call_gate_at_its_instant() {
        let start = Instant::now();
        let opens_at = start + Duration::from_millis(400);
        let reconnecting = || (Instant::now() < opens_at).then(|| "reconnecting".to_string());
        assert_eq!(closed_for_long(reconnecting, || true).await, None);
        let waited = Instant::now() - start;
        assert!(waited >= Duration::from_millis(400) && waited < Duration::from_millis(500));

        let start = Instant::now();
        let never = || Some("clock not trusted".to_string());
        let why = closed_for_long(never, || true).await;
        assert_eq!(why.as_deref(), Some("clock not trusted"));
        assert!(
            Instant::now() - start >= GATE_WAIT,
            "gave up before the wait"
        );
        assert!(Instant::now() - start < GATE_WAIT + GATE_POLL * 2);

        let start = Instant::now();
        assert!(closed_for_long(never, || false).await.is_some());
        assert_eq!(Instant::now(), start, "a lost delivery does not wait");
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_fire_is_kept_alive_only_when_its_lease_would_not_reach_past_its_instant() {
        let secs = Duration::from_secs;
        let millis = Duration::from_millis;
        let now = Instant::now();
        // Pulled 10 s ahead with a 13 s ack wait: 3 s left at the instant.
        let fresh = Lease::new(now, secs(13));
        assert_eq!(keep_alive_at(&fresh, now + secs(10)), None);
        // Its pull request waited 5 s at the server first: kept alive at
        // once, so the lease then ends 3 s after the instant.
        let late = Lease::new(now - secs(5), secs(13));
        assert_eq!(keep_alive_at(&late, now + secs(10)), Some(now));
        // Held a minute: kept alive as its lease runs out, until the
        // keep-alive that reaches past the instant can be sent (10.5 s
        // before it: the instant, 1 s past it and the 1.5 s margin, less
        // the ack wait).
        let long = Lease::new(now, secs(13));
        assert_eq!(
            keep_alive_at(&long, now + secs(60)),
            Some(now + millis(10_500))
        );
        let reaching = Lease::new(now + secs(47), secs(13));
        assert_eq!(
            keep_alive_at(&reaching, now + secs(60)),
            Some(now + millis(49_500)),
            "the last keep-alive, 10.5 s before the instant"
        );
    }

    #[test]
    fn a_held_event_far_off_comes_back_ahead_and_one_due_soon_runs_here_within_the_grace() {
        let secs = Duration::from_secs;
        let grace = secs(30);
        assert_eq!(
            at_shutdown(secs(10), grace),
            AtShutdown::HandBack(Some(secs(5)))
        );
        assert_eq!(at_shutdown(secs(5), grace), AtShutdown::RunHere);
        assert_eq!(at_shutdown(Duration::ZERO, grace), AtShutdown::RunHere);
        assert_eq!(
            at_shutdown(secs(3), secs(2)),
            AtShutdown::HandBack(None),
            "a grace too short for it"
        );
    }
}
