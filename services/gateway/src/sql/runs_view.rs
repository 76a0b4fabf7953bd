//! Statements on [`RUNS_VIEW`] (`jetcron.runs`), one row per run as
//! ClickHouse keeps it from the run events: the run listing (every filter a
//! fixed SQL fragment with bound values; the cursor is the last row's
//! (scheduled time, run id), the sort key, so a page never repeats or skips
//! a run when newer runs arrive meanwhile), the statistics per job, and the
//! console's figures (last runs, runs by hour).

use chrono::{DateTime, Duration, Utc};
use serde::Deserialize;

use super::reads::{ClickHouseReads, HistoryUnavailable};
use super::{per_job_in_range, RUNS_VIEW};

/// Columns of [`RunRow`], in order (the client does not check them: ClickHouse 18.16).
pub const RUN_ROW_COLUMNS: &str = "job_id, scheduled_ms, run_id, trigger, pool, target_type, \
    shards, attempt, max_attempts, first_started_ms, started_ms, finished_ms, status, error, \
    duration_ms, retries, executor_id";

/// One row of `jetcron.runs`.
#[derive(Debug, Clone, clickhouse::Row, Deserialize)]
pub struct RunRow {
    pub job_id: String,
    pub scheduled_ms: i64,
    pub run_id: String,
    pub trigger: String,
    pub pool: String,
    pub target_type: String,
    pub shards: u32,
    pub attempt: u32,
    pub max_attempts: u32,
    pub first_started_ms: i64,
    pub started_ms: i64,
    pub finished_ms: i64,
    pub status: String,
    pub error: String,
    pub duration_ms: i64,
    pub retries: u64,
    pub executor_id: String,
}

/// The filters of a listing, checked.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub job_id: Option<String>,
    /// The namespace of the runs' jobs (`default`: names without a dot).
    pub namespace: Option<String>,
    pub statuses: Vec<String>,
    pub pool: Option<String>,
    /// Scheduled time range, inclusive, in ms.
    pub from_ms: i64,
    pub to_ms: i64,
    /// Case-insensitive text the error must contain.
    pub error_contains: Option<String>,
    /// Continue after this (scheduled_ms, run_id).
    pub after: Option<(i64, String)>,
    pub limit: u32,
}

/// The namespace of a row's `job_id` (`billing.export`: `billing`; a name
/// without a dot: `default`), in functions ClickHouse 18.16 has.
pub const NAMESPACE_OF_JOB: &str = "if(position(job_id, '.') = 0, 'default', \
    substring(job_id, 1, position(job_id, '.') - 1))";

/// The runs `filter` selects, newest scheduled time first: `limit + 1` rows
/// (one more than asked tells whether a next page exists).
pub async fn runs(
    reads: &ClickHouseReads,
    filter: &RunFilter,
) -> Result<Vec<RunRow>, HistoryUnavailable> {
    let query = list_query(reads.client(), filter);
    reads.fetch_all(query, "query runs").await
}

/// The query of [`runs`].
pub(super) fn list_query(
    client: &clickhouse::Client,
    filter: &RunFilter,
) -> clickhouse::query::Query {
    let mut sql = format!(
        "SELECT {RUN_ROW_COLUMNS} FROM {RUNS_VIEW} WHERE scheduled_ms >= ? AND scheduled_ms <= ?"
    );
    if filter.job_id.is_some() {
        sql.push_str(" AND job_id = ?");
    }
    if filter.namespace.is_some() {
        sql.push_str(&format!(" AND {NAMESPACE_OF_JOB} = ?"));
    }
    if !filter.statuses.is_empty() {
        sql.push_str(" AND has(?, status)");
    }
    if filter.pool.is_some() {
        sql.push_str(" AND pool = ?");
    }
    if filter.error_contains.is_some() {
        sql.push_str(" AND positionCaseInsensitive(error, ?) > 0");
    }
    if filter.after.is_some() {
        sql.push_str(" AND (scheduled_ms < ? OR (scheduled_ms = ? AND run_id < ?))");
    }
    sql.push_str(" ORDER BY scheduled_ms DESC, run_id DESC LIMIT ?");
    let mut query = client.query(&sql).bind(filter.from_ms).bind(filter.to_ms);
    if let Some(job) = &filter.job_id {
        query = query.bind(job);
    }
    if let Some(namespace) = &filter.namespace {
        query = query.bind(namespace);
    }
    if !filter.statuses.is_empty() {
        query = query.bind(&filter.statuses);
    }
    if let Some(pool) = &filter.pool {
        query = query.bind(pool);
    }
    if let Some(text) = &filter.error_contains {
        query = query.bind(text);
    }
    if let Some((ms, run_id)) = &filter.after {
        query = query.bind(ms).bind(ms).bind(run_id);
    }
    query.bind(filter.limit + 1)
}

/// Counts and percentiles of one job's runs, as ClickHouse aggregates them.
#[derive(Debug, Clone, clickhouse::Row, Deserialize)]
pub struct JobStatsRow {
    pub job_id: String,
    pub runs: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub timed_out: u64,
    pub killed: u64,
    pub skipped: u64,
    pub in_progress: u64,
    /// Runs that started, and their fire lag's p50, p95 and p99.
    pub started: u64,
    pub lag: Vec<i64>,
    /// Runs that finished after a start, and their duration's p50, p95 and p99.
    pub finished: u64,
    pub duration: Vec<i64>,
}

