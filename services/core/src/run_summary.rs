//! Folding a run's events into the view users query.
//!
//! Storage keeps every event (at least once: the projector may write one twice);
//! this fold dedups by `event_id` and orders by (shard, attempt, step), so the
//! answer does not depend on delivery order or replays.
//!
//! A sharded run is the sum of its parts: it succeeded when every shard did,
//! it failed (timed out, was killed) as soon as one shard did, and it is
//! running otherwise. An attempt that started and has no outcome while a later
//! attempt exists was lost (its executor died); the timeline says so.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::events::{RunEvent, RunEventKind, RunId, Trigger};
use crate::time_format;

/// The state of one run.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct RunSummary {
    pub run_id: RunId,
    pub job_id: String,
    /// `running`, `retrying`, `succeeded`, `failed`, `timed_out`, `killed` or `skipped`.
    pub status: &'static str,
    pub trigger: Trigger,
    #[schemars(with = "String")]
    #[serde(with = "time_format::millis")]
    pub scheduled_at: DateTime<Utc>,
    /// Start of the first attempt.
    #[schemars(with = "Option<String>")]
    #[serde(with = "time_format::millis_opt")]
    pub first_started_at: Option<DateTime<Utc>>,
    /// Start of the latest attempt.
    #[schemars(with = "Option<String>")]
    #[serde(with = "time_format::millis_opt")]
    pub started_at: Option<DateTime<Utc>>,
    /// End of the run (set once it is over).
    #[schemars(with = "Option<String>")]
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
    /// Number of shards of a sharded run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// State of each shard seen so far (sharded runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard_states: Option<Vec<ShardState>>,
    /// The run whose end started this one (a chained run, trigger `chain`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<RunId>,
    /// The job of `parent_run_id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_job_id: Option<String>,
    /// `notified` or `notify_failed` once the failure notifier is done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notification: Option<&'static str>,
    /// Every attempt in order (only in single-run answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<AttemptView>>,
    /// Every event of the run in order (only in single-run answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<RunEvent>>,
}

/// Where one shard of a sharded run is.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ShardState {
    pub shard: u32,
    pub status: &'static str,
    pub attempt: u32,
    pub executor_id: String,
}

/// One attempt of a run (of one shard).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AttemptView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    pub attempt: u32,
    pub executor_id: String,
    #[schemars(with = "Option<String>")]
    #[serde(with = "time_format::millis_opt")]
    pub started_at: Option<DateTime<Utc>>,
    #[schemars(with = "Option<String>")]
    #[serde(with = "time_format::millis_opt")]
    pub finished_at: Option<DateTime<Utc>>,
    /// `succeeded`, `failed`, `timed_out`, `killed`, `interrupted`, `skipped`,
    /// `running`, or `lost` (started, no outcome, and a later attempt exists).
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn status_after(kind: RunEventKind) -> &'static str {
    match kind {
        RunEventKind::Started => "running",
        RunEventKind::Retrying => "retrying",
        // Notification events never decide the state; they are filtered out.
        other => other.as_str(),
    }
}

/// The events of one shard (or of an unsharded run), in order.
struct Part<'a> {
    shard: Option<u32>,
    events: Vec<&'a RunEvent>,
}

impl Part<'_> {
    /// The last event that changed the state.
    fn last_state(&self) -> Option<&RunEvent> {
        self.events
            .iter()
            .rev()
            .find(|e| !e.kind.is_notification())
            .copied()
    }

    fn status(&self) -> &'static str {
        self.last_state()
            .map_or("running", |e| status_after(e.kind))
    }

    fn attempts(&self) -> Vec<AttemptView> {
        let mut by_attempt: BTreeMap<u32, (Option<&RunEvent>, Option<&RunEvent>)> = BTreeMap::new();
        for e in &self.events {
            let slot = by_attempt.entry(e.attempt).or_default();
            match e.kind {
                RunEventKind::Started => slot.0 = Some(e),
                k if k.is_notification() => {}
                _ => slot.1 = Some(e),
            }
        }
        let last_attempt = by_attempt.keys().next_back().copied().unwrap_or(0);
        by_attempt
            .into_iter()
            .map(|(attempt, (started, ended))| {
                let any = ended.or(started);
                let outcome = match ended {
                    Some(e) => e
                        .outcome
                        .map(|o| o.as_str())
                        .unwrap_or_else(|| status_after(e.kind)),
                    None if attempt < last_attempt => "lost",
                    None => "running",
                };
                AttemptView {
                    shard: self.shard,
                    attempt,
                    executor_id: any.map(|e| e.executor_id.clone()).unwrap_or_default(),
                    started_at: attempt_start(started, ended),
                    finished_at: ended.map(|e| e.finished_at.unwrap_or(e.at)),
                    outcome,
                    error: ended.and_then(|e| e.error.clone()),
                }
            })
            .collect()
    }
}

