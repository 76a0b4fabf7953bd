//! Building and publishing the run events of one attempt.
//!
//! Each event goes to `jetcron.runs.<job>.<kind>` with `Nats-Msg-Id` = its
//! event id, and is awaited until `JETCRON_RUNS` stored it: the due message
//! is only settled after its event is durable. A failed store is retried
//! with growing, jittered waits for as long as the caller allows: an
//! outcome must survive an election of the stream's leader (4–9 s), because
//! handing the run back instead would run its target again.
//!
//! The store's ack says whether the event id was already stored: a `started`
//! that is a duplicate means another delivery of the same due event started
//! this very attempt (a consumer leader that died before it recorded the
//! first delivery hands the message out again).

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{AckKind, Message};

use crate::lease::Delivery;
use async_nats::HeaderMap;
use chrono::{DateTime, Utc};
use jetcron_core::events::{AttemptOutcome, DueEvent, RunEvent, RunEventKind};
use jetcron_core::subjects;
use jetcron_io::retry::RetryDelay;

use crate::runs_pulse::RunsPulse;
use crate::targets::Outcome;
use crate::ExecutorContext;

/// Publishes the events of one attempt of one run.
pub struct RunEventPublisher<'a> {
    js: async_nats::jetstream::Context,
    /// Told of each event newly stored.
    pulse: &'a RunsPulse,
    /// What every event of the attempt repeats (of the due event: not its
    /// definition, whose copy per attempt cost an allocation per text).
    template: RunEvent,
    attempt: u32,
    /// Largest message the server takes, less room for headers.
    max_payload: usize,
}

/// Largest error text kept in a run event.
const MAX_ERROR_BYTES: usize = 4096;

/// The event's JSON, with output (then error) cut until it fits `limit`:
/// JSON escaping can make output several times larger than its bytes.
fn fit_to_payload(event: &RunEvent, limit: usize) -> anyhow::Result<Vec<u8>> {
    let error_fits = event
        .error
        .as_ref()
        .is_none_or(|e| e.len() <= MAX_ERROR_BYTES);
    if error_fits {
        let payload = serde_json::to_vec(event).context("encode run event")?;
        if payload.len() <= limit {
            return Ok(payload);
        }
    }
    // Rare: a copy to cut.
    let mut event = event.clone();
    if let Some(error) = &mut event.error {
        truncate_on_char(error, MAX_ERROR_BYTES);
    }
    loop {
        let payload = serde_json::to_vec(&event).context("encode run event")?;
        if payload.len() <= limit {
            return Ok(payload);
        }
        match &mut event.output {
            Some(output) if !output.is_empty() => {
                let half = output.len() / 2;
                truncate_on_char(output, half);
                event.output_truncated = true;
            }
            _ => anyhow::bail!(
                "run event {} is {} bytes even without output, over the {limit} byte limit",
                event.event_id,
                payload.len()
            ),
        }
    }
}

