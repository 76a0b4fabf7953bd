//! The last stage of an attempt: [`end_decision::decide`] says what follows its
//! call, and [`settle`] carries it out in order (retry ledger, run event
//! and notification, ack / nak / term, overlap claim, ledger clean-up).
//! [`finish`] is also how refusals and late deliveries end.

use async_nats::jetstream::message::AckKind;
use chrono::{DateTime, Utc};
use jetcron_core::events::{AttemptOutcome, RunEvent, RunEventKind};
use jetcron_core::job;
use tracing::{debug, info, warn};

use super::STARTED_WAIT;
use super::{hand_back, notify_of, store_budget, Attempt};
use crate::alerting::notifications as notify;
use crate::claims::{self, ClaimHandle};
use crate::end_decision::{self, ClaimStep, Decision, Ending, LedgerWrite, Policy, Settle};
use crate::lease::Delivery;
use crate::run_events::{RunEventPublisher, Took};
use crate::targets::Outcome;
use crate::tries::{Budget, Ledger};
use crate::ExecutorContext;

/// Record how the attempt ended and settle its message: [`end_decision::decide`]
/// says what follows, this carries it out in order (ledger, run event and
/// notification, settle, claim, ledger clean-up).
pub(super) async fn settle(
    attempt: &Attempt<'_>,
    ledger: &Ledger<'_>,
    budget: Budget,
    started_at: DateTime<Utc>,
    ending: Ending,
    claim: Option<ClaimHandle>,
) {
    let Attempt {
        ctx,
        message,
        due,
        job,
        publisher,
        ..
    } = *attempt;
    let finished_at = ctx.clock.now();
    let try_number = budget.try_number;
    let decision = end_decision::decide(
        &ending,
        try_number,
        Policy {
            max_attempts: job.max_attempts,
            next_delay: job.retry_delay(try_number + 1, &due.msg_id()),
            timeout: job.timeout,
            notifies: job.spec.notify.is_some(),
        },
    );
    let outcome = match ending {
        Ending::Done(outcome) => outcome,
        _ => Outcome::failed(decision.error.clone().unwrap_or_default()),
    };
    // A delivery whose lease ran out records nothing: its fire may be
    // another delivery's by now ([`crate::lease`]).
    if !message.may_record() {
        return;
    }
    log_decision(&decision, &outcome);
    match decision.ledger_before {
        // Written before the nak: the next delivery must know this try
        // counted. If it cannot be, the retry still waits its backoff; it then
        // counts as a handed-back delivery (bounded), not as a try.
        Some(LedgerWrite::Failure(n)) => {
            if let Err(e) = ledger.record_failure(n).await {
                warn!(error = %format!("{e:#}"), "cannot record the failed try");
            }
        }
        // A redelivery of this message (its term lost) must not run again.
        Some(LedgerWrite::LastFailure(n)) => Box::pin(ledger.record_last_failure(n)).await,
        None => {}
    }
    let took = Took {
        started_at,
        finished_at,
    };
    let mut event = publisher.outcome(
        decision.kind,
        decision.outcome,
        took,
        &outcome,
        job.max_attempts,
    );
    let retry_at = decision
        .retry_in
        .and_then(|d| chrono::Duration::from_std(d).ok())
        .map(|d| finished_at + d);
    event.retry_at = retry_at;
    let settle = match decision.settle {
        Settle::Ack => AckKind::Ack,
        Settle::Nak(delay) => AckKind::Nak(delay),
        Settle::Term => AckKind::Term,
    };
    // Failures notify as the decision says; a success is news for the alert
    // channels only (it may end an open incident).
    let succeeded = event.kind == RunEventKind::Succeeded;
    let notify = notify_of(&job.spec)
        .filter(|(n, _)| decision.notify || (succeeded && !n.channels.is_empty()));
    let called = decision.called_and_over.map(|failed| (ledger, failed));
    let close = Close {
        settle,
        notify,
        called,
    };
    finish(ctx, publisher, message, event, close).await;
    if !message.is_ours() {
        return;
    }
    match (decision.claim, claim) {
        (ClaimStep::Release, Some(claim)) => Box::pin(claim.release()).await,
        // Hold the claim through the wait: the run is not over.
        (ClaimStep::HoldForRetry, Some(mut claim)) => {
            if let Some(retry_at) = retry_at {
                Box::pin(claim.extend(retry_at + claims::claim_ttl(ctx.config.progress_interval)))
                    .await;
            }
        }
        _ => {}
    }
    if decision.forget_ledger {
        Box::pin(ledger.forget()).await;
    }
}