/// When an attempt started: its `started` event, or, when that event was
/// never stored (the executor goes on when storing it fails, for example
/// while a stream elects a leader), the start its outcome event carries.
fn attempt_start(started: Option<&RunEvent>, ended: Option<&RunEvent>) -> Option<DateTime<Utc>> {
    started
        .map(|e| e.at)
        .or_else(|| ended.and_then(|e| e.started_at))
}

/// The state of a sharded run from its parts: the first shard that ended
/// badly decides, else all must have succeeded.
fn combined_status(parts: &[Part<'_>], shards: u32) -> (&'static str, Option<usize>) {
    for (i, part) in parts.iter().enumerate() {
        let status = part.status();
        if matches!(status, "failed" | "timed_out" | "killed" | "skipped") {
            return (status, Some(i));
        }
    }
    let succeeded = parts.iter().filter(|p| p.status() == "succeeded").count();
    if succeeded >= shards as usize {
        return ("succeeded", None);
    }
    if parts.iter().any(|p| p.status() == "retrying") {
        return ("retrying", None);
    }
    ("running", None)
}

/// The latest state change of any part.
fn latest_state<'a>(parts: &[Part<'a>]) -> Option<&'a RunEvent> {
    parts
        .iter()
        .filter_map(|p| {
            p.events
                .iter()
                .rev()
                .find(|e| !e.kind.is_notification())
                .copied()
        })
        .max_by_key(|e| (e.at, e.attempt))
}