fn truncate_on_char(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

impl<'a> RunEventPublisher<'a> {
    pub fn new(ctx: &'a ExecutorContext, due: &DueEvent, attempt: u32) -> Self {
        Self {
            js: ctx.js.clone(),
            pulse: &ctx.runs_pulse,
            template: RunEvent {
                // Each event's own; empty here, so copying it costs nothing.
                event_id: String::new(),
                trigger: due.trigger,
                executor_id: ctx.config.executor_id.clone(),
                target_type: due.job.target.kind().to_string(),
                pool: due.pool.clone(),
                shard: due.shard,
                shards: due.shard.map(|_| due.job.shards.unwrap_or(1)),
                parent_run_id: due.parent.as_ref().map(|p| p.run_id.clone()),
                parent_job_id: due.parent.as_ref().map(|p| p.job_id.clone()),
                ..RunEvent::step(
                    due.run_id.clone(),
                    due.job_id.clone(),
                    RunEventKind::Started,
                    attempt,
                    due.scheduled_at,
                    due.scheduled_at,
                )
            },
            attempt,
            max_payload: max_event_payload(&ctx.nats),
        }
    }

    fn base(&self, kind: RunEventKind, at: DateTime<Utc>, max_attempts: u32) -> RunEvent {
        let template = &self.template;
        RunEvent {
            event_id: RunEvent::event_id_for(&template.run_id, template.shard, self.attempt, kind),
            kind,
            at,
            max_attempts,
            ..template.clone()
        }
    }

    /// The `started` event.
    pub fn started(&self, at: DateTime<Utc>, max_attempts: u32) -> RunEvent {
        let mut event = self.base(RunEventKind::Started, at, max_attempts);
        event.started_at = Some(at);
        event
    }

    /// An event without an attempt behind it (`skipped`, `killed` before
    /// starting, `failed` for an unusable due event).
    pub fn declined(
        &self,
        kind: RunEventKind,
        at: DateTime<Utc>,
        error: String,
        max_attempts: u32,
    ) -> RunEvent {
        let mut event = self.base(kind, at, max_attempts);
        event.finished_at = Some(at);
        event.error = Some(error);
        event
    }

    /// An outcome event (`succeeded`, `retrying`, `failed`, `timed_out`, `killed`).
    pub fn outcome(
        &self,
        kind: RunEventKind,
        ended: AttemptOutcome,
        took: Took,
        outcome: &Outcome,
        max_attempts: u32,
    ) -> RunEvent {
        let Took {
            started_at,
            finished_at,
        } = took;
        let mut event = self.base(kind, finished_at, max_attempts);
        event.outcome = Some(ended);
        event.started_at = Some(started_at);
        event.finished_at = Some(finished_at);
        event.duration_ms = Some((finished_at - started_at).num_milliseconds());
        event.status_code = outcome.status_code;
        event.exit_code = outcome.exit_code;
        event.output = outcome.output.clone();
        event.output_truncated = outcome.output_truncated;
        event.error = outcome.error.clone();
        event
    }

    /// Store `event` in `JETCRON_RUNS`, retrying for up to `budget` (and
    /// keeping `message` alive meanwhile) while the delivery is ours.
    pub async fn publish(
        &self,
        event: &RunEvent,
        budget: Duration,
        message: &Delivery,
    ) -> anyhow::Result<Stored> {
        let stored = publish_run_event(
            &self.js,
            self.max_payload,
            event,
            budget,
            Some(KeepAlive::Delivery(message)),
        )
        .await;
        if matches!(&stored, Ok(s) if !s.duplicate) {
            self.pulse.stored();
        }
        stored
    }
}

/// When an attempt started and finished.
#[derive(Debug, Clone, Copy)]
pub struct Took {
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

/// How a run event was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Its event id was already in the stream (another delivery stored it).
    pub duplicate: bool,
    /// Its stream sequence (of the first store, for a duplicate).
    pub sequence: u64,
}

/// Metrics of a stored run event: `jetcron_run_events_total{kind}`,
/// `jetcron_runs_total{status}` for a run's end, `jetcron_retries_total`,
/// `jetcron_attempt_duration_seconds{target}` and, for first attempts,
/// `jetcron_run_start_lag_seconds` (start minus scheduled time).
fn record_metrics(event: &RunEvent) {
    let kind = event.kind.as_str();
    metrics::counter!("jetcron_run_events_total", "kind" => kind).increment(1);
    match event.kind {
        RunEventKind::Started if event.attempt == 1 => {
            let lag = (event.at - event.scheduled_at).num_milliseconds().max(0);
            metrics::histogram!("jetcron_run_start_lag_seconds").record(lag as f64 / 1000.0);
        }
        RunEventKind::Retrying => metrics::counter!("jetcron_retries_total").increment(1),
        _ => {}
    }
    if event.kind.is_terminal() {
        metrics::counter!("jetcron_runs_total", "status" => kind).increment(1);
    }
    if let Some(ms) = event.duration_ms {
        metrics::histogram!("jetcron_attempt_duration_seconds", "target" => event.target_type.clone())
            .record(ms as f64 / 1000.0);
    }
}

/// Largest run event payload for `client`'s server, less room for headers.
pub fn max_event_payload(client: &async_nats::Client) -> usize {
    client
        .server_info()
        .max_payload
        .saturating_sub(4096)
        .max(16 * 1024)
}

/// What a run event's store keeps alive while it retries: the message the
/// event is about must not be handed out again meanwhile.
#[derive(Clone, Copy)]
pub enum KeepAlive<'a> {
    /// A due event's delivery: kept alive when its lease would run out
    /// during the wait, and nothing is stored once it is gone
    /// ([`crate::lease`]).
    Delivery(&'a Delivery),
    /// Another message (a notification): a progress ack before each wait.
    Message(&'a Message),
}

impl KeepAlive<'_> {
    /// Whether the store may go on.
    fn may_store(self) -> bool {
        match self {
            KeepAlive::Delivery(delivery) => delivery.may_record(),
            KeepAlive::Message(_) => true,
        }
    }

    /// Await `work` (one try of a store, which waits for JetStream's answer
    /// up to the client's timeout) keeping a delivery alive when its lease
    /// would run out meanwhile. Kept alive only between tries, a call made
    /// while JetStream elected leaders lost its delivery before its start
    /// or outcome could be stored, and the run's next delivery called the
    /// target again (the hung-node test: calls made 4-6 s into a 20 s
    /// outage of `JETCRON_RUNS`, called again 19 s later).
    async fn beside<T>(self, work: impl std::future::Future<Output = T>) -> T {
        match self {
            // Only when the lease needs it: a keep-alive per try would cost
            // a replicated write each.
            KeepAlive::Delivery(delivery) => delivery.while_kept_alive(LEASE_DRIVEN, work).await,
            KeepAlive::Message(_) => work.await,
        }
    }

    /// Keep the message alive through a wait of `wait`.
    async fn through(self, wait: Duration) {
        match self {
            KeepAlive::Delivery(delivery) => {
                delivery
                    .keep_until(tokio::time::Instant::now() + wait)
                    .await;
            }
            KeepAlive::Message(message) => {
                let _ = message.ack_with(AckKind::Progress).await;
            }
        }
    }
}

/// A keep-alive interval longer than any store: the lease alone says when
/// ([`Delivery::keep_alive_every`]).
const LEASE_DRIVEN: Duration = Duration::from_secs(3600);

/// Store `event` in `JETCRON_RUNS` (`Nats-Msg-Id` = its event id), retrying
/// with jittered waits (100 ms doubling to 2 s) for up to `budget`, keeping
/// `keep_alive` alive through each try and each wait; output is cut to fit
/// `max_payload`.
/// A delivery whose lease ran out stores nothing more.
pub async fn publish_run_event(
    js: &async_nats::jetstream::Context,
    max_payload: usize,
    event: &RunEvent,
    budget: Duration,
    keep_alive: Option<KeepAlive<'_>>,
) -> anyhow::Result<Stored> {
    let payload: bytes::Bytes = fit_to_payload(event, max_payload)?.into();
    let subject = subjects::run_event_subject(&event.job_id, event.kind.as_str());
    let started = tokio::time::Instant::now();
    let mut delay = RetryDelay::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut tries = 0u32;
    loop {
        anyhow::ensure!(
            keep_alive.is_none_or(KeepAlive::may_store),
            "run event {} not stored: the delivery's lease ran out",
            event.event_id
        );
        tries += 1;
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", event.event_id.as_str());
        let stored = async {
            js.publish_with_headers(subject.clone(), headers, payload.clone())
                .await?
                .await
                .map_err(anyhow::Error::from)
        };
        let stored = match keep_alive {
            Some(keep_alive) => keep_alive.beside(stored).await,
            None => stored.await,
        };
        let error = match stored {
            Ok(ack) => {
                if !ack.duplicate {
                    record_metrics(event);
                }
                return Ok(Stored {
                    duplicate: ack.duplicate,
                    sequence: ack.sequence,
                });
            }
            Err(e) => e,
        };
        let wait = delay.next_delay();
        if started.elapsed() + wait > budget {
            return Err(error.context(format!(
                "publish run event {} ({tries} tries in {} ms)",
                event.event_id,
                started.elapsed().as_millis()
            )));
        }
        if let Some(keep_alive) = keep_alive {
            keep_alive.through(wait).await;
        }
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetcron_core::events::{RunEventKind, RunId};

    #[test]
    fn oversized_output_is_cut_to_fit() {
        let event = RunEvent {
            exit_code: Some(0),
            // Control bytes escape to 6 bytes each in JSON.
            output: Some("\u{1}".repeat(100_000)),
            error: Some("e".repeat(10_000)),
            ..RunEvent::step(
                RunId("r".into()),
                "j".into(),
                RunEventKind::Succeeded,
                1,
                Utc::now(),
                Utc::now(),
            )
        };
        let payload = fit_to_payload(&event, 64 * 1024).expect("fits");
        assert!(payload.len() <= 64 * 1024);
        let back: RunEvent = serde_json::from_slice(&payload).expect("json");
        assert!(back.output_truncated);
        assert_eq!(back.error.expect("error").len(), MAX_ERROR_BYTES);
    }
}
