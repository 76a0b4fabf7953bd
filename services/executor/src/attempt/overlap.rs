//! The overlap claim of a `forbid` or `replace` fire, and the slots it
//! waits for once it holds it.
//!
//! Such a fire takes its job's claim before its call slot: a `replace`
//! fire kills the run it replaces before it waits for a slot, and a
//! `forbid` fire is skipped without waiting for one. The other way round,
//! a replacing fire pulled by the executor whose one call slot the run it
//! replaces held waited for that slot until the run's end, and never told
//! the run to stop (`run_control::replace_kills_…`, 1 CI run in about 15
//! and 1 in 16 locally with the CPUs busy).
//!
//! While it waits for its slots (its namespace's run slot, then its call
//! slot) the fire holds the claim: it extends it every progress interval
//! and answers probes as calling, so that a `forbid` fire elsewhere is
//! skipped beside it and a redelivery of its own run does not call. A kill
//! (a `replace` fire's, or an operator's) or a claim another run took
//! meanwhile ends it as killed before it called anything. A delivery whose
//! lease runs out meanwhile, or that is handed back at a shutdown, gives
//! its fire up and lets the claim lapse, for the run's next delivery.

use async_nats::jetstream::message::AckKind;
use jetcron_core::events::RunEventKind;
use jetcron_core::job::ConcurrencyPolicy;
use tracing::{info, warn};

use super::call::claim_taken_over;
use super::elsewhere::{ended_already, fire_since, ran_elsewhere, Elsewhere};
use super::settle::{finish, Close};
use super::{hand_back, notify_of, refuse_for_good, Attempt, CallSlot, Ready, RunSlot};
use crate::claims::{self, ClaimHandle, Overlap};
use crate::running::Registration;

/// Take the overlap claim of `due`'s job under `policy` (`forbid` or
/// `replace`). `None` when this delivery is done with: skipped, a late
/// delivery of a run that ended, or handed back.
///
/// When the claim cannot vouch that no other delivery of this run ran it
/// (see [`crate::claim_rules`]), `JETCRON_RUNS` says whether the run ended
/// and a probe whether another delivery still calls its target or records it
/// (which `JETCRON_RUNS` cannot show yet); only then is the claim taken, so
/// the job is not held while those answers come. A delivery that waited while
/// another delivery of its run held the claim checks the same once it holds it.
pub(super) async fn take_claim(
    attempt: &Attempt<'_>,
    policy: ConcurrencyPolicy,
    registration: &Registration,
) -> Option<ClaimHandle> {
    let Attempt {
        ctx,
        message,
        due,
        job,
        publisher,
        number,
    } = *attempt;
    let max_attempts = job.max_attempts;
    let mut checked = false;
    loop {
        let key = jetcron_core::subjects::claim_key(&job.spec.id, due.shard);
        let claimant = claims::Claimant {
            run_id: due.run_id.as_str().to_string(),
            executor_id: ctx.config.executor_id.clone(),
            attempt: number,
            scheduled_at: due.scheduled_at,
        };
        let overlap = Box::pin(claims::claim_for_run(
            ctx, message, key, claimant, policy, checked,
        ))
        .await;
        let claim = match overlap {
            Ok(Overlap::Claimed(handle)) => *handle,
            Ok(Overlap::Uncertain) => {
                if ran_elsewhere(ctx, message, due, registration).await != Elsewhere::No {
                    return None;
                }
                checked = true;
                continue;
            }
            Ok(Overlap::RanAlready) => {
                info!("run already ended (its claim says so), settling a late delivery without running it");
                metrics::counter!("jetcron_executor_late_deliveries_total").increment(1);
                message.settle(AckKind::Ack).await;
                return None;
            }
            Ok(Overlap::Declined(holder)) => {
                // A later delivery of a fire skipped already (its ack lost
                // while the holder still runs) must not record a second skip.
                if number > 1
                    && ended_already(ctx, message, due, fire_since(message, due))
                        .await
                        .settled()
                {
                    return None;
                }
                info!(holder = %holder, "previous run still going, skipping this fire");
                let event = publisher.declined(
                    RunEventKind::Skipped,
                    ctx.clock.now(),
                    format!("run {holder} of this job is still going (concurrency: forbid)"),
                    max_attempts,
                );
                let close = Close::quietly(AckKind::Ack);
                Box::pin(finish(ctx, publisher, message, event, close)).await;
                return None;
            }
            Err(e) => {
                warn!(error = %format!("{e:#}"), "cannot take the overlap claim, handing the run back");
                hand_back(message).await;
                return None;
            }
        };
        if claim.after_other_delivery() {
            match ran_elsewhere(ctx, message, due, registration).await {
                Elsewhere::No => {}
                // Its outcome is stored: the claim can say so.
                Elsewhere::Ended => {
                    Box::pin(claim.release()).await;
                    return None;
                }
                // The claim stays as it is, for the delivery that refreshes it.
                Elsewhere::Maybe => return None,
            }
        }
        return Some(claim);
    }
}

