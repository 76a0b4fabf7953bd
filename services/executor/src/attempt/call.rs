//! The call stage of an attempt: its target runs under the job's timeout
//! while the delivery (and the overlap claim) is kept alive, and the
//! attempt's start is stored beside it when it was not stored in time. An
//! attempt running longer than `notify.running_longer_than` is told to the
//! job's alert channels, and so is its end.

use chrono::{DateTime, Utc};
use jetcron_core::events::RunEvent;
use jetcron_core::job::NatsTarget;
use tracing::{info, warn};

use super::start::{BookedCall, Started};
use super::Attempt;
use crate::alerting::notifications as notify;
use crate::claims::{self, ClaimHandle};
use crate::end_decision::Ending;
use crate::lease::Delivery;
use crate::running::Registration;
use crate::stages::{self, Stage};
use crate::targets::{self, Outcome, RunContext};
use crate::ExecutorContext;

/// How the call ended, and whether it ran long enough to be alerted.
pub(super) struct Called {
    pub ending: Ending,
    pub alarmed: bool,
}

/// Call the target of `attempt` as `started` allows (a booked call, or a
/// call from here), storing the start beside it when it was not stored in
/// time. The attempt stops counting as running (kills, `forbid` probes) as
/// soon as its target returns, not when its events are stored.
pub(super) async fn call(
    attempt: &Attempt<'_>,
    run: &RunContext,
    registration: &Registration,
    started: &mut Started<'_>,
) -> Called {
    let Started {
        permit,
        booked,
        claim,
        event,
        store,
        ..
    } = started;
    let permit = permit.take();
    // Boxed: the target's call is most of an attempt's state, and carried
    // inline through the alerting and the join below it was laid out more
    // than once (an attempt's future grew from 21 to 32 KB, copied whole
    // as it moves into its task).
    let supervised = Box::pin(supervise(
        attempt,
        run,
        registration,
        claim.as_mut(),
        booked.take(),
    ));
    let work = async {
        let called = alerted_when_long(attempt, event, supervised).await;
        registration.recording();
        drop(permit);
        called
    };
    let Some(storing) = store.as_mut() else {
        return work.await;
    };
    let (called, stored) = tokio::join!(work, storing);
    match stored {
        Ok(stored) if stored.duplicate => {
            warn!("another delivery started this attempt too (its start was stored first)")
        }
        Ok(_) => {}
        Err(e) => warn!(error = %format!("{e:#}"), "start of the attempt never stored"),
    }
    *store = None;
    called
}

/// `supervised` to its end, alerting the job's channels once it runs past
/// `notify.running_longer_than`.
async fn alerted_when_long(
    attempt: &Attempt<'_>,
    started: &RunEvent,
    supervised: impl std::future::Future<Output = Ending>,
) -> Called {
    let Attempt { ctx, job, .. } = *attempt;
    let Some((notify, after)) = job
        .spec
        .notify
        .as_ref()
        .and_then(|n| n.long_running_after().map(|after| (n, after)))
    else {
        return Called {
            ending: supervised.await,
            alarmed: false,
        };
    };
    tokio::pin!(supervised);
    tokio::select! {
        ending = &mut supervised => Called { ending, alarmed: false },
        _ = tokio::time::sleep(after) => {
            info!(after_ms = after.as_millis() as u64, "attempt running long, alerting");
            let alert = notify::enqueue_long_running(&ctx.js, notify, job.spec.schedule_line(), started, false);
            if let Err(e) = Box::pin(alert).await {
                warn!(error = %format!("{e:#}"), "cannot queue the long-running alert");
            }
            Called { ending: supervised.await, alarmed: true }
        }
    }
}

/// Tell the job's alert channels that an attempt alerted as running long
/// ended.
pub(super) async fn alert_long_run_ended(attempt: &Attempt<'_>, started: &RunEvent) {
    let Attempt { ctx, job, .. } = *attempt;
    let Some(notify) = job.spec.notify.as_ref() else {
        return;
    };
    let alert =
        notify::enqueue_long_running(&ctx.js, notify, job.spec.schedule_line(), started, true);
    if let Err(e) = Box::pin(alert).await {
        warn!(error = %format!("{e:#}"), "cannot queue the end of a long-running alert");
    }
}
/// The outcome of a booked call, or why it was not sent. A kill request
/// found at the instant stops the attempt the way a kill during the call
/// does (through its registration), so it is recorded as killed.
async fn booked_outcome(
    ctx: &ExecutorContext,
    mut booking: crate::instant_calls::Booking,
    target: &NatsTarget,
    run: &RunContext,
) -> Result<Outcome, String> {
    use crate::instant_calls::Dispatched;
    let answer = booking.answer().await;
    stages::reached(Stage::Answered);
    match answer {
        Some(Dispatched::Reply(reply)) => Ok(targets::nats::outcome(
            reply,
            target,
            ctx.config.output_limit,
        )),
        Some(Dispatched::Killed(marker)) => {
            info!(reason = %marker.reason, "run was killed before its instant, not calling it");
            ctx.attempts.kill(run.run_id.as_str(), &marker.reason);
            std::future::pending().await
        }
        Some(Dispatched::Unchecked(error)) => {
            Err(format!("cannot check for a kill request ({error})"))
        }
        Some(Dispatched::Withheld(why)) => Err(why),
        None => Err("the executor stopped before the fire's instant".into()),
    }
}

