//! Building and publishing the run events of one attempt.
//!
//! Each event goes to `jetcron.runs.<job>.<kind>` with `Nats-Msg-Id` = its
//! event id, and is awaited until `JETCRON_RUNS` stored it, retrying briefly:
//! the due message is only settled after its event is durable.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::HeaderMap;
use chrono::{DateTime, Utc};
use jetcron_core::events::{DueEvent, RunEvent, RunEventKind};
use jetcron_core::subjects;

use crate::target::Outcome;
use crate::ExecutorContext;

/// Publishes the events of one attempt of one run.
pub struct RunEventPublisher {
    js: async_nats::jetstream::Context,
    due: DueEvent,
    attempt: u32,
    executor_id: String,
    pub started_at: Option<DateTime<Utc>>,
}

impl RunEventPublisher {
    pub fn new(ctx: &ExecutorContext, due: &DueEvent, attempt: u32) -> Self {
        Self {
            js: ctx.js.clone(),
            due: due.clone(),
            attempt,
            executor_id: ctx.config.executor_id.clone(),
            started_at: None,
        }
    }

    fn base(&self, kind: RunEventKind, at: DateTime<Utc>, max_attempts: u32) -> RunEvent {
        RunEvent {
            event_id: RunEvent::event_id_for(&self.due.run_id, self.attempt, kind),
            run_id: self.due.run_id.clone(),
            job_id: self.due.job_id.clone(),
            kind,
            trigger: self.due.trigger,
            scheduled_at: self.due.scheduled_at,
            attempt: self.attempt,
            max_attempts,
            executor_id: self.executor_id.clone(),
            target_type: self.due.job.target.kind().to_string(),
            pool: self.due.pool.clone(),
            at,
            started_at: None,
            finished_at: None,
            duration_ms: None,
            status_code: None,
            exit_code: None,
            output: None,
            output_truncated: false,
            error: None,
            retry_at: None,
        }
    }

    /// The `started` event.
    pub fn started(&self, at: DateTime<Utc>, max_attempts: u32) -> RunEvent {
        let mut event = self.base(RunEventKind::Started, at, max_attempts);
        event.started_at = Some(at);
        event
    }

    /// An outcome event (`succeeded`, `retrying`, `failed`).
    pub fn outcome(
        &self,
        kind: RunEventKind,
        finished_at: DateTime<Utc>,
        outcome: &Outcome,
        max_attempts: u32,
    ) -> RunEvent {
        let mut event = self.base(kind, finished_at, max_attempts);
        event.started_at = self.started_at;
        event.finished_at = Some(finished_at);
        event.duration_ms = self
            .started_at
            .map(|s| (finished_at - s).num_milliseconds());
        event.status_code = outcome.status_code;
        event.exit_code = outcome.exit_code;
        event.output = outcome.output.clone();
        event.output_truncated = outcome.output_truncated;
        event.error = outcome.error.clone();
        event
    }

    /// Store `event` in `JETCRON_RUNS`, retrying a few times.
    pub async fn publish(&self, event: &RunEvent) -> anyhow::Result<()> {
        let payload: bytes::Bytes = serde_json::to_vec(event)
            .context("encode run event")?
            .into();
        let subject = subjects::run_event_subject(&event.job_id, event.kind.as_str());
        let mut last_error = None;
        for attempt in 0..5u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            }
            let mut headers = HeaderMap::new();
            headers.insert("Nats-Msg-Id", event.event_id.as_str());
            let stored = async {
                self.js
                    .publish_with_headers(subject.clone(), headers, payload.clone())
                    .await?
                    .await
                    .map_err(anyhow::Error::from)
            }
            .await;
            match stored {
                Ok(_) => return Ok(()),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error
            .unwrap_or_else(|| anyhow::anyhow!("no attempt made"))
            .context(format!("publish run event {}", event.event_id)))
    }
}
