//! The first stage of an attempt: whether this delivery may run at all.
//!
//! The job in the due event must validate; a sharded fire splits into its
//! parts at its instant (the parts run, not the fire); a shard must be in
//! range; the retry ledger says how far the run's budget went and whether
//! the run already ended; and a redelivery of a job that allows overlap
//! looks whether another delivery ran it. Each refusal is recorded and ends
//! the message for good; each NATS failure hands it back.

use async_nats::jetstream::message::AckKind;
use jetcron_core::events::{DueEvent, RunEventKind};
use jetcron_core::job::{self, ConcurrencyPolicy, ValidJob};
use tracing::{info, warn};

use super::elsewhere::{ran_elsewhere, Elsewhere};
use super::settle::{finish, Close};
use super::{hand_back, notify_of, refuse_for_good, DeliveryNumbers, Slot};
use crate::lease::Delivery;
use crate::run_events::RunEventPublisher;
use crate::running::Registration;
use crate::tries::{self, Budget, Ledger, Recorded};
use crate::{fanout, ExecutorContext};

/// A delivery that may run: its job, when it may start, and its place in
/// the run's retry budget.
pub(super) struct Admitted<'a> {
    pub job: ValidJob,
    pub slot: Slot,
    pub ledger: Ledger<'a>,
    pub budget: Budget,
}

/// Which delivery is admitted, and the slot it will take.
pub(super) struct Delivered {
    pub numbers: DeliveryNumbers,
    pub slot: Slot,
}

/// Admit the delivery `numbers` of `due`, or end it (`None`).
pub(super) async fn admit<'a>(
    ctx: &'a ExecutorContext,
    message: &Delivery,
    due: &'a DueEvent,
    delivered: Delivered,
    publisher: &RunEventPublisher<'_>,
    registration: &Registration,
) -> Option<Admitted<'a>> {
    let Delivered { numbers, slot } = delivered;
    let job = valid_job(ctx, message, due, publisher).await?;
    let job = allowed_by_policy(ctx, message, job, publisher).await?;
    let slot = unless_split(ctx, message, due, &job, slot).await?;
    if let Some(index) = due.shard.filter(|index| *index >= job.shards) {
        let why = format!("shard {index} is out of range for {} shards", job.shards);
        let event =
            publisher.declined(RunEventKind::Failed, ctx.clock.now(), why, job.max_attempts);
        refuse_for_good(ctx, publisher, message, event, None).await;
        return None;
    }
    let ledger = Ledger::new(&ctx.running, due, numbers.due_sequence);
    let budget = read_budget(ctx, message, publisher, &ledger, numbers.number).await?;
    let exhausted = exhausted(budget, numbers.number, job.max_attempts);
    // A redelivery may come after its run ended (an ack lost with a consumer
    // leader). A job with an overlap claim learns that from its claim; the
    // others look at `JETCRON_RUNS`.
    // ... or while an earlier delivery still records it: one whose
    // keep-alives went nowhere (its NATS server hung) made its call, and its
    // outcome is on its way (the hung-node test: such runs were called again
    // the moment the consumer's new leader handed them out).
    if numbers.number > 1
        && job.concurrency == ConcurrencyPolicy::Allow
        && ran_elsewhere(ctx, message, due, registration).await != Elsewhere::No
    {
        return None;
    }
    if let Some(why) = exhausted {
        let event =
            publisher.declined(RunEventKind::Failed, ctx.clock.now(), why, job.max_attempts);
        refuse_for_good(ctx, publisher, message, event, notify_of(&job.spec)).await;
        return None;
    }
    if budget.uncounted > 0 && job.concurrency == ConcurrencyPolicy::Allow {
        // The path by which a fire an earlier delivery called can be called
        // again: that delivery recorded no try (lost or handed back), its
        // outcome is not stored, and its executor does not answer (dead,
        // or reconnecting). Counted, to tell the two apart in the chaos
        // tests' logs (docs/notes/chaos-bounds-next.md).
        info!(
            uncounted = budget.uncounted,
            "an earlier delivery of this run was lost; no outcome is stored and no executor answers for it: calling it"
        );
        metrics::counter!("jetcron_executor_redeliveries_called_total").increment(1);
    }
    Some(Admitted {
        job,
        slot,
        ledger,
        budget,
    })
}

/// The job of `due`, validated as the ticker did; an invalid one is
/// refused for good.
async fn valid_job(
    ctx: &ExecutorContext,
    message: &Delivery,
    due: &DueEvent,
    publisher: &RunEventPublisher<'_>,
) -> Option<ValidJob> {
    match job::validate_with(due.job.clone(), &mut |line| ctx.config.lines.parse(line)) {
        Ok(job) => Some(job),
        Err(problems) => {
            let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
            let event = publisher.declined(
                RunEventKind::Failed,
                ctx.clock.now(),
                format!("invalid job in due event: {}", text.join("; ")),
                job::DEFAULT_MAX_ATTEMPTS,
            );
            refuse_for_good(ctx, publisher, message, event, None).await;
            None
        }
    }
}

