//! The read operations of runs: a job's runs ([`job_runs`], `GET
//! /v1/jobs/{id}/runs`), one run with its events ([`run`], `GET
//! /v1/runs/{run_id}`) and runs across jobs ([`runs`], `GET /v1/runs`). Each
//! is one function from a typed request to a typed answer or an
//! [`ApiError`], and checks its own parameters (every refusal names the
//! parameter, [`crate::read_params`]); the HTTP handlers and the console's
//! pages render the same answers, so the two cannot disagree.
//!
//! These answers are the history: one that ClickHouse does not give in time
//! is a `503 history_unavailable` ([`crate::sql::reads`]). The console asks
//! them to glance (`patience`) where a page shows them beside something else.

use chrono::Duration;
use jetcron_core::access::Role;
use jetcron_core::api::ApiError;
use jetcron_core::job::{patterns, validate_id, validate_namespace, validate_token};
use jetcron_core::run_summary::RunSummary;
use jetcron_core::time_format::rfc3339_millis;
use serde::{Deserialize, Serialize};

use crate::caller::Caller;
use crate::read_params;
use crate::runs::listing::{self, ListedRun, STATUSES};
use crate::sql::reads::Patience;
use crate::sql::runs_view::RunFilter;
use crate::GatewayState;

/// Longest range of scheduled times one listing may cover.
pub const MAX_RUNS_RANGE: Duration = Duration::days(92);

/// A page of one job's runs, newest first.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListJobRuns {
    #[serde(default)]
    pub id: String,
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// How long to wait for ClickHouse (not a parameter).
    #[serde(skip)]
    pub patience: Patience,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct JobRunsReply {
    pub ok: bool,
    pub job_id: String,
    pub runs: Vec<RunSummary>,
    pub next_cursor: Option<String>,
}

pub async fn job_runs(
    state: &GatewayState,
    request: ListJobRuns,
) -> Result<JobRunsReply, ApiError> {
    validate_id(&request.id).map_err(|p| ApiError::invalid_job(vec![p]))?;
    let limit = read_params::checked_limit(request.limit)?;
    let before = request
        .cursor
        .as_deref()
        .map(listing::decode_cursor)
        .transpose()?;
    let (runs, next_cursor) = state
        .runs
        .with(request.patience)
        .runs_of_job(&request.id, limit, before.as_ref())
        .await?;
    Ok(JobRunsReply {
        ok: true,
        job_id: request.id,
        runs,
        next_cursor,
    })
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunReply {
    pub ok: bool,
    pub run: RunSummary,
}

/// One run with its event timeline and attempts; any UUID spelling of its id.
pub async fn run(state: &GatewayState, run_id: &str) -> Result<RunReply, ApiError> {
    // Run ids are stored lowercase and hyphenated.
    let run_id = uuid::Uuid::parse_str(run_id)
        .map_err(|_| ApiError::invalid_field("run_id", format!("run id {run_id:?} is not a UUID")))?
        .hyphenated()
        .to_string();
    let run = state
        .runs
        .run(&run_id)
        .await?
        .ok_or_else(|| ApiError::not_found("run_id", format!("no run {run_id:?}")))?;
    Ok(RunReply { ok: true, run })
}

/// `runs.get` `{"run_id"}`: one run, any UUID spelling of its id.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetRun {
    pub run_id: String,
}

/// [`run`] for `caller`: a run of a job it may not view is refused as the
/// job would be.
pub async fn run_seen_by(
    state: &GatewayState,
    caller: &Caller,
    request: GetRun,
) -> Result<RunReply, ApiError> {
    let reply = run(state, &request.run_id).await?;
    // The job id comes from the history, not the caller: its namespace
    // decides, whatever the id looks like.
    caller.grants.require(
        Role::Viewer,
        jetcron_core::job::namespace_of(&reply.run.job_id),
    )?;
    Ok(reply)
}

