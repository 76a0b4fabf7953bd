//! Folding a run's events into the view users query.
//!
//! Storage keeps every event (at least once: the projector may write one twice);
//! this fold dedups by `event_id` and orders by (attempt, step), so the answer
//! does not depend on delivery order or replays.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::events::{RunEvent, RunEventKind, RunId, Trigger};
use crate::time_format;

/// The state of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub run_id: RunId,
    pub job_id: String,
    /// `running`, `retrying`, `succeeded` or `failed`.
    pub status: &'static str,
    pub trigger: Trigger,
    #[serde(with = "time_format::millis")]
    pub scheduled_at: DateTime<Utc>,
    /// Start of the first attempt.
    #[serde(with = "time_format::millis_opt")]
    pub first_started_at: Option<DateTime<Utc>>,
    /// Start of the latest attempt.
    #[serde(with = "time_format::millis_opt")]
    pub started_at: Option<DateTime<Utc>>,
    /// End of the run (set once it succeeded or failed).
    #[serde(with = "time_format::millis_opt")]
    pub finished_at: Option<DateTime<Utc>>,
    /// Duration of the latest finished attempt.
    pub duration_ms: Option<i64>,
    /// Latest attempt number.
    pub attempt: u32,
    pub max_attempts: u32,
    pub executor_id: String,
    pub target_type: String,
    pub pool: String,
    pub status_code: Option<i32>,
    pub exit_code: Option<i32>,
    pub output: Option<String>,
    pub output_truncated: bool,
    pub error: Option<String>,
    /// Every event of the run in order (only in single-run answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<RunEvent>>,
}

fn status_after(kind: RunEventKind) -> &'static str {
    match kind {
        RunEventKind::Started => "running",
        RunEventKind::Retrying => "retrying",
        RunEventKind::Succeeded => "succeeded",
        RunEventKind::Failed => "failed",
    }
}

/// Fold the events of one run (any order, duplicates allowed). `None` when empty.
pub fn summarize(mut events: Vec<RunEvent>, keep_events: bool) -> Option<RunSummary> {
    events.sort_by(|a, b| {
        (a.attempt, a.kind.rank_in_attempt(), a.at, &a.event_id).cmp(&(
            b.attempt,
            b.kind.rank_in_attempt(),
            b.at,
            &b.event_id,
        ))
    });
    events.dedup_by(|a, b| a.event_id == b.event_id);
    let last = events.last()?.clone();
    let first_started_at = events
        .iter()
        .find(|e| e.kind == RunEventKind::Started)
        .map(|e| e.at);
    let started_at = events
        .iter()
        .rev()
        .find(|e| e.kind == RunEventKind::Started)
        .map(|e| e.at);
    let outcome = events
        .iter()
        .rev()
        .find(|e| e.kind != RunEventKind::Started);
    Some(RunSummary {
        run_id: last.run_id.clone(),
        job_id: last.job_id.clone(),
        status: status_after(last.kind),
        trigger: last.trigger,
        scheduled_at: last.scheduled_at,
        first_started_at,
        started_at,
        finished_at: last
            .kind
            .is_terminal()
            .then(|| last.finished_at.unwrap_or(last.at)),
        duration_ms: outcome.and_then(|e| e.duration_ms),
        attempt: last.attempt,
        max_attempts: last.max_attempts,
        executor_id: last.executor_id.clone(),
        target_type: last.target_type.clone(),
        pool: last.pool.clone(),
        status_code: outcome.and_then(|e| e.status_code),
        exit_code: outcome.and_then(|e| e.exit_code),
        output: outcome.and_then(|e| e.output.clone()),
        output_truncated: outcome.is_some_and(|e| e.output_truncated),
        error: outcome.and_then(|e| e.error.clone()),
        events: keep_events.then_some(events),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn event(attempt: u32, kind: RunEventKind, at_s: i64) -> RunEvent {
        let run_id = RunId("r1".into());
        RunEvent {
            event_id: RunEvent::event_id_for(&run_id, attempt, kind),
            run_id,
            job_id: "j".into(),
            kind,
            trigger: Trigger::Schedule,
            scheduled_at: Utc.timestamp_opt(100, 0).single().expect("t"),
            attempt,
            max_attempts: 3,
            executor_id: "e".into(),
            target_type: "shell".into(),
            pool: "default".into(),
            at: Utc.timestamp_opt(at_s, 0).single().expect("t"),
            started_at: None,
            finished_at: None,
            duration_ms: (kind != RunEventKind::Started).then_some(5),
            status_code: None,
            exit_code: (kind != RunEventKind::Started).then_some(
                if kind == RunEventKind::Succeeded {
                    0
                } else {
                    1
                },
            ),
            output: None,
            output_truncated: false,
            error: (kind == RunEventKind::Retrying).then(|| "boom".into()),
            retry_at: None,
        }
    }

    #[test]
    fn order_and_duplicates_do_not_matter() {
        let events = vec![
            event(2, RunEventKind::Succeeded, 110),
            event(1, RunEventKind::Retrying, 104),
            event(2, RunEventKind::Started, 106),
            event(1, RunEventKind::Started, 101),
            event(2, RunEventKind::Succeeded, 110),
        ];
        let s = summarize(events, true).expect("summary");
        assert_eq!(s.status, "succeeded");
        assert_eq!(s.attempt, 2);
        assert_eq!(s.exit_code, Some(0));
        assert_eq!(s.error, None);
        assert_eq!(s.first_started_at.map(|t| t.timestamp()), Some(101));
        assert_eq!(s.started_at.map(|t| t.timestamp()), Some(106));
        assert_eq!(s.events.expect("kept").len(), 4);
    }

    #[test]
    fn in_flight_runs_show_their_state() {
        let s = summarize(
            vec![
                event(1, RunEventKind::Started, 101),
                event(1, RunEventKind::Retrying, 102),
            ],
            false,
        )
        .expect("summary");
        assert_eq!(s.status, "retrying");
        assert_eq!(s.error.as_deref(), Some("boom"));
        assert_eq!(s.finished_at, None);
        assert!(summarize(vec![], false).is_none());
    }
}
