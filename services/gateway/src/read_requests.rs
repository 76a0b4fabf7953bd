//! The read operations: a job with its next fires, its history, its runs; a
//! run; the run listing; statistics; rejections. Each is one function from a
//! typed request to a typed answer or an [`ApiError`], and checks its own
//! parameters (every refusal names the parameter). The HTTP handlers build
//! the request from path and query and encode the answer; the console
//! renders the same answers, so the two cannot disagree.
//!
//! Requests carry parameters as the caller wrote them (instants as RFC 3339
//! text, statuses comma-separated) so that one place turns text into values
//! and names what is wrong.
//!
//! A history read that ClickHouse does not answer in time is a `503
//! history_unavailable` ([`crate::sql::reads`]); the history parts of
//! answers built around a definition ([`job_detail`], [`job_history`]) only
//! glance at ClickHouse and go out without them, saying why. The console
//! asks the other reads to glance too where a page shows their history
//! beside something else (`patience`).

use chrono::{DateTime, Duration, Utc};
use jetcron_core::api::ApiError;
use jetcron_core::job::validate_id;
use jetcron_core::run_summary::RunSummary;
use jetcron_core::schedule_preview::{self, Preview};
use jetcron_core::time_format::rfc3339_millis;
use serde::{Deserialize, Serialize};

use crate::jobs::catalog::{ChainPeer, ChainView};
use crate::jobs::rejections::Rejection;
use crate::jobs::store::{Revision, StoredJob};
use crate::runs;
use crate::runs::listing::{ListedRun, STATUSES};
use crate::runs::stats::{self, CurrentJob, JobStats, MAX_STATS_JOBS};
use crate::sql::reads::Patience;
use crate::sql::runs_view::RunFilter;
use crate::GatewayState;

/// How many upcoming fire times a job answer lists by default.
pub const NEXT_FIRES: usize = 5;
/// Page size bounds of run listings and rejections.
pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 500;
/// Longest range of scheduled times one listing may cover.
pub const MAX_RUNS_RANGE: Duration = Duration::days(92);
/// Longest range of one statistics request.
pub const MAX_STATS_RANGE: Duration = Duration::days(31);
/// How many rejections a history answer lists.
const HISTORY_REJECTIONS: u32 = 20;

/// A job, its next `next` fires (default [`NEXT_FIRES`]).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct GetJobDetail {
    #[serde(default)]
    pub id: String,
    pub next: Option<usize>,
}

/// The answer of [`job_detail`]: the definition, its next fires (a paused
/// job's are the ones a resume would run, and say so) with the preview's
/// wall times and DST notes, the last run and the last day's figures. The
/// run figures are a convenience: a slow or absent ClickHouse leaves them
/// empty rather than holding or hiding the definition, and
/// `history_unavailable` says why.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct JobDetail {
    pub ok: bool,
    pub job: StoredJob,
    pub next_fires: Vec<String>,
    pub next_fires_if_resumed: bool,
    pub schedule_preview: Option<Preview>,
    pub last_run: Option<RunSummary>,
    pub success_rate_24h: Option<f64>,
    pub runs_24h: u64,
    /// Set when the run figures (`last_run`, `success_rate_24h`,
    /// `runs_24h`) are left out: why ClickHouse gave none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_unavailable: Option<String>,
    /// The jobs this one runs after (`after`), each with its state: a
    /// `paused` or `missing` parent starts nothing.
    pub parents: Vec<ChainPeer>,
    /// The jobs that run after this one.
    pub children: Vec<ChainPeer>,
}