/// Run the target until it ends, times out, is killed or the executor shuts
/// down, keeping the delivery (and the claim) alive every
/// `progress_interval`, so a long run is not redelivered after `ack_wait`.
/// A delivery whose lease ran out before the call is not called: the fire
/// may be another delivery's by now.
async fn supervise(
    attempt: &Attempt<'_>,
    run: &RunContext,
    registration: &Registration,
    claim: Option<&mut ClaimHandle>,
    booked: Option<BookedCall<'_>>,
) -> Ending {
    let Attempt {
        ctx, message, job, ..
    } = *attempt;
    if booked.is_none() && !message.is_ours() {
        return Ending::NotCalled("the delivery's lease ran out before the call".into());
    }
    if let (None, Some(why)) = (&booked, crate::call_gate::closed(ctx)) {
        return Ending::NotCalled(why);
    }
    let work = match booked {
        // The timeout counts from the instant the call is sent.
        Some(call) => futures::future::Either::Left(tokio::time::timeout(
            job.timeout + (call.at - ctx.clock.now()).to_std().unwrap_or_default(),
            async {
                let outcome = booked_outcome(ctx, call.booking, call.target, run).await?;
                let outcome = std::future::ready(outcome);
                Ok(targets::completion::run_expecting(ctx, run, call.reports, outcome).await)
            },
        )),
        None => futures::future::Either::Right(tokio::time::timeout(job.timeout, async {
            stages::reached(Stage::CallSent);
            let outcome = targets::run(ctx, &job.spec.target, run).await;
            stages::reached(Stage::Answered);
            Ok(outcome)
        })),
    };
    tokio::pin!(work);
    // Beside the work, not in turn with it: a keep-alive waiting for its
    // confirmation through an election must not hold the ending back.
    let keeping = keep_running(ctx, message, claim);
    tokio::pin!(keeping);
    tokio::select! {
        biased;
        _ = registration.killed.cancelled() => Ending::Killed(registration.reason()),
        _ = ctx.interrupt.cancelled() => Ending::Interrupted,
        result = &mut work => match result {
            Ok(Ok(outcome)) => Ending::Done(outcome),
            Ok(Err(why)) => Ending::NotCalled(why),
            Err(_) => Ending::TimedOut,
        },
        ending = &mut keeping => ending,
    }
}

/// Keep the delivery alive ([`Delivery::keep_alive_every`]) and extend the
/// overlap claim every `progress_interval`; ends only when another run took
/// the claim over.
async fn keep_running(
    ctx: &ExecutorContext,
    message: &Delivery,
    claim: Option<&mut ClaimHandle>,
) -> Ending {
    let keeping = message.keep_alive_every(ctx.config.progress_interval);
    let Some(claim) = claim else {
        match keeping.await {}
    };
    tokio::pin!(keeping);
    let mut ticks = tokio::time::interval(ctx.config.progress_interval);
    ticks.tick().await;
    loop {
        tokio::select! {
            never = &mut keeping => match never {},
            _ = ticks.tick() => {}
        }
        if !message.is_ours() {
            continue;
        }
        let until = ctx.clock.now() + claims::claim_ttl(ctx.config.progress_interval);
        // The claim's store may wait out its own election: the delivery is
        // kept alive meanwhile.
        let taken_over = tokio::select! {
            never = &mut keeping => match never {},
            taken_over = claim_taken_over(claim, until) => taken_over,
        };
        if let Some(holder) = taken_over {
            // Another run holds the job now (a `replace` fire that did not
            // reach us with its kill): stop, never overlap.
            return Ending::Killed(format!("replaced by run {holder} (concurrency: replace)"));
        }
    }
}

/// Extend `claim` to `until`; the run that holds the job instead, when
/// another took it over.
pub(super) async fn claim_taken_over(
    claim: &mut ClaimHandle,
    until: DateTime<Utc>,
) -> Option<String> {
    if Box::pin(claim.extend(until)).await {
        return None;
    }
    Box::pin(claim.taken_over_by()).await
}
