//! Runs asked for by hand: `trigger` (run now) and `backfill` (run the
//! scheduled times of a past range).
//!
//! A triggered run gets its own run id (never equal to a scheduled fire's) and
//! is marked `manual`. A backfilled time gets the *same* run id as the
//! scheduled fire of that time and is marked `backfill`: JetStream's dedup drops
//! it if the fire was emitted within the duplicate window, and times with a run
//! already recorded in ClickHouse are skipped, so a backfill never repeats a
//! fire that happened. Without that answer from ClickHouse (slow, away) a
//! backfill emits nothing and answers `503 history_unavailable`.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use jetcron_core::access::Role;
use jetcron_core::api::ApiError;
use jetcron_core::events::{DueEvent, RunId, Trigger};
use jetcron_core::job::{namespace_of, validate_id, FieldError, ValidJob};
use jetcron_core::time_format::rfc3339_millis;
use jetcron_io::due::publish_due_event;
use serde::{Deserialize, Serialize};

use crate::caller::Caller;
use crate::GatewayState;

/// Most scheduled times one backfill may emit.
pub const MAX_BACKFILL_FIRES: usize = 1000;

/// `trigger` `{"id"}`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerJob {
    pub id: String,
}

/// `backfill` `{"id","from","to"}` (RFC 3339 instants).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackfillJob {
    pub id: String,
    pub from: String,
    pub to: String,
}

/// The answer of `trigger`: the manual run's id and time.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct TriggeredReply {
    pub ok: bool,
    pub job_id: String,
    pub run_id: RunId,
    pub scheduled_at: String,
}

/// The answer of `backfill`: the times emitted and those skipped (run
/// already, or stored within the duplicate window).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct BackfilledReply {
    pub ok: bool,
    pub job_id: String,
    pub emitted: Vec<String>,
    pub skipped: Vec<String>,
}

/// Job `id`, valid, for a caller who operates in its namespace.
async fn load_valid_job(
    state: &GatewayState,
    caller: &Caller,
    id: &str,
) -> Result<(ValidJob, u64), ApiError> {
    validate_id(id).map_err(|p| ApiError::invalid_job(vec![p]))?;
    caller.grants.require(Role::Operator, namespace_of(id))?;
    let (stored, valid) = state
        .jobs
        .get(id)
        .await
        .map_err(ApiError::unavailable)?
        .ok_or_else(|| ApiError::not_found("id", format!("no job {id:?}")))?;
    let job = valid.ok_or_else(|| ApiError::invalid_job(stored.problems.clone()))?;
    Ok((job, stored.revision))
}

fn due_event(
    job: &ValidJob,
    revision: u64,
    run_id: RunId,
    at: DateTime<Utc>,
    trigger: Trigger,
) -> DueEvent {
    DueEvent {
        run_id,
        job_id: job.spec.id.clone(),
        scheduled_at: at,
        trigger,
        pool: job.pool.clone(),
        job_revision: revision,
        job: job.spec.clone(),
        shard: None,
        parent: None,
    }
}

/// `trigger`: one manual run now.
pub async fn trigger(
    state: &GatewayState,
    caller: &Caller,
    request: TriggerJob,
) -> Result<TriggeredReply, ApiError> {
    let (job, revision) = load_valid_job(state, caller, &request.id).await?;
    let now = state.clock.now();
    let run_id = RunId::for_manual(&job.spec.id, now);
    let event = due_event(&job, revision, run_id.clone(), now, Trigger::Manual);
    publish_due_event(&state.js, &event)
        .await
        .map_err(ApiError::unavailable)?;
    Ok(TriggeredReply {
        ok: true,
        job_id: job.spec.id,
        run_id,
        scheduled_at: rfc3339_millis(now),
    })
}

fn instant(field: &str, text: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            let problem = FieldError::new(
                field,
                "invalid_instant",
                format!(
                    "expected an RFC 3339 instant such as 2026-01-01T00:00:00Z, got {text:?}: {e}"
                ),
            );
            ApiError::invalid_request(vec![problem])
        })
}

fn bad_range(field: &str, message: String) -> ApiError {
    ApiError::invalid_field(field, format!("{field}: {message}"))
}

/// `backfill`: every scheduled time of the job in `[from, to]` not already
/// run, marked `backfill`.
pub async fn backfill(
    state: &GatewayState,
    caller: &Caller,
    request: BackfillJob,
) -> Result<BackfilledReply, ApiError> {
    let from = instant("from", &request.from)?;
    let to = instant("to", &request.to)?;
    if to < from {
        return Err(bad_range("to", "must not be earlier than from".into()));
    }
    if to > state.clock.now() {
        return Err(bad_range(
            "to",
            "must not be in the future (future times fire on schedule)".into(),
        ));
    }
    let (job, revision) = load_valid_job(state, caller, &request.id).await?;
    let times = job
        .scheduled_between(from, to, MAX_BACKFILL_FIRES)
        .map_err(|limit| {
            bad_range(
                "to",
                format!("the range holds more than {limit} scheduled times; split it"),
            )
        })?;
    let run_ids: Vec<String> = times
        .iter()
        .map(|t| RunId::for_fire(&job.spec.id, *t).0)
        .collect();
    // Times whose run exists already (however long ago) are not repeated.
    let existing: HashSet<String> = state.runs.existing_run_ids(&job.spec.id, &run_ids).await?;
    let mut emitted = Vec::new();
    let mut skipped = Vec::new();
    for (t, run_id) in times.iter().zip(run_ids) {
        if existing.contains(&run_id) {
            skipped.push(rfc3339_millis(*t));
            continue;
        }
        let event = due_event(&job, revision, RunId(run_id), *t, Trigger::Backfill);
        let duplicate = publish_due_event(&state.js, &event)
            .await
            .map_err(ApiError::unavailable)?;
        if duplicate {
            skipped.push(rfc3339_millis(*t));
        } else {
            emitted.push(rfc3339_millis(*t));
        }
    }
    Ok(BackfilledReply {
        ok: true,
        job_id: job.spec.id,
        emitted,
        skipped,
    })
}
