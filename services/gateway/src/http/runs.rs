//! HTTP adapters of the run reads: `GET /v1/jobs/{id}/runs`, `/v1/runs/{run_id}`,
//! `/v1/runs` and `/v1/stats`, each building the typed request of
//! [`crate::runs::reads`] or [`crate::runs::stats`] from the path and query.

use std::sync::Arc;

use axum::extract::{Extension, Path, State};
use jetcron_core::job::namespace_of;
use jetcron_core::job::patterns::{CURSOR_FORMAT, CURSOR_PATTERN};
use serde::Deserialize;

use super::{query, HttpError, PathResult, QueryResult, SortedJson};
use crate::caller::Caller;
use crate::runs::reads::{self, GetRun, JobRunsReply, ListJobRuns, ListRuns, RunReply, RunsReply};
use crate::runs::stats::{self, GetStats, StatsReply};
use crate::GatewayState;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobRunsQuery {
    /// Page size, 1 to 500 (default 50).
    #[schemars(range(min = 1, max = crate::read_params::MAX_LIMIT))]
    limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[schemars(regex(pattern = CURSOR_PATTERN), extend("format" = CURSOR_FORMAT))]
    cursor: Option<String>,
}

/// `GET /v1/jobs/{id}/runs[?limit=&cursor=]`.
pub async fn of_job(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    id: PathResult<String>,
    q: QueryResult<JobRunsQuery>,
) -> Result<SortedJson<JobRunsReply>, HttpError> {
    let Path(id) = id.map_err(super::bad_path)?;
    super::may_view(&caller, &id)?;
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
    Extension(caller): Extension<Caller>,
    run_id: PathResult<String>,
) -> Result<SortedJson<RunReply>, HttpError> {
    let Path(run_id) = run_id.map_err(super::bad_path)?;
    Ok(SortedJson(
        reads::run_seen_by(&state, &caller, GetRun { run_id }).await?,
    ))
}

/// `GET /v1/runs` with filters and a cursor ([`reads::runs_seen_by`]).
pub async fn list(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    q: QueryResult<ListRuns>,
) -> Result<SortedJson<RunsReply>, HttpError> {
    let request = query(q)?;
    Ok(SortedJson(
        reads::runs_seen_by(&state, &caller, request).await?,
    ))
}

/// `GET /v1/stats[?job=&from=&to=]`.
/// A caller limited to some namespaces sees their jobs' figures.
pub async fn stats(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    q: QueryResult<GetStats>,
) -> Result<SortedJson<StatsReply>, HttpError> {
    let request = query(q)?;
    if let Some(job) = &request.job {
        super::may_view(&caller, job)?;
    }
    let mut reply = stats::stats(&state, request).await?;
    reply.jobs.retain(|j| caller.sees(namespace_of(&j.job_id)));
    Ok(SortedJson(reply))
}