pub async fn job_detail(
    state: &GatewayState,
    request: GetJobDetail,
) -> Result<JobDetail, ApiError> {
    let count = request.next.unwrap_or(NEXT_FIRES);
    if !(1..=schedule_preview::MAX_COUNT).contains(&count) {
        return Err(ApiError::invalid_field(
            "next",
            format!("must be 1 to {}, got {count}", schedule_preview::MAX_COUNT),
        ));
    }
    let id = request.id;
    validate_id(&id).map_err(|p| ApiError::invalid_job(vec![p]))?;
    let (stored, valid) = state
        .jobs
        .get(&id)
        .await
        .map_err(ApiError::unavailable)?
        .ok_or_else(|| ApiError::not_found("id", format!("no job {id:?}")))?;
    let now = state.clock.now();
    let (next_fires, schedule_preview, paused) = match &valid {
        Some(job) => {
            let fires = job.upcoming(now, count);
            let preview = schedule_preview::describe(
                job.spec.schedule_line(),
                &job.schedule,
                job.timezone,
                &fires,
            );
            (
                fires.into_iter().map(rfc3339_millis).collect(),
                Some(preview),
                job.spec.paused,
            )
        }
        None => (Vec::new(), None, false),
    };
    let history = state.runs.with(Patience::Glance);
    let (last_run, last_24h) = tokio::join!(
        history.runs_of_job(&id, 1, None),
        stats::run_stats(history.reads(), now - Duration::hours(24), now, Some(&id)),
    );
    let history_unavailable = match (&last_run, &last_24h) {
        (Err(e), _) | (_, Err(e)) => Some(e.to_string()),
        _ => None,
    };
    let last_run = last_run.ok().and_then(|(mut runs, _)| runs.pop());
    let last_24h = last_24h.ok().and_then(|mut by_job| by_job.remove(&id));
    let ChainView { parents, children } = state.catalog.chain_of(&id);
    Ok(JobDetail {
        ok: true,
        job: stored,
        next_fires,
        next_fires_if_resumed: paused,
        schedule_preview,
        last_run,
        success_rate_24h: last_24h.as_ref().and_then(|s| s.success_rate),
        runs_24h: last_24h.as_ref().map_or(0, |s| s.runs),
        history_unavailable,
        parents,
        children,
    })
}

/// The answer of [`job_history`]: every revision the bucket keeps, oldest
/// first, and the newest `job.rejected` events naming the id (left out, with
/// the reason, when ClickHouse is away).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct JobHistory {
    pub ok: bool,
    pub id: String,
    pub revisions: Vec<Revision>,
    pub rejections: Vec<Rejection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejections_unavailable: Option<String>,
}