/// `job`, unless its namespace's target policy refuses it: then the run
/// is recorded as failed, with every refusal, and never called (a
/// definition put past the API, or one the policy narrowed since).
async fn allowed_by_policy(
    ctx: &ExecutorContext,
    message: &Delivery,
    job: ValidJob,
    publisher: &RunEventPublisher<'_>,
) -> Option<ValidJob> {
    let refusals = ctx.policies.refusals(&job.spec);
    if refusals.is_empty() {
        return Some(job);
    }
    let text: Vec<String> = refusals.iter().map(ToString::to_string).collect();
    warn!(job_id = %job.spec.id, refusals = %text.join("; "), "fire refused by its namespace's target policy");
    let event = publisher.declined(
        RunEventKind::Failed,
        ctx.clock.now(),
        format!("rejected by policy: {}", text.join("; ")),
        job.max_attempts,
    );
    // Its failure is alerted like any other: the job did not run.
    refuse_for_good(ctx, publisher, message, event, notify_of(&job.spec)).await;
    None
}

/// `slot`, unless `due` is a whole fire of a sharded job: that splits into
/// its parts at its instant (they run when stored) and is done with.
async fn unless_split(
    ctx: &ExecutorContext,
    message: &Delivery,
    due: &DueEvent,
    job: &ValidJob,
    slot: Slot,
) -> Option<Slot> {
    if job.shards <= 1 || due.shard.is_some() {
        return Some(slot);
    }
    // Held through the split, as an attempt's slot.
    let _slot = slot.taken(ctx, message, due, super::RunSlot::Never).await?;
    match Box::pin(fanout::split(ctx, due, job.shards)).await {
        Ok(()) => {
            info!(shards = job.shards, "fire split into shards");
            message.settle(AckKind::Ack).await;
        }
        Err(e) => {
            warn!(error = %format!("{e:#}"), "cannot split fire into shards, handing it back");
            hand_back(message).await;
        }
    }
    None
}

/// The run's retry budget from its ledger; `None` when the delivery is
/// done with: the run ended already (its outcome is stored now, the target
/// never called again), or the ledger could not be read (handed back).
async fn read_budget(
    ctx: &ExecutorContext,
    message: &Delivery,
    publisher: &RunEventPublisher<'_>,
    ledger: &Ledger<'_>,
    attempt: u32,
) -> Option<Budget> {
    let read =
        crate::kept_alive::through_elections(ctx, message, "retry ledger", || ledger.read(attempt));
    match Box::pin(read).await {
        Ok(Recorded {
            ended: Some(event), ..
        }) => {
            // The run ended, but its outcome event was not stored before its
            // executor went away: store it now, never call the target again.
            info!(
                ended = event.kind.as_str(),
                "run already ended (recorded in its ledger), settling without running it"
            );
            let settle = if event.kind == RunEventKind::Succeeded {
                AckKind::Ack
            } else {
                AckKind::Term
            };
            Box::pin(finish(
                ctx,
                publisher,
                message,
                event,
                Close::quietly(settle),
            ))
            .await;
            None
        }
        Ok(recorded) => Some(recorded.budget),
        Err(e) => {
            warn!(error = %format!("{e:#}"), "cannot read the retry budget, handing the run back");
            hand_back(message).await;
            None
        }
    }
}

/// Why delivery `attempt` may not run with `budget` left, if it may not.
fn exhausted(budget: Budget, attempt: u32, max_attempts: u32) -> Option<String> {
    if budget.try_number > max_attempts {
        // The last try failed and was recorded, but its message was not
        // settled: never run again.
        Some(format!(
            "delivery {attempt}: all {max_attempts} attempts already failed"
        ))
    } else if budget.uncounted > tries::MAX_UNCOUNTED_DELIVERIES {
        Some(format!(
            "delivery {attempt}: {} earlier deliveries were lost or handed back \
             (executor crashes, shutdowns or NATS errors), more than {}; giving up",
            budget.uncounted,
            tries::MAX_UNCOUNTED_DELIVERIES
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(try_number: u32, uncounted: u32) -> Budget {
        Budget {
            try_number,
            uncounted,
        }
    }

    #[test]
    fn a_delivery_past_its_budget_is_refused_and_says_why() {
        assert_eq!(exhausted(budget(3, 0), 3, 3), None);
        let why = exhausted(budget(4, 0), 5, 3).expect("all tries failed");
        assert!(why.contains("all 3 attempts already failed"), "{why}");
        let lost = tries::MAX_UNCOUNTED_DELIVERIES + 1;
        let why = exhausted(budget(1, lost), 9, 3).expect("too many lost");
        assert!(why.contains("lost or handed back"), "{why}");
        assert_eq!(exhausted(budget(1, lost - 1), 9, 3), None);
    }
}