/// [`runs`] for `caller`: a named job or namespace must be one it views;
/// without either, a caller limited to one namespace lists that one's.
pub async fn runs_seen_by(
    state: &GatewayState,
    caller: &Caller,
    mut request: ListRuns,
) -> Result<RunsReply, ApiError> {
    if let Some(job) = &request.job {
        caller.may_view(job)?;
    }
    match &request.namespace {
        Some(namespace) if validate_namespace("namespace", namespace).is_ok() => {
            caller.grants.require(Role::Viewer, namespace)?;
        }
        Some(_) => {}
        None => request.namespace = caller.only_namespace().map(str::to_string),
    }
    runs(state, request).await
}

/// Runs across jobs, newest scheduled time first, with filters and a cursor.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListRuns {
    /// Only this job's runs.
    #[schemars(regex(pattern = patterns::JOB_NAME_PATTERN))]
    pub job: Option<String>,
    /// Only the runs of this namespace's jobs (`default`: names without a dot).
    #[schemars(regex(pattern = patterns::NAMESPACE_PATTERN))]
    pub namespace: Option<String>,
    /// Statuses, comma-separated.
    #[schemars(schema_with = "read_params::statuses_schema", default)]
    pub status: Option<String>,
    /// Only the runs of this pool.
    #[schemars(regex(pattern = patterns::ID_PATTERN))]
    pub pool: Option<String>,
    /// RFC 3339 scheduled-time range (default: the 7 days up to `to`, which
    /// defaults to now); at most 92 days.
    #[schemars(regex(pattern = patterns::INSTANT_PATTERN), extend("format" = patterns::INSTANT_FORMAT))]
    pub from: Option<String>,
    /// RFC 3339 end of the range (default: now).
    #[schemars(regex(pattern = patterns::INSTANT_PATTERN), extend("format" = patterns::INSTANT_FORMAT))]
    pub to: Option<String>,
    /// Text the error contains (case-insensitive), 1 to 200 bytes.
    #[schemars(length(min = 1, max = 200), extend("format" = patterns::bytes_format(1, 200)))]
    pub q: Option<String>,
    /// The `next_cursor` of the previous page.
    #[schemars(regex(pattern = patterns::CURSOR_PATTERN), extend("format" = patterns::CURSOR_FORMAT))]
    pub cursor: Option<String>,
    /// Page size, 1 to 500 (default 50).
    #[schemars(range(min = 1, max = read_params::MAX_LIMIT))]
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunsReply {
    pub ok: bool,
    pub from: String,
    pub to: String,
    pub runs: Vec<ListedRun>,
    pub next_cursor: Option<String>,
}

pub async fn runs(state: &GatewayState, request: ListRuns) -> Result<RunsReply, ApiError> {
    let (from, to) = read_params::range(
        request.from.as_deref(),
        request.to.as_deref(),
        state.clock.now(),
        Duration::days(7),
        MAX_RUNS_RANGE,
    )?;
    let statuses: Vec<String> = request
        .status
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(bad) = statuses.iter().find(|s| !STATUSES.contains(&s.as_str())) {
        return Err(ApiError::invalid_field(
            "status",
            format!("{bad:?} is not a status; use {}", STATUSES.join(", ")),
        ));
    }
    if let Some(pool) = &request.pool {
        validate_token("pool", pool).map_err(|p| ApiError::invalid_field("pool", p.message))?;
    }
    if request
        .q
        .as_ref()
        .is_some_and(|t| t.is_empty() || t.len() > 200)
    {
        return Err(ApiError::invalid_field(
            "q",
            "the text to search for in errors must be 1 to 200 bytes",
        ));
    }
    let filter = RunFilter {
        job_id: read_params::job_param(request.job)?,
        namespace: read_params::namespace_param(request.namespace)?,
        statuses,
        pool: request.pool,
        from_ms: from.timestamp_millis(),
        to_ms: to.timestamp_millis(),
        error_contains: request.q,
        after: request
            .cursor
            .as_deref()
            .map(listing::decode_cursor)
            .transpose()?,
        limit: read_params::checked_limit(request.limit)?,
    };
    let (runs, next_cursor) = listing::list(state.runs.reads(), &filter).await?;
    Ok(RunsReply {
        ok: true,
        from: rfc3339_millis(from),
        to: rfc3339_millis(to),
        runs,
        next_cursor,
    })
}
