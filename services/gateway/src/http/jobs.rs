//! `GET /v1/jobs` and `GET /v1/jobs/{id}`: definitions from the bucket.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use chrono::Utc;
use jetcron_core::api::{ApiError, ErrorCode};
use jetcron_core::job::validate_id;
use jetcron_core::time_format::rfc3339_millis;
use serde_json::{json, Value};

use super::{unavailable, HttpError};
use crate::GatewayState;

/// How many upcoming fire times a job answer lists.
const NEXT_FIRES: usize = 5;

pub async fn list(State(state): State<Arc<GatewayState>>) -> Result<Json<Value>, HttpError> {
    let jobs = state.jobs.list().await.map_err(unavailable)?;
    Ok(Json(json!({ "ok": true, "jobs": jobs })))
}

pub async fn get_one(
    State(state): State<Arc<GatewayState>>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Json<Value>, HttpError> {
    let Path(id) = id.map_err(super::bad_path)?;
    validate_id(&id).map_err(|p| ApiError::invalid_job(vec![p]))?;
    let (stored, valid) = state
        .jobs
        .get(&id)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("no job {id:?}")))?;
    let mut next_fires = Vec::new();
    if let Some(job) = valid.filter(|j| !j.spec.paused) {
        let mut after = Utc::now();
        while next_fires.len() < NEXT_FIRES {
            match job.schedule.next_fire(after, job.timezone) {
                Some(at) => {
                    next_fires.push(rfc3339_millis(at));
                    after = at;
                }
                None => break,
            }
        }
    }
    // The last run is a convenience: a ClickHouse outage must not hide the definition.
    let last_run = state
        .runs
        .runs_of_job(&id, 1)
        .await
        .ok()
        .and_then(|mut runs| runs.pop());
    Ok(Json(json!({
        "ok": true,
        "job": stored,
        "next_fires": next_fires,
        "last_run": last_run,
    })))
}
