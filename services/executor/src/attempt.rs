//! One delivery of a due event: one attempt of its run.
//!
//! Steps: decode → publish `started` → run the target under the job's timeout
//! (keeping the message alive with in-progress acks) → publish the outcome →
//! ack (success), nak with the backoff delay (a retry: JetStream redelivers
//! it), or term (last attempt). The attempt number is JetStream's delivery
//! count, so an attempt lost with a crashed executor still counts.

use std::time::Duration;

use async_nats::jetstream::{message::AckKind, Message};
use chrono::Utc;
use jetcron_core::events::{DueEvent, RunEvent, RunEventKind};
use jetcron_core::job::{self, Target, ValidJob};
use tracing::{info, warn, Instrument as _};

use crate::run_events::RunEventPublisher;
use crate::target::{self, Outcome, RunContext};
use crate::ExecutorContext;

/// Handle one due-event message to the end (ack, nak or term).
pub async fn handle(ctx: &ExecutorContext, message: Message) {
    let attempt = match message.info() {
        Ok(info) => u32::try_from(info.delivered).unwrap_or(u32::MAX).max(1),
        Err(e) => {
            warn!(error = %e, "due message without JetStream metadata, dropping");
            return;
        }
    };
    let due: DueEvent = match serde_json::from_slice(&message.payload) {
        Ok(due) => due,
        Err(e) => {
            warn!(subject = %message.subject, error = %e, "undecodable due event, terminating it");
            ack(&message, AckKind::Term).await;
            return;
        }
    };
    if let Err(why) = check_due_event(&due, &message.subject) {
        warn!(subject = %message.subject, why, "malformed due event, terminating it");
        ack(&message, AckKind::Term).await;
        return;
    }
    let span = tracing::info_span!("run", job_id = %due.job_id, run_id = %due.run_id, attempt);
    run_attempt(ctx, message, due, attempt)
        .instrument(span)
        .await;
}

/// A due event can come from anyone allowed to publish on `jetcron.due.>`:
/// check what the executor relies on before running anything.
fn check_due_event(due: &DueEvent, subject: &str) -> Result<(), String> {
    let canonical = uuid::Uuid::parse_str(due.run_id.as_str())
        .map(|u| u.hyphenated().to_string())
        .map_err(|_| format!("run_id {:?} is not a UUID", due.run_id.as_str()))?;
    if canonical != due.run_id.as_str() {
        return Err(format!(
            "run_id {:?} is not in lowercase hyphenated form",
            due.run_id.as_str()
        ));
    }
    job::validate_id(&due.job_id).map_err(|e| format!("job_id: {}", e.message))?;
    job::validate_id(&due.pool).map_err(|e| format!("pool: {}", e.message))?;
    if due.job.id != due.job_id {
        return Err(format!(
            "job.id {:?} differs from job_id {:?}",
            due.job.id, due.job_id
        ));
    }
    let expected = jetcron_core::subjects::due_subject(&due.pool, &due.job_id);
    if subject != expected {
        return Err(format!("published on {subject:?}, expected {expected:?}"));
    }
    Ok(())
}

async fn run_attempt(ctx: &ExecutorContext, message: Message, due: DueEvent, attempt: u32) {
    let publisher = RunEventPublisher::new(ctx, &due, attempt);
    let job = match job::validate(due.job.clone()) {
        Ok(job) => job,
        Err(problems) => {
            let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
            let outcome = Outcome::failed(format!("invalid job in due event: {}", text.join("; ")));
            let event = publisher.outcome(
                RunEventKind::Failed,
                Utc::now(),
                &outcome,
                job::DEFAULT_MAX_ATTEMPTS,
            );
            finish(&publisher, &message, event, AckKind::Term).await;
            return;
        }
    };
    let max_attempts = job.max_attempts;
    if attempt > max_attempts {
        // Deliveries beyond the limit happen when an earlier attempt's outcome
        // could not be recorded (or its executor died): never run again.
        let outcome = Outcome::failed(format!(
            "delivery {attempt} exceeds max_attempts {max_attempts}: an earlier attempt's outcome was lost"
        ));
        let event = publisher.outcome(RunEventKind::Failed, Utc::now(), &outcome, max_attempts);
        finish(&publisher, &message, event, AckKind::Term).await;
        return;
    }
    let started_at = Utc::now();
    if let Err(e) = publisher
        .publish(&publisher.started(started_at, max_attempts))
        .await
    {
        warn!(error = %format!("{e:#}"), "cannot record start, handing the run back");
        ack(&message, AckKind::Nak(Some(Duration::from_secs(1)))).await;
        return;
    }
    info!(target_type = job.spec.target.kind(), "attempt started");
    let outcome = with_progress_acks(
        &message,
        ctx.config.progress_interval,
        run_target(ctx, &job, &due, attempt),
    )
    .await;
    let finished_at = Utc::now();
    let mut publisher = publisher;
    publisher.started_at = Some(started_at);
    if outcome.success {
        info!("attempt succeeded");
        let event = publisher.outcome(RunEventKind::Succeeded, finished_at, &outcome, max_attempts);
        finish(&publisher, &message, event, AckKind::Ack).await;
    } else if attempt < max_attempts {
        let delay = job.retry_delay(attempt + 1);
        warn!(
            error = outcome.error.as_deref().unwrap_or(""),
            delay_ms = delay.as_millis() as u64,
            "attempt failed, will retry"
        );
        let mut event =
            publisher.outcome(RunEventKind::Retrying, finished_at, &outcome, max_attempts);
        event.retry_at = chrono::Duration::from_std(delay)
            .ok()
            .map(|d| finished_at + d);
        finish(&publisher, &message, event, AckKind::Nak(Some(delay))).await;
    } else {
        warn!(
            error = outcome.error.as_deref().unwrap_or(""),
            "last attempt failed"
        );
        let event = publisher.outcome(RunEventKind::Failed, finished_at, &outcome, max_attempts);
        finish(&publisher, &message, event, AckKind::Term).await;
    }
}

