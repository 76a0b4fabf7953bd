//! `GET /v1/stats`: per job over a range of scheduled times, runs by status,
//! success rate, fire lag (first start − scheduled time) and duration
//! percentiles, all from the `jetcron.runs` view; the notifications given
//! up; and the missed fires ([`crate::missed_fires::count`]) of the current
//! definitions. [`stats`] is the read operation (a typed request to a typed
//! answer or an [`ApiError`]); the job page shows the same answer.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use jetcron_core::api::ApiError;
use jetcron_core::job::patterns;
use jetcron_core::time_format::rfc3339_millis;
use serde::{Deserialize, Serialize};

use crate::jobs::pass::CurrentJob;
use crate::missed_fires::count::{self as missed, Missed};
use crate::read_params;
use crate::runs::projection;
use crate::sql::reads::{ClickHouseReads, HistoryUnavailable, Patience};
use crate::sql::run_events;
use crate::sql::runs_view::{self, JobStatsRow};
use crate::GatewayState;

/// Most jobs whose missed fires one statistics request (or one lookup of
/// the scan) checks.
pub const MAX_STATS_JOBS: usize = 2_000;
/// Longest range of one statistics request.
pub const MAX_STATS_RANGE: Duration = Duration::days(31);

/// p50 / p95 / p99 in milliseconds.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Percentiles {
    pub p50: i64,
    pub p95: i64,
    pub p99: i64,
}

fn percentiles(count: u64, values: &[i64]) -> Option<Percentiles> {
    match (count, values) {
        (0, _) => None,
        (_, [p50, p95, p99]) => Some(Percentiles {
            p50: *p50,
            p95: *p95,
            p99: *p99,
        }),
        _ => None,
    }
}

/// Everything `/v1/stats` says about one job.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct JobStats {
    pub job_id: String,
    pub runs: u64,
    pub by_status: BTreeMap<&'static str, u64>,
    /// Succeeded over finished runs (skipped ones excluded); none when no run finished.
    pub success_rate: Option<f64>,
    pub fire_lag_ms: Option<Percentiles>,
    pub duration_ms: Option<Percentiles>,
    pub missed_fires: u64,
    /// The newest missed times (at most 20).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missed_examples: Vec<String>,
    /// True when the range held more expected fires than were checked.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub missed_truncated: bool,
    /// Notifications given up after every try (`notify_failed` events): the
    /// job's webhook, or an alert to one channel.
    pub notifications_failed: u64,
}

impl JobStats {
    fn empty(job_id: &str) -> Self {
        Self {
            job_id: job_id.to_string(),
            runs: 0,
            by_status: BTreeMap::new(),
            success_rate: None,
            fire_lag_ms: None,
            duration_ms: None,
            missed_fires: 0,
            missed_examples: Vec::new(),
            missed_truncated: false,
            notifications_failed: 0,
        }
    }

    fn from_row(row: JobStatsRow) -> Self {
        let by_status = BTreeMap::from([
            ("succeeded", row.succeeded),
            ("failed", row.failed),
            ("timed_out", row.timed_out),
            ("killed", row.killed),
            ("skipped", row.skipped),
            ("in_progress", row.in_progress),
        ]);
        let finished = row.succeeded + row.failed + row.timed_out + row.killed;
        Self {
            runs: row.runs,
            success_rate: (finished > 0).then(|| row.succeeded as f64 / finished as f64),
            fire_lag_ms: percentiles(row.started, &row.lag),
            duration_ms: percentiles(row.finished, &row.duration),
            by_status,
            ..Self::empty(&row.job_id)
        }
    }
}

/// Failed notifications per job, of runs scheduled in `[from, to]`.
pub async fn notify_failures(
    reads: &ClickHouseReads,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    job_id: Option<&str>,
) -> Result<BTreeMap<String, u64>, HistoryUnavailable> {
    let rows = run_events::notify_failures(reads, from, to, job_id).await?;
    Ok(rows.into_iter().collect())
}