/// Fold the events of one run (any order, duplicates allowed). `None` when empty.
pub fn summarize(mut events: Vec<RunEvent>, keep_events: bool) -> Option<RunSummary> {
    events.sort_by(|a, b| {
        (
            a.shard,
            a.attempt,
            a.kind.rank_in_attempt(),
            a.at,
            &a.event_id,
        )
            .cmp(&(
                b.shard,
                b.attempt,
                b.kind.rank_in_attempt(),
                b.at,
                &b.event_id,
            ))
    });
    events.dedup_by(|a, b| a.event_id == b.event_id);
    let mut parts: Vec<Part<'_>> = Vec::new();
    for e in &events {
        match parts.last_mut() {
            Some(part) if part.shard == e.shard => part.events.push(e),
            _ => parts.push(Part {
                shard: e.shard,
                events: vec![e],
            }),
        }
    }
    let shards = events.iter().find_map(|e| e.shards);
    // The event that speaks for the run: the deciding shard's last state, or
    // the latest state change anywhere.
    let (status, speaker) = match shards {
        Some(n) if n > 1 => {
            let (status, decider) = combined_status(&parts, n);
            let speaker = decider
                .and_then(|i| parts[i].last_state())
                .or_else(|| latest_state(&parts));
            (status, speaker)
        }
        _ => {
            let speaker = latest_state(&parts);
            (speaker.map_or("running", |e| status_after(e.kind)), speaker)
        }
    };
    let last = speaker.or_else(|| events.last())?.clone();
    let starts: Vec<DateTime<Utc>> = parts
        .iter()
        .flat_map(Part::attempts)
        .filter_map(|a| a.started_at)
        .collect();
    let outcome = events
        .iter()
        .filter(|e| e.kind != RunEventKind::Started && !e.kind.is_notification())
        .filter(|e| speaker.is_none_or(|s| s.shard == e.shard))
        .max_by_key(|e| (e.attempt, e.at));
    let terminal = !matches!(status, "running" | "retrying");
    let notification = events
        .iter()
        .rev()
        .find(|e| e.kind.is_notification())
        .map(|e| e.kind.as_str());
    Some(RunSummary {
        run_id: last.run_id.clone(),
        job_id: last.job_id.clone(),
        status,
        trigger: last.trigger,
        scheduled_at: last.scheduled_at,
        first_started_at: starts.iter().min().copied(),
        started_at: starts.iter().max().copied(),
        finished_at: terminal
            .then(|| {
                parts
                    .iter()
                    .filter_map(|p| p.last_state())
                    .map(|e| e.finished_at.unwrap_or(e.at))
                    .max()
            })
            .flatten(),
        duration_ms: outcome.and_then(|e| e.duration_ms),
        attempt: events
            .iter()
            .map(|e| e.attempt)
            .max()
            .unwrap_or(last.attempt),
        max_attempts: last.max_attempts,
        executor_id: last.executor_id.clone(),
        target_type: last.target_type.clone(),
        pool: last.pool.clone(),
        status_code: outcome.and_then(|e| e.status_code),
        exit_code: outcome.and_then(|e| e.exit_code),
        output: outcome.and_then(|e| e.output.clone()),
        output_truncated: outcome.is_some_and(|e| e.output_truncated),
        error: outcome.and_then(|e| e.error.clone()),
        shards,
        parent_run_id: events.iter().find_map(|e| e.parent_run_id.clone()),
        parent_job_id: events.iter().find_map(|e| e.parent_job_id.clone()),
        shard_states: shards.filter(|n| *n > 1).map(|_| {
            parts
                .iter()
                .filter_map(|p| {
                    let e = p.last_state()?;
                    Some(ShardState {
                        shard: p.shard?,
                        status: p.status(),
                        attempt: e.attempt,
                        executor_id: e.executor_id.clone(),
                    })
                })
                .collect()
        }),
        notification,
        attempts: keep_events.then(|| parts.iter().flat_map(Part::attempts).collect()),
        events: keep_events.then_some(events.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn event(attempt: u32, kind: RunEventKind, at_s: i64) -> RunEvent {
        RunEvent {
            max_attempts: 3,
            executor_id: "e".into(),
            target_type: "shell".into(),
            pool: "default".into(),
            duration_ms: (kind != RunEventKind::Started).then_some(5),
            exit_code: (kind != RunEventKind::Started).then_some(
                if kind == RunEventKind::Succeeded {
                    0
                } else {
                    1
                },
            ),
            error: (kind == RunEventKind::Retrying).then(|| "boom".into()),
            ..RunEvent::step(
                RunId("r1".into()),
                "j".into(),
                kind,
                attempt,
                Utc.timestamp_opt(100, 0).single().expect("t"),
                Utc.timestamp_opt(at_s, 0).single().expect("t"),
            )
        }
    }

    fn shard_event(shard: u32, attempt: u32, kind: RunEventKind, at_s: i64) -> RunEvent {
        let mut e = event(attempt, kind, at_s);
        e.event_id = RunEvent::event_id_for(&e.run_id, Some(shard), attempt, kind);
        e.shard = Some(shard);
        e.shards = Some(3);
        e.executor_id = format!("e{shard}");
        e
    }

    #[test]
    fn a_sharded_run_succeeds_only_when_every_shard_does() {
        use RunEventKind::*;
        let mut events = vec![
            shard_event(0, 1, Started, 101),
            shard_event(0, 1, Succeeded, 102),
            shard_event(1, 1, Started, 101),
            shard_event(1, 1, Succeeded, 103),
            shard_event(2, 1, Started, 101),
        ];
        let s = summarize(events.clone(), false).expect("summary");
        assert_eq!(s.status, "running");
        assert_eq!(s.shard_states.as_ref().map(Vec::len), Some(3));
        events.push(shard_event(2, 1, Succeeded, 104));
        let s = summarize(events.clone(), false).expect("summary");
        assert_eq!(s.status, "succeeded");
        assert_eq!(s.finished_at.map(|t| t.timestamp()), Some(104));
        events.pop();
        events.push(shard_event(2, 1, Failed, 104));
        let s = summarize(events, false).expect("summary");
        assert_eq!((s.status, s.executor_id.as_str()), ("failed", "e2"));
    }

    #[test]
    fn an_attempt_without_outcome_before_a_later_one_was_lost() {
        use RunEventKind::*;
        let mut second = event(2, Started, 140);
        second.executor_id = "e2".into();
        let s = summarize(vec![event(1, Started, 101), second], true).expect("summary");
        let outcomes: Vec<(u32, &str, &str)> = s
            .attempts
            .as_ref()
            .expect("kept")
            .iter()
            .map(|a| (a.attempt, a.outcome, a.executor_id.as_str()))
            .collect();
        assert_eq!(outcomes, [(1, "lost", "e"), (2, "running", "e2")]);
        assert_eq!(s.status, "running");
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
    fn an_attempt_whose_start_was_never_stored_starts_when_its_outcome_says() {
        use RunEventKind::*;
        let mut timed_out = event(1, TimedOut, 106);
        timed_out.started_at = Utc.timestamp_opt(101, 0).single();
        let s = summarize(
            vec![timed_out, event(2, Started, 108), event(2, Succeeded, 109)],
            true,
        )
        .expect("summary");
        let starts: Vec<(u32, Option<i64>)> = s
            .attempts
            .as_ref()
            .expect("kept")
            .iter()
            .map(|a| (a.attempt, a.started_at.map(|t| t.timestamp())))
            .collect();
        assert_eq!(starts, [(1, Some(101)), (2, Some(108))]);
        assert_eq!(s.first_started_at.map(|t| t.timestamp()), Some(101));
        assert_eq!(s.started_at.map(|t| t.timestamp()), Some(108));
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