/// The slots of a fire that holds its job's claim (see the module's doc),
/// with the claim; `None` when the delivery is done with: killed or
/// replaced meanwhile (recorded as killed, the claim let go), handed back
/// at a shutdown or its lease lost (the claim left to lapse for the run's
/// next delivery, [`ClaimHandle::lapse`]).
pub(super) async fn slots_beside_claim(
    attempt: &Attempt<'_>,
    mut claim: ClaimHandle,
    ready: Ready,
    registration: &Registration,
) -> Option<(CallSlot, ClaimHandle)> {
    let Attempt {
        ctx, message, due, ..
    } = *attempt;
    registration.activate();
    let taking = ready.call_slot(ctx, message, due, RunSlot::First);
    tokio::pin!(taking);
    let mut ticks = tokio::time::interval(ctx.config.progress_interval);
    ticks.tick().await;
    // Why it was killed, or `None` when it gave its fire up.
    let killed = loop {
        tokio::select! {
            biased;
            _ = registration.killed.cancelled() => break Some(registration.reason()),
            taken = &mut taking => match taken {
                Some(slot) => return Some((slot, claim)),
                // Handed back (a shutdown) or its lease lost.
                None => break None,
            },
            _ = ticks.tick() => {
                // Its fire may be another delivery's by now, which must not
                // wait for this one's slot.
                if !message.is_ours() {
                    break None;
                }
                let until = ctx.clock.now() + claims::claim_ttl(ctx.config.progress_interval);
                if let Some(holder) = claim_taken_over(&mut claim, until).await {
                    break Some(format!("replaced by run {holder} (concurrency: replace)"));
                }
            }
        }
    };
    match killed {
        Some(reason) => Box::pin(killed_while_waiting(attempt, claim, &reason)).await,
        None => claim.lapse(ctx.clock.now()).await,
    }
    None
}

/// Record a fire killed while it waited for its slots, end its delivery
/// for good and let its claim go.
async fn killed_while_waiting(attempt: &Attempt<'_>, claim: ClaimHandle, reason: &str) {
    let Attempt {
        ctx,
        message,
        job,
        publisher,
        ..
    } = *attempt;
    info!(
        reason,
        "run was killed while it waited for a slot, not running it"
    );
    let event = publisher.declined(
        RunEventKind::Killed,
        ctx.clock.now(),
        format!("killed: {reason}"),
        job.max_attempts,
    );
    let ours = message.is_ours();
    refuse_for_good(ctx, publisher, message, event, notify_of(&job.spec)).await;
    if ours {
        claim.release().await;
    } else {
        // Nothing was recorded: the run's next delivery (which the kill
        // reached too) checks and ends it.
        claim.lapse(ctx.clock.now()).await;
    }
}