async fn run_target(
    ctx: &ExecutorContext,
    job: &ValidJob,
    due: &DueEvent,
    attempt: u32,
) -> Outcome {
    let run = RunContext {
        run_id: due.run_id.clone(),
        job_id: due.job_id.clone(),
        scheduled_at: due.scheduled_at,
        attempt,
    };
    let limit = ctx.config.output_limit;
    let work = async {
        match &job.spec.target {
            Target::Nats(t) => target::nats::run(&ctx.nats, t, &run, limit).await,
            Target::Http(t) => target::http::run(&ctx.http, t, &run, limit).await,
            Target::Shell(t) => target::shell::run(&ctx.config.shell, t, &run, limit).await,
        }
    };
    match tokio::time::timeout(job.timeout, work).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::failed(format!(
            "timed out after {}",
            humantime::format_duration(job.timeout)
        )),
    }
}

/// Drive `work` while telling JetStream every `interval` that the message is
/// still being worked on, so a long run is not redelivered after `ack_wait`.
async fn with_progress_acks<F: std::future::Future<Output = Outcome>>(
    message: &Message,
    interval: Duration,
    work: F,
) -> Outcome {
    tokio::pin!(work);
    let mut ticks = tokio::time::interval(interval);
    ticks.tick().await;
    loop {
        tokio::select! {
            outcome = &mut work => return outcome,
            _ = ticks.tick() => ack(message, AckKind::Progress).await,
        }
    }
}

/// Publish the outcome event, then settle the message. If the event cannot be
/// stored, the message is handed back so the run is not silently lost.
async fn finish(
    publisher: &RunEventPublisher,
    message: &Message,
    event: RunEvent,
    settle: AckKind,
) {
    match publisher.publish(&event).await {
        Ok(()) => ack(message, settle).await,
        Err(e) => {
            warn!(error = %format!("{e:#}"), "cannot record outcome, handing the run back");
            ack(message, AckKind::Nak(Some(Duration::from_secs(1)))).await;
        }
    }
}

async fn ack(message: &Message, kind: AckKind) {
    let result = match kind {
        // Double ack: wait for the server to confirm the run is settled.
        AckKind::Ack | AckKind::Term => message.double_ack_with(kind).await,
        other => message.ack_with(other).await,
    };
    if let Err(e) = result {
        warn!(error = %e, "cannot settle due message");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use jetcron_core::events::{RunId, Trigger};

    fn due() -> DueEvent {
        let job = job::parse_job(
            br#"{"id":"j1","schedule":"@daily","target":{"type":"shell","command":"true"}}"#,
            None,
        )
        .expect("job");
        let at = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("t");
        DueEvent {
            run_id: RunId::for_fire("j1", at),
            job_id: "j1".into(),
            scheduled_at: at,
            trigger: Trigger::Schedule,
            pool: "default".into(),
            job_revision: 1,
            job: job.spec,
        }
    }

    const SUBJECT: &str = "jetcron.due.default.j1";

    #[test]
    fn well_formed_due_events_pass() {
        assert_eq!(check_due_event(&due(), SUBJECT), Ok(()));
    }

    #[test]
    fn malformed_due_events_are_refused() {
        let mut bad_run_id = due();
        bad_run_id.run_id = RunId("r\r\nX: 1".into());
        let mut uppercase_run_id = due();
        uppercase_run_id.run_id = RunId(due().run_id.as_str().to_uppercase());
        let mut bad_job_id = due();
        bad_job_id.job_id = "evil x".into();
        let mut mismatched = due();
        mismatched.job.id = "other".into();
        let mut bad_pool = due();
        bad_pool.pool = "a.b".into();
        for (event, subject, needle) in [
            (bad_run_id, SUBJECT, "not a UUID"),
            (uppercase_run_id, SUBJECT, "lowercase"),
            (bad_job_id, SUBJECT, "job_id"),
            (mismatched, SUBJECT, "differs from job_id"),
            (bad_pool, SUBJECT, "pool"),
            (due(), "jetcron.due.default.other", "expected"),
        ] {
            let why = check_due_event(&event, subject).expect_err(needle);
            assert!(why.contains(needle), "{why}");
        }
    }
}
