//! `GET /v1/jobs/{id}/runs` and `GET /v1/runs/{run_id}`: history from ClickHouse.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::Json;
use jetcron_core::api::{ApiError, ErrorCode};
use jetcron_core::job::validate_id;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{unavailable, HttpError};
use crate::GatewayState;

/// Page size bounds of run listings.
const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 500;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    limit: Option<u32>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
}

pub async fn of_job(
    State(state): State<Arc<GatewayState>>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
    query: Result<Query<RunsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, HttpError> {
    let Path(id) = id.map_err(super::bad_path)?;
    validate_id(&id).map_err(|p| ApiError::invalid_job(vec![p]))?;
    let Query(query) =
        query.map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.body_text()))?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(HttpError(ApiError::invalid_field(
            "limit",
            format!("limit must be between 1 and {MAX_LIMIT}, got {limit}"),
        )));
    }
    let before = query
        .cursor
        .as_deref()
        .map(crate::run_list::decode_cursor)
        .transpose()?;
    let (runs, next) = state
        .runs
        .runs_of_job(&id, limit, before.as_ref())
        .await
        .map_err(unavailable)?;
    Ok(Json(
        json!({ "ok": true, "job_id": id, "runs": runs, "next_cursor": next }),
    ))
}

pub async fn get_one(
    State(state): State<Arc<GatewayState>>,
    run_id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Json<Value>, HttpError> {
    let Path(run_id) = run_id.map_err(super::bad_path)?;
    // Run ids are stored lowercase and hyphenated; accept any UUID spelling.
    let run_id = match uuid::Uuid::parse_str(&run_id) {
        Ok(id) => id.hyphenated().to_string(),
        Err(_) => {
            return Err(HttpError(ApiError::invalid_field(
                "run_id",
                format!("run id {run_id:?} is not a UUID"),
            )))
        }
    };
    let run = state
        .runs
        .run(&run_id)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("no run {run_id:?}")))?;
    Ok(Json(json!({ "ok": true, "run": run })))
}