pub async fn job_history(state: &GatewayState, id: String) -> Result<JobHistory, ApiError> {
    validate_id(&id).map_err(|p| ApiError::invalid_field("id", p.message))?;
    let revisions = state
        .jobs
        .history(&id)
        .await
        .map_err(ApiError::unavailable)?;
    let glance = state.runs.with(Patience::Glance);
    let (rejections, rejections_unavailable) =
        match glance.rejections(Some(&id), HISTORY_REJECTIONS).await {
            Ok(r) => (r, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
    if revisions.is_empty() && rejections.is_empty() && rejections_unavailable.is_none() {
        return Err(ApiError::not_found(
            "id",
            format!("no job {id:?} and no history of one"),
        ));
    }
    Ok(JobHistory {
        ok: true,
        id,
        revisions,
        rejections,
        rejections_unavailable,
    })
}

/// Newest rejections, of one job when `job` is given.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListRejections {
    pub job: Option<String>,
    pub limit: Option<u32>,
    /// How long to wait for ClickHouse (not a parameter).
    #[serde(skip)]
    pub patience: Patience,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RejectionsReply {
    pub ok: bool,
    pub rejections: Vec<Rejection>,
}

pub async fn rejections(
    state: &GatewayState,
    request: ListRejections,
) -> Result<RejectionsReply, ApiError> {
    let limit = checked_limit(request.limit)?;
    if let Some(job) = &request.job {
        if job.is_empty() || job.len() > 256 {
            return Err(ApiError::invalid_field(
                "job",
                "must be 1 to 256 characters",
            ));
        }
    }
    let rejections = state
        .runs
        .with(request.patience)
        .rejections(request.job.as_deref(), limit)
        .await?;
    Ok(RejectionsReply {
        ok: true,
        rejections,
    })
}

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
    let limit = checked_limit(request.limit)?;
    let before = request
        .cursor
        .as_deref()
        .map(runs::listing::decode_cursor)
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

/// Runs across jobs, newest scheduled time first, with filters and a cursor.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListRuns {
    pub job: Option<String>,
    /// Statuses, comma-separated.
    pub status: Option<String>,
    pub pool: Option<String>,
    /// RFC 3339 scheduled-time range (default: the last 7 days).
    pub from: Option<String>,
    pub to: Option<String>,
    /// Text the error contains (case-insensitive).
    pub q: Option<String>,
    pub cursor: Option<String>,
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
    let (from, to) = range(
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
        validate_id(pool).map_err(|p| ApiError::invalid_field("pool", p.message))?;
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
        job_id: job_param(request.job)?,
        statuses,
        pool: request.pool,
        from_ms: from.timestamp_millis(),
        to_ms: to.timestamp_millis(),
        error_contains: request.q,
        after: request
            .cursor
            .as_deref()
            .map(runs::listing::decode_cursor)
            .transpose()?,
        limit: checked_limit(request.limit)?,
    };
    let (runs, next_cursor) = runs::listing::list(state.runs.reads(), &filter).await?;
    Ok(RunsReply {
        ok: true,
        from: rfc3339_millis(from),
        to: rfc3339_millis(to),
        runs,
        next_cursor,
    })
}

/// Per job: runs by status, success rate, percentiles and missed fires.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetStats {
    pub job: Option<String>,
    /// RFC 3339 range (default: the last 24 hours).
    pub from: Option<String>,
    pub to: Option<String>,
    /// How long to wait for ClickHouse (not a parameter).
    #[serde(skip)]
    pub patience: Patience,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct StatsReply {
    pub ok: bool,
    pub from: String,
    pub to: String,
    pub jobs: Vec<JobStats>,
    /// Set when more jobs exist than missed fires were counted for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed_fires_checked_jobs: Option<usize>,
}

pub async fn stats(state: &GatewayState, request: GetStats) -> Result<StatsReply, ApiError> {
    let now = state.clock.now();
    let (from, to) = range(
        request.from.as_deref(),
        request.to.as_deref(),
        now,
        Duration::hours(24),
        MAX_STATS_RANGE,
    )?;
    let job = job_param(request.job)?;
    let reads = state.runs.reads().with(request.patience);
    let (counts, failures) = tokio::join!(
        stats::run_stats(&reads, from, to, job.as_deref()),
        stats::notify_failures(&reads, from, to, job.as_deref()),
    );
    let mut counts = counts?;
    stats::with_notify_failures(&mut counts, failures?);
    let mut jobs: Vec<CurrentJob> = match &job {
        Some(id) => state
            .jobs
            .get(id)
            .await
            .map_err(ApiError::unavailable)?
            .and_then(|(stored, valid)| {
                let written_at = DateTime::parse_from_rfc3339(&stored.updated_at).ok()?;
                Some(CurrentJob {
                    job: valid?,
                    written_at: written_at.with_timezone(&Utc),
                })
            })
            .into_iter()
            .collect(),
        // The first MAX_STATS_JOBS valid jobs, and one more to tell that
        // there are more: the rest of the bucket is not read.
        None => {
            let mut pass = state
                .jobs
                .pass(&state.js)
                .await
                .map_err(ApiError::unavailable)?;
            let mut jobs = Vec::new();
            while jobs.len() <= MAX_STATS_JOBS {
                let wanted = MAX_STATS_JOBS + 1 - jobs.len();
                match pass
                    .next_chunk(wanted)
                    .await
                    .map_err(ApiError::unavailable)?
                {
                    Some(chunk) => jobs.extend(chunk),
                    None => break,
                }
            }
            jobs
        }
    };
    let truncated = jobs.len() > MAX_STATS_JOBS;
    jobs.truncate(MAX_STATS_JOBS);
    // Only up to where ClickHouse holds every run event (see
    // pools::projected_until); if that cannot be told, up to now.
    let until = crate::runs::pools::projected_until(state, now)
        .await
        .ok()
        .flatten()
        .unwrap_or(now);
    let grace = state.limits.missed_grace;
    let missed = stats::missed_fires(&reads, &jobs, from, to, until, grace).await?;
    Ok(StatsReply {
        ok: true,
        from: rfc3339_millis(from),
        to: rfc3339_millis(to),
        jobs: stats::with_missed(counts, missed),
        missed_fires_checked_jobs: truncated.then_some(MAX_STATS_JOBS),
    })
}

fn checked_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid_field(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}, got {limit}"),
        ));
    }
    Ok(limit)
}

fn instant(field: &str, text: Option<&str>) -> Result<Option<DateTime<Utc>>, ApiError> {
    text.map(|t| {
        DateTime::parse_from_rfc3339(t)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| {
                ApiError::invalid_field(
                    field,
                    format!("must be an RFC 3339 instant like 2026-11-22T10:00:00Z: {e}"),
                )
            })
    })
    .transpose()
}

/// `[from, to]` from the request, defaults applied (`to`: now), bounded by `max`.
fn range(
    from: Option<&str>,
    to: Option<&str>,
    now: DateTime<Utc>,
    default_span: Duration,
    max: Duration,
) -> Result<(DateTime<Utc>, DateTime<Utc>), ApiError> {
    let to = instant("to", to)?.unwrap_or(now);
    let from = instant("from", from)?.unwrap_or(to - default_span);
    if from > to {
        return Err(ApiError::invalid_field("from", "must not be later than to"));
    }
    if to - from > max {
        return Err(ApiError::invalid_field(
            "from",
            format!("the range may span at most {} days", max.num_days()),
        ));
    }
    Ok((from, to))
}

fn job_param(job: Option<String>) -> Result<Option<String>, ApiError> {
    job.map(|id| {
        validate_id(&id)
            .map(|()| id)
            .map_err(|p| ApiError::invalid_field("job", p.message))
    })
    .transpose()
}
