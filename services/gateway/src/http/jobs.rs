//! `GET /v1/jobs` and `GET /v1/jobs/{id}`: definitions from the bucket.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use jetcron_core::api::{ApiError, ErrorCode};
use jetcron_core::job::validate_id;
use jetcron_core::schedule_preview;
use jetcron_core::time_format::rfc3339_millis;
use serde_json::{json, Value};

use super::{unavailable, HttpError};
use crate::GatewayState;

/// How many upcoming fire times a job answer lists.
const NEXT_FIRES: usize = 5;

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// A label selector, `key=value` pairs separated by commas.
    labels: Option<String>,
}

/// `GET /v1/jobs[?labels=team=billing,env=prod]` (as `jobs.list`).
pub async fn list(
    State(state): State<Arc<GatewayState>>,
    query: Result<axum::extract::Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, HttpError> {
    let axum::extract::Query(query) =
        query.map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.body_text()))?;
    let mut request = crate::job_requests::ListJobs::default();
    for pair in query
        .labels
        .iter()
        .flat_map(|l| l.split(','))
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').ok_or_else(|| {
            ApiError::invalid_field("labels", format!("{pair:?} is not key=value"))
        })?;
        request.labels.insert(key.to_string(), value.to_string());
    }
    let reply = crate::job_requests::list(&state, request).await?;
    let reply = serde_json::to_value(reply)
        .map_err(|e| ApiError::new(ErrorCode::Internal, format!("encode the answer: {e}")))?;
    Ok(Json(shown(&state, reply)))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetQuery {
    /// How many next fires to list.
    next: Option<usize>,
}

/// `GET /v1/jobs/{id}[?next=N]`: the definition, its next fires (a paused
/// job's are the ones a resume would run, and say so), with the preview's
/// wall times and DST notes, and the last run.
pub async fn get_one(
    State(state): State<Arc<GatewayState>>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
    query: Result<axum::extract::Query<GetQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, HttpError> {
    let Path(id) = id.map_err(super::bad_path)?;
    let axum::extract::Query(query) =
        query.map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.body_text()))?;
    let count = query.next.unwrap_or(NEXT_FIRES);
    if !(1..=schedule_preview::MAX_COUNT).contains(&count) {
        return Err(HttpError(ApiError::invalid_field(
            "next",
            format!("must be 1 to {}, got {count}", schedule_preview::MAX_COUNT),
        )));
    }
    validate_id(&id).map_err(|p| ApiError::invalid_job(vec![p]))?;
    let (stored, valid) = state
        .jobs
        .get(&id)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("no job {id:?}")))?;
    let now = state.clock.now();
    let (next_fires, preview, paused) = match &valid {
        Some(job) => {
            let fires = job.upcoming(now, count);
            let preview =
                schedule_preview::describe(&job.spec.schedule, &job.schedule, job.timezone, &fires);
            (
                fires.into_iter().map(rfc3339_millis).collect::<Vec<_>>(),
                Some(preview),
                job.spec.paused,
            )
        }
        None => (Vec::new(), None, false),
    };
    // The last run is a convenience: a ClickHouse outage must not hide the definition.
    let last_run = state
        .runs
        .runs_of_job(&id, 1, None)
        .await
        .ok()
        .and_then(|(mut runs, _)| runs.pop());
    // Likewise the last day's figures.
    let last_24h = crate::stats::run_stats(
        state.runs.client(),
        now - chrono::Duration::hours(24),
        now,
        Some(&id),
    )
    .await
    .ok()
    .and_then(|mut by_job| by_job.remove(&id));
    Ok(Json(shown(
        &state,
        json!({
            "ok": true,
            "job": stored,
            "next_fires": next_fires,
            "next_fires_if_resumed": paused,
            "schedule_preview": preview,
            "last_run": last_run,
            "success_rate_24h": last_24h.as_ref().and_then(|s| s.success_rate),
            "runs_24h": last_24h.as_ref().map(|s| s.runs).unwrap_or(0),
        }),
    )))
}

/// `answer` as an HTTP read may show it: secrets hidden unless reads need a
/// token ([`super::redact`]).
fn shown(state: &GatewayState, mut answer: Value) -> Value {
    if !state.http_auth.reads_protected() {
        super::redact::redact_definitions(&mut answer);
    }
    answer
}

/// How many rejections a history answer lists.
const HISTORY_REJECTIONS: u32 = 20;

/// `GET /v1/jobs/{id}/history`: every revision the bucket keeps, oldest first,
/// and the newest `job.rejected` events naming this id (from ClickHouse; left
/// out with a note when ClickHouse is away).
pub async fn history(
    State(state): State<Arc<GatewayState>>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Json<Value>, HttpError> {
    let Path(id) = id.map_err(super::bad_path)?;
    validate_id(&id).map_err(|p| ApiError::invalid_field("id", p.message))?;
    let revisions = state.jobs.history(&id).await.map_err(unavailable)?;
    let (rejections, rejections_error) =
        match state.runs.rejections(Some(&id), HISTORY_REJECTIONS).await {
            Ok(r) => (r, None),
            Err(e) => (Vec::new(), Some(format!("{e:#}"))),
        };
    if revisions.is_empty() && rejections.is_empty() && rejections_error.is_none() {
        return Err(HttpError(ApiError::new(
            ErrorCode::NotFound,
            format!("no job {id:?} and no history of one"),
        )));
    }
    let mut reply = json!({
        "ok": true,
        "id": id,
        "revisions": revisions,
        "rejections": rejections,
    });
    if let Some(error) = rejections_error {
        reply["rejections_unavailable"] = error.into();
    }
    Ok(Json(shown(&state, reply)))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RejectionsQuery {
    job: Option<String>,
    limit: Option<u32>,
}

/// `GET /v1/rejections[?job=&limit=]`: definitions that were not applied.
pub async fn rejections(
    State(state): State<Arc<GatewayState>>,
    query: Result<axum::extract::Query<RejectionsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, HttpError> {
    let axum::extract::Query(query) =
        query.map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.body_text()))?;
    let limit = query.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(HttpError(ApiError::invalid_field(
            "limit",
            format!("must be between 1 and 500, got {limit}"),
        )));
    }
    if let Some(job) = &query.job {
        if job.is_empty() || job.len() > 256 {
            return Err(HttpError(ApiError::invalid_field(
                "job",
                "must be 1 to 256 characters",
            )));
        }
    }
    let rejections = state
        .runs
        .rejections(query.job.as_deref(), limit)
        .await
        .map_err(unavailable)?;
    Ok(Json(json!({ "ok": true, "rejections": rejections })))
}
