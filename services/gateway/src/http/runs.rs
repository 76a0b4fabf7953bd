//! HTTP adapters of the run reads: `GET /v1/jobs/{id}/runs`, `/v1/runs/{run_id}`,
//! `/v1/runs` and `/v1/stats`, each building the typed request of
//! [`crate::runs::reads`] or [`crate::runs::stats`] from the path and query.

use std::sync::Arc;

use axum::extract::{Path, State};
use serde::Deserialize;

use super::{query, HttpError, PathResult, QueryResult, SortedJson};
use crate::runs::reads::{self, JobRunsReply, ListJobRuns, ListRuns, RunReply, RunsReply};
use crate::runs::stats::{self, GetStats, StatsReply};
use crate::GatewayState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRunsQuery {
    limit: Option<u32>,
    cursor: Option<String>,
}

/// `GET /v1/jobs/{id}/runs[?limit=&cursor=]`.
pub async fn of_job(
    State(state): State<Arc<GatewayState>>,
    id: PathResult<String>,
    q: QueryResult<JobRunsQuery>,
) -> Result<SortedJson<JobRunsReply>, HttpError> {
    let Path(id) = id.map_err(super::bad_path)?;
    let JobRunsQuery { limit, cursor } = query(q)?;
    let request = ListJobRuns {
        id,
        limit,
        cursor,
        ..ListJobRuns::default()
    };
    Ok(SortedJson(reads::job_runs(&state, request).await?))
}

/// `GET /v1/runs/{run_id}`.
pub async fn get_one(
    State(state): State<Arc<GatewayState>>,
    run_id: PathResult<String>,
) -> Result<SortedJson<RunReply>, HttpError> {
    let Path(run_id) = run_id.map_err(super::bad_path)?;
    Ok(SortedJson(reads::run(&state, &run_id).await?))
}

/// `GET /v1/runs` with filters and a cursor.
pub async fn list(
    State(state): State<Arc<GatewayState>>,
    q: QueryResult<ListRuns>,
) -> Result<SortedJson<RunsReply>, HttpError> {
    Ok(SortedJson(reads::runs(&state, query(q)?).await?))
}

/// `GET /v1/stats[?job=&from=&to=]`.
pub async fn stats(
    State(state): State<Arc<GatewayState>>,
    q: QueryResult<GetStats>,
) -> Result<SortedJson<StatsReply>, HttpError> {
    Ok(SortedJson(stats::stats(&state, query(q)?).await?))
}