/// The log line of a decision.
fn log_decision(decision: &Decision, outcome: &Outcome) {
    let error = outcome.error.as_deref().unwrap_or("");
    let ended = decision.outcome.as_str();
    match (decision.kind, decision.outcome) {
        (RunEventKind::Succeeded, _) => debug!("attempt succeeded"),
        (RunEventKind::Killed, _) => info!(error, "attempt killed"),
        (_, AttemptOutcome::Interrupted) => {
            warn!(error, "attempt not called or interrupted, handing it back")
        }
        (RunEventKind::Retrying, _) => warn!(
            error,
            outcome = ended,
            delay_ms = decision.retry_in.unwrap_or_default().as_millis() as u64,
            "attempt failed, will retry"
        ),
        _ => warn!(error, outcome = ended, "last attempt failed"),
    }
}

pub(super) async fn release(claim: Option<ClaimHandle>) {
    if let Some(claim) = claim {
        Box::pin(claim.release()).await;
    }
}

/// How a delivery closes once its event is stored.
pub(super) struct Close<'a> {
    /// The message's ack, nak or term.
    pub settle: AckKind,
    /// The job's alert policy and schedule line, when its channels are told.
    pub notify: Option<(&'a job::NotifyPolicy, &'a str)>,
    /// The ledger and failed tries of a run whose target was called.
    pub called: Option<(&'a Ledger<'a>, u32)>,
}

impl Close<'_> {
    /// Settle with `settle`, telling nobody.
    pub(super) fn quietly(settle: AckKind) -> Self {
        Self {
            settle,
            notify: None,
            called: None,
        }
    }
}

/// Publish the outcome event (and queue the failure notification), then
/// settle the message. If the event cannot be stored, the message is handed
/// back so the run is not silently lost.
pub(super) async fn finish(
    ctx: &ExecutorContext,
    publisher: &RunEventPublisher<'_>,
    message: &Delivery,
    event: RunEvent,
    close: Close<'_>,
) {
    let Close {
        settle,
        notify,
        called,
    } = close;
    if !message.may_record() {
        return;
    }
    let store = publisher.publish(&event, store_budget(ctx), message);
    let stored = match called {
        // The target was called: if the event is slow to be stored, write the
        // run's end in its ledger meanwhile, so that a redelivery (this
        // executor dying before the store) does not call it again; and if
        // it cannot be stored, before the run is handed back.
        Some((ledger, failed)) => {
            tokio::pin!(store);
            let mut waited = std::time::Duration::ZERO;
            let mut in_ledger = false;
            let stored = loop {
                match tokio::time::timeout(STARTED_WAIT, &mut store).await {
                    Ok(stored) => break stored,
                    Err(_) => waited += STARTED_WAIT,
                }
                if ctx
                    .runs_pulse
                    .outcome_is_slow(waited, tokio::time::Instant::now())
                    && message.may_record()
                {
                    in_ledger = record_end(ledger, failed, &event).await;
                    break store.await;
                }
            };
            if stored.is_err() && !in_ledger && message.may_record() {
                record_end(ledger, failed, &event).await;
            }
            stored
        }
        None => store.await,
    };
    if let Err(e) = stored {
        warn!(error = %format!("{e:#}"), "cannot record outcome, handing the run back");
        hand_back(message).await;
        return;
    }
    if !message.may_record() {
        return;
    }
    if let Some((notify, schedule)) = notify {
        if let Err(e) = Box::pin(notify::enqueue(&ctx.js, notify, schedule, &event)).await {
            warn!(error = %format!("{e:#}"), "cannot queue the failure notification, handing the run back");
            hand_back(message).await;
            return;
        }
    }
    message.settle(settle).await;
}

/// Write the run's end into its ledger; whether it was written.
async fn record_end(ledger: &Ledger<'_>, failed: u32, event: &RunEvent) -> bool {
    match ledger.record_end(failed, event).await {
        Ok(()) => true,
        Err(e) => {
            warn!(error = %format!("{e:#}"), "cannot record the run's end in its ledger");
            false
        }
    }
}