/// Add the failed notifications to `stats` (a job may have no run in the
/// range and still failed alerts: a missed fire's).
pub fn with_notify_failures(
    stats: &mut BTreeMap<String, JobStats>,
    failures: BTreeMap<String, u64>,
) {
    for (id, count) in failures {
        stats
            .entry(id.clone())
            .or_insert_with(|| JobStats::empty(&id))
            .notifications_failed = count;
    }
}

/// Counts and percentiles per job with runs scheduled in `[from, to]`.
pub async fn run_stats(
    reads: &ClickHouseReads,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    job_id: Option<&str>,
) -> Result<BTreeMap<String, JobStats>, HistoryUnavailable> {
    let rows = runs_view::run_stats(reads, from, to, job_id).await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.job_id.clone(), JobStats::from_row(r)))
        .collect())
}

/// Merge missed fires into the stats (jobs without runs get an entry too).
pub fn with_missed(
    mut stats: BTreeMap<String, JobStats>,
    missed: BTreeMap<String, Missed>,
) -> Vec<JobStats> {
    for (id, m) in missed {
        let entry = stats
            .entry(id.clone())
            .or_insert_with(|| JobStats::empty(&id));
        entry.missed_fires = m.times.len() as u64;
        entry.missed_truncated = m.truncated;
        entry.missed_examples = m
            .times
            .iter()
            .rev()
            .take(20)
            .map(|t| rfc3339_millis(*t))
            .collect();
    }
    stats.into_values().collect()
}

/// Per job: runs by status, success rate, percentiles and missed fires.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetStats {
    /// Only this job.
    #[schemars(regex(pattern = patterns::JOB_NAME_PATTERN))]
    pub job: Option<String>,
    /// RFC 3339 range (default: the 24 hours up to `to`, which defaults to
    /// now); at most 31 days.
    #[schemars(regex(pattern = patterns::INSTANT_PATTERN), extend("format" = patterns::INSTANT_FORMAT))]
    pub from: Option<String>,
    /// RFC 3339 end of the range (default: now).
    #[schemars(regex(pattern = patterns::INSTANT_PATTERN), extend("format" = patterns::INSTANT_FORMAT))]
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
    let (from, to) = read_params::range(
        request.from.as_deref(),
        request.to.as_deref(),
        now,
        Duration::hours(24),
        MAX_STATS_RANGE,
    )?;
    let job = read_params::job_param(request.job)?;
    let reads = state.runs.reads().with(request.patience);
    let (counts, failures) = tokio::join!(
        run_stats(&reads, from, to, job.as_deref()),
        notify_failures(&reads, from, to, job.as_deref()),
    );
    let mut counts = counts?;
    with_notify_failures(&mut counts, failures?);
    let (jobs, truncated) = jobs_to_check(state, job.as_deref()).await?;
    // Only up to where ClickHouse holds every run event (see
    // projection::projected_until); if that cannot be told, up to now.
    let until = projection::projected_until(state, now)
        .await
        .ok()
        .flatten()
        .unwrap_or(now);
    let grace = state.limits.missed_grace;
    let missed = missed::missed_fires(&reads, &jobs, from, to, until, grace).await?;
    Ok(StatsReply {
        ok: true,
        from: rfc3339_millis(from),
        to: rfc3339_millis(to),
        jobs: with_missed(counts, missed),
        missed_fires_checked_jobs: truncated.then_some(MAX_STATS_JOBS),
    })
}

/// The current definitions whose missed fires are counted: `job`'s, or
/// the first [`MAX_STATS_JOBS`] valid ones, and whether there were more.
async fn jobs_to_check(
    state: &GatewayState,
    job: Option<&str>,
) -> Result<(Vec<CurrentJob>, bool), ApiError> {
    let mut jobs: Vec<CurrentJob> = match job {
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
    Ok((jobs, truncated))
}