/// The statistics of every job (one job when given) with runs scheduled
/// in `[from, to]`, by job id.
pub async fn run_stats(
    reads: &ClickHouseReads,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    job_id: Option<&str>,
) -> Result<Vec<JobStatsRow>, HistoryUnavailable> {
    let query = run_stats_query(reads.client(), from, to, job_id);
    reads.fetch_all(query, "query run statistics").await
}

/// The query of [`run_stats`].
pub(super) fn run_stats_query(
    client: &clickhouse::Client,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    job_id: Option<&str>,
) -> clickhouse::query::Query {
    let select = format!(
        "SELECT job_id, count() AS runs, \
    countIf(status = 'succeeded') AS succeeded, countIf(status = 'failed') AS failed, \
    countIf(status = 'timed_out') AS timed_out, countIf(status = 'killed') AS killed, \
    countIf(status = 'skipped') AS skipped, countIf(status IN ('running', 'retrying')) AS in_progress, \
    countIf(first_started_ms > 0) AS started, \
    quantilesExactIf(0.5, 0.95, 0.99)(first_started_ms - scheduled_ms, first_started_ms > 0) AS lag, \
    countIf(finished_ms > 0 AND started_ms > 0) AS finished, \
    quantilesExactIf(0.5, 0.95, 0.99)(duration_ms, finished_ms > 0 AND started_ms > 0) AS duration \
    FROM {RUNS_VIEW} WHERE scheduled_ms >= ? AND scheduled_ms <= ?"
    );
    per_job_in_range(client, &select, from, to, job_id)
}

/// The last run of a job.
#[derive(Debug, Clone, clickhouse::Row, Deserialize)]
pub struct LastRunRow {
    pub job_id: String,
    pub last_run_id: String,
    pub last_status: String,
    pub last_scheduled_ms: i64,
    pub last_duration_ms: i64,
}

/// The newest run of each of `job_ids` scheduled in `[from, to]`.
pub async fn last_runs(
    reads: &ClickHouseReads,
    job_ids: &[&str],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<LastRunRow>, HistoryUnavailable> {
    let query = last_runs_query(reads.client(), job_ids, from, to);
    reads.fetch_all(query, "query last runs").await
}

/// The query of [`last_runs`].
pub(super) fn last_runs_query(
    client: &clickhouse::Client,
    job_ids: &[&str],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> clickhouse::query::Query {
    let sql = format!(
        "SELECT job_id, argMax(run_id, scheduled_ms) AS last_run_id, \
         argMax(status, scheduled_ms) AS last_status, max(scheduled_ms) AS last_scheduled_ms, \
         argMax(duration_ms, scheduled_ms) AS last_duration_ms \
         FROM {RUNS_VIEW} WHERE scheduled_ms >= ? AND scheduled_ms <= ? AND has(?, job_id) \
         GROUP BY job_id ORDER BY job_id"
    );
    client
        .query(&sql)
        .bind(from.timestamp_millis())
        .bind(to.timestamp_millis())
        .bind(job_ids)
}

/// One job's (or, with an empty job id, every job's) runs of one hour.
#[derive(Debug, Clone, clickhouse::Row, Deserialize)]
pub struct HourRow {
    pub job_id: String,
    /// Whole hours between the runs' scheduled time and the end of the range.
    pub hours_ago: u32,
    pub succeeded: u64,
    /// Failed, timed out or killed.
    pub failed: u64,
    /// Running, retrying and skipped.
    pub other: u64,
}

/// Runs of `job_ids` (all jobs: `None`, as one row per hour with an empty
/// job id) in the `hours` hours before `now`, counted by hours before `now`.
pub async fn runs_by_hour(
    reads: &ClickHouseReads,
    job_ids: Option<&[&str]>,
    now: DateTime<Utc>,
    hours: i64,
) -> Result<Vec<HourRow>, HistoryUnavailable> {
    let query = hours_query(reads.client(), job_ids, now, hours);
    reads.fetch_all(query, "query runs by hour").await
}

/// The query of [`runs_by_hour`].
pub(super) fn hours_query(
    client: &clickhouse::Client,
    job_ids: Option<&[&str]>,
    now: DateTime<Utc>,
    hours: i64,
) -> clickhouse::query::Query {
    let now_ms = now.timestamp_millis();
    let (job, filter, group) = match job_ids {
        Some(_) => ("job_id", " AND has(?, job_id)", "job_id, hours_ago"),
        None => ("'' AS job_id", "", "hours_ago"),
    };
    let sql = format!(
        "SELECT {job}, toUInt32(intDiv(? - scheduled_ms, 3600000)) AS hours_ago, \
         countIf(status = 'succeeded') AS succeeded, \
         countIf(status IN ('failed', 'timed_out', 'killed')) AS failed, \
         countIf(status NOT IN ('succeeded', 'failed', 'timed_out', 'killed')) AS other \
         FROM {RUNS_VIEW} WHERE scheduled_ms > ? AND scheduled_ms <= ?{filter} \
         GROUP BY {group} ORDER BY {group}"
    );
    let mut query = client
        .query(&sql)
        .bind(now_ms)
        .bind(now_ms - Duration::hours(hours).num_milliseconds())
        .bind(now_ms);
    if let Some(ids) = job_ids {
        query = query.bind(ids);
    }
    query
}
