//! `GET /v1/runs` (filters, cursor) and `GET /v1/stats` (per-job counts,
//! percentiles and missed fires). Query parameters are checked here, each
//! refusal naming the parameter; the SQL lives in [`crate::run_list`] and
//! [`crate::stats`].

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use jetcron_core::api::{ApiError, ErrorCode};
use jetcron_core::time_format::rfc3339_millis;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{unavailable, HttpError};
use crate::run_list::{self, RunFilter, STATUSES};
use crate::stats::{self, CurrentJob, MAX_STATS_JOBS};
use crate::GatewayState;

/// Longest range of scheduled times one listing may cover.
pub const MAX_RUNS_RANGE: Duration = Duration::days(92);
/// Longest range of one statistics request.
pub const MAX_STATS_RANGE: Duration = Duration::days(31);

type QueryResult<T> = Result<Query<T>, axum::extract::rejection::QueryRejection>;

fn query<T>(q: QueryResult<T>) -> Result<T, HttpError> {
    q.map(|Query(q)| q)
        .map_err(|e| HttpError(ApiError::new(ErrorCode::InvalidRequest, e.body_text())))
}

fn instant(field: &str, text: Option<&str>) -> Result<Option<DateTime<Utc>>, HttpError> {
    text.map(|t| {
        DateTime::parse_from_rfc3339(t)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| {
                HttpError(ApiError::invalid_field(
                    field,
                    format!("must be an RFC 3339 instant like 2026-11-22T10:00:00Z: {e}"),
                ))
            })
    })
    .transpose()
}

/// `[from, to]` from the request, defaults applied, bounded by `max`.
fn range(
    from: Option<&str>,
    to: Option<&str>,
    default_span: Duration,
    max: Duration,
) -> Result<(DateTime<Utc>, DateTime<Utc>), HttpError> {
    let to = instant("to", to)?.unwrap_or_else(Utc::now);
    let from = instant("from", from)?.unwrap_or(to - default_span);
    if from > to {
        return Err(HttpError(ApiError::invalid_field(
            "from",
            "must not be later than to",
        )));
    }
    if to - from > max {
        return Err(HttpError(ApiError::invalid_field(
            "from",
            format!("the range may span at most {} days", max.num_days()),
        )));
    }
    Ok((from, to))
}

fn job_param(job: Option<String>) -> Result<Option<String>, HttpError> {
    job.map(|id| {
        jetcron_core::job::validate_id(&id)
            .map(|()| id)
            .map_err(|p| HttpError(ApiError::invalid_field("job", p.message)))
    })
    .transpose()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    job: Option<String>,
    status: Option<String>,
    pool: Option<String>,
    from: Option<String>,
    to: Option<String>,
    q: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

/// `GET /v1/runs`.
pub async fn runs(
    State(state): State<Arc<GatewayState>>,
    q: QueryResult<RunsQuery>,
) -> Result<Json<Value>, HttpError> {
    let q = query(q)?;
    let (from, to) = range(
        q.from.as_deref(),
        q.to.as_deref(),
        Duration::days(7),
        MAX_RUNS_RANGE,
    )?;
    let statuses: Vec<String> = q
        .status
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(bad) = statuses.iter().find(|s| !STATUSES.contains(&s.as_str())) {
        return Err(HttpError(ApiError::invalid_field(
            "status",
            format!("{bad:?} is not a status; use {}", STATUSES.join(", ")),
        )));
    }
    if let Some(pool) = &q.pool {
        jetcron_core::job::validate_id(pool)
            .map_err(|p| HttpError(ApiError::invalid_field("pool", p.message)))?;
    }
    if q.q.as_ref().is_some_and(|t| t.is_empty() || t.len() > 200) {
        return Err(HttpError(ApiError::invalid_field(
            "q",
            "the text to search for in errors must be 1 to 200 bytes",
        )));
    }
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(HttpError(ApiError::invalid_field(
            "limit",
            format!("must be between 1 and 500, got {limit}"),
        )));
    }
    let filter = RunFilter {
        job_id: job_param(q.job)?,
        statuses,
        pool: q.pool,
        from_ms: from.timestamp_millis(),
        to_ms: to.timestamp_millis(),
        error_contains: q.q,
        after: q
            .cursor
            .as_deref()
            .map(run_list::decode_cursor)
            .transpose()?,
        limit,
    };
    let (runs, next) = run_list::list(state.runs.client(), &filter)
        .await
        .map_err(unavailable)?;
    Ok(Json(json!({
        "ok": true,
        "from": rfc3339_millis(from),
        "to": rfc3339_millis(to),
        "runs": runs,
        "next_cursor": next,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsQuery {
    job: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

/// `GET /v1/stats`.
pub async fn stats(
    State(state): State<Arc<GatewayState>>,
    q: QueryResult<StatsQuery>,
) -> Result<Json<Value>, HttpError> {
    let q = query(q)?;
    let (from, to) = range(
        q.from.as_deref(),
        q.to.as_deref(),
        Duration::hours(24),
        MAX_STATS_RANGE,
    )?;
    let job = job_param(q.job)?;
    let counts = stats::run_stats(state.runs.client(), from, to, job.as_deref())
        .await
        .map_err(unavailable)?;
    let mut jobs: Vec<CurrentJob> = match &job {
        Some(id) => state
            .jobs
            .get(id)
            .await
            .map_err(unavailable)?
            .and_then(|(stored, valid)| {
                let written_at = DateTime::parse_from_rfc3339(&stored.updated_at).ok()?;
                Some(CurrentJob {
                    job: valid?,
                    written_at: written_at.with_timezone(&Utc),
                })
            })
            .into_iter()
            .collect(),
        None => state
            .jobs
            .valid_jobs()
            .await
            .map_err(unavailable)?
            .into_iter()
            .map(|(job, written_at)| CurrentJob { job, written_at })
            .collect(),
    };
    let jobs_truncated = jobs.len() > MAX_STATS_JOBS;
    jobs.truncate(MAX_STATS_JOBS);
    let grace = state.limits.missed_grace;
    // Only up to where ClickHouse holds every run event (see pools::projected_until);
    // if that cannot be told, up to now.
    let now = state.clock.now();
    let until = crate::pools::projected_until(&state, now)
        .await
        .ok()
        .flatten()
        .unwrap_or(now);
    let missed = stats::missed_fires(state.runs.client(), &jobs, from, to, until, grace)
        .await
        .map_err(unavailable)?;
    let mut reply = json!({
        "ok": true,
        "from": rfc3339_millis(from),
        "to": rfc3339_millis(to),
        "jobs": stats::with_missed(counts, missed),
    });
    if jobs_truncated {
        reply["missed_fires_checked_jobs"] = MAX_STATS_JOBS.into();
    }
    Ok(Json(reply))
}
