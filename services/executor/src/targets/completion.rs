//! Asynchronous completion: the target answered "accepted" and reports the
//! result later on `jetcron.runs.<run_id>.complete`.
//!
//! The executor expects a report for the run before it calls the target
//! ([`crate::completion_reports`], one subscription per executor), so a
//! report that arrives before the "accepted" answer is not missed. The subject
//! lies inside `JETCRON_RUNS`: reports are stored with the run's events (the
//! projector skips them; the result is recorded as the attempt's outcome
//! event). Until a matching report arrives the run stays `running`; the
//! caller's timeout and kill still apply.

use jetcron_core::control::{Completion, CompletionStatus};
use tracing::{info, warn};

use super::{cap_output, Outcome, RunContext};
use crate::ExecutorContext;

/// Run `call` (a `nats` or `http` target); if it answers "accepted", wait for
/// the completion report of this attempt.
pub async fn run_async_aware(
    ctx: &ExecutorContext,
    run: &RunContext,
    call: impl std::future::Future<Output = Outcome>,
) -> Outcome {
    let reports = ctx.completions.expect(run.run_id.as_str());
    run_expecting(ctx, run, reports, call).await
}

/// [`run_async_aware`] for a call whose reports were expected already
/// (a call sent at its instant by [`crate::instant_calls`]).
pub async fn run_expecting(
    ctx: &ExecutorContext,
    run: &RunContext,
    mut reports: crate::completion_reports::Expected,
    call: impl std::future::Future<Output = Outcome>,
) -> Outcome {
    let outcome = call.await;
    if !outcome.accepted || !outcome.success {
        return outcome;
    }
    info!("target accepted the work, waiting for its completion report");
    let shard = run.shard.map(|(index, _)| index);
    while let Some(payload) = reports.payloads.recv().await {
        let report = match Completion::parse(&payload) {
            Ok(report) => report,
            Err(why) => {
                warn!(why, "ignoring malformed completion report");
                continue;
            }
        };
        if !report.matches(run.attempt, shard) {
            continue;
        }
        let limit = ctx.config.output_limit;
        let (output, output_truncated) = match &report.output {
            Some(text) => {
                let (o, cut) = cap_output(text.as_bytes(), limit);
                (Some(o), cut)
            }
            None => (outcome.output.clone(), outcome.output_truncated),
        };
        return Outcome {
            success: report.status == CompletionStatus::Succeeded,
            accepted: true,
            status_code: outcome.status_code,
            exit_code: None,
            output,
            output_truncated,
            error: match report.status {
                CompletionStatus::Succeeded => None,
                CompletionStatus::Failed => Some(
                    report
                        .error
                        .unwrap_or_else(|| "target reported failure".into()),
                ),
            },
        };
    }
    Outcome::failed("connection closed while waiting for the completion report")
}
