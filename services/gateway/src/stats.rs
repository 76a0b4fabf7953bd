//! `GET /v1/stats` and the missed-fires gauge.
//!
//! Per job over a range of scheduled times: runs by status, success rate,
//! fire lag (first start − scheduled time) and duration percentiles, all from
//! the `jetcron.runs` view; and **missed fires**: times the job's current
//! definition says it should have fired, older than a grace period, with no
//! run event at all. Run ids of scheduled fires are derived from (job id,
//! time), so "no run" is an exact lookup, not a guess. Only the current
//! definition is asked, from when it was written: an edit or a pause starts
//! the count afresh, so a changed schedule never reports the old one's times.
//! A fire still waiting in a pool nobody serves counts as missed once past
//! the grace: from the user's side nothing ran.
//!
//! The same computation runs periodically in [`crate::missed_fire_scan`],
//! which records each missed fire as a `fire.missed` job event in ClickHouse
//! (for Grafana) and feeds the gauge.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Duration, Utc};
use jetcron_core::events::RunId;
use jetcron_core::job::ValidJob;
use jetcron_core::time_format::rfc3339_millis;
use serde::{Deserialize, Serialize};

use crate::clickhouse_reads::{ClickHouseReads, HistoryUnavailable};

/// A fire is missed only once it is this much older than its (jittered) time
/// (the default of [`crate::limits::Limits::missed_grace`]).
pub const MISSED_GRACE: Duration = Duration::minutes(2);
/// Most expected fires enumerated per job and request.
pub const MAX_EXPECTED_PER_JOB: usize = 10_000;
/// Most jobs whose missed fires one statistics request (or one lookup of
/// the scan) checks.
pub const MAX_STATS_JOBS: usize = 2_000;

/// Counts and percentiles of one job, as ClickHouse aggregates them.
#[derive(Debug, Clone, clickhouse::Row, Deserialize)]
struct JobStatsRow {
    job_id: String,
    runs: u64,
    succeeded: u64,
    failed: u64,
    timed_out: u64,
    killed: u64,
    skipped: u64,
    in_progress: u64,
    started: u64,
    lag: Vec<i64>,
    finished: u64,
    duration: Vec<i64>,
}

const STATS_SQL: &str = "SELECT job_id, count() AS runs, \
    countIf(status = 'succeeded') AS succeeded, countIf(status = 'failed') AS failed, \
    countIf(status = 'timed_out') AS timed_out, countIf(status = 'killed') AS killed, \
    countIf(status = 'skipped') AS skipped, countIf(status IN ('running', 'retrying')) AS in_progress, \
    countIf(first_started_ms > 0) AS started, \
    quantilesExactIf(0.5, 0.95, 0.99)(first_started_ms - scheduled_ms, first_started_ms > 0) AS lag, \
    countIf(finished_ms > 0 AND started_ms > 0) AS finished, \
    quantilesExactIf(0.5, 0.95, 0.99)(duration_ms, finished_ms > 0 AND started_ms > 0) AS duration \
    FROM jetcron.runs WHERE scheduled_ms >= ? AND scheduled_ms <= ?";

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
    let query = notify_failures_query(reads.client(), from, to, job_id);
    let rows: Vec<(String, u64)> = reads.fetch_all(query, "query failed notifications").await?;
    Ok(rows.into_iter().collect())
}

/// The query of [`notify_failures`] (`notify_failed` events are not in the
/// `runs` view: they do not change a run's state).
pub fn notify_failures_query(
    client: &clickhouse::Client,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    job_id: Option<&str>,
) -> clickhouse::query::Query {
    per_job_in_range(
        client,
        "SELECT job_id, uniqExact(event_id) AS failures FROM jetcron.run_events \
         WHERE kind = 'notify_failed' AND scheduled_ms >= ? AND scheduled_ms <= ?",
        from,
        to,
        job_id,
    )
}

/// `select` (whose WHERE ends with the scheduled range `>= ? AND <= ?`)
/// for one job or all, grouped by job.
fn per_job_in_range(
    client: &clickhouse::Client,
    select: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    job_id: Option<&str>,
) -> clickhouse::query::Query {
    let mut sql = select.to_string();
    if job_id.is_some() {
        sql.push_str(" AND job_id = ?");
    }
    sql.push_str(" GROUP BY job_id ORDER BY job_id");
    let mut query = client
        .query(&sql)
        .bind(from.timestamp_millis())
        .bind(to.timestamp_millis());
    if let Some(id) = job_id {
        query = query.bind(id);
    }
    query
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
    let query = run_stats_query(reads.client(), from, to, job_id);
    let rows: Vec<JobStatsRow> = reads.fetch_all(query, "query run statistics").await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.job_id.clone(), JobStats::from_row(r)))
        .collect())
}

/// The query of [`run_stats`].
pub fn run_stats_query(
    client: &clickhouse::Client,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    job_id: Option<&str>,
) -> clickhouse::query::Query {
    per_job_in_range(client, STATS_SQL, from, to, job_id)
}

/// Run ids with events among `job_ids` in a scheduled range (missed fires).
pub fn present_runs_query(
    client: &clickhouse::Client,
    job_ids: &[&str],
    from_ms: i64,
    to_ms: i64,
) -> clickhouse::query::Query {
    client
        .query(
            "SELECT DISTINCT run_id FROM jetcron.run_events \
             WHERE scheduled_ms >= ? AND scheduled_ms <= ? AND has(?, job_id)",
        )
        .bind(from_ms)
        .bind(to_ms)
        .bind(job_ids)
}

/// Event ids of `fire.missed` events already stored for `job_ids` with
/// scheduled times in a range (deduplicated; the scan skips these).
pub fn recorded_missed_query(
    client: &clickhouse::Client,
    job_ids: &[&str],
    from_ms: i64,
    to_ms: i64,
) -> clickhouse::query::Query {
    client
        .query(
            "SELECT DISTINCT event_id FROM jetcron.job_events \
             WHERE kind = ? AND at_ms >= ? AND at_ms <= ? AND has(?, job_id)",
        )
        .bind(jetcron_core::job_events::FIRE_MISSED_KIND)
        .bind(from_ms)
        .bind(to_ms)
        .bind(job_ids)
}

/// A job as the missed-fire count needs it: its valid definition and when
/// that revision was written.
pub struct CurrentJob {
    pub job: ValidJob,
    pub written_at: DateTime<Utc>,
}

/// What the missed-fire count found for one job.
#[derive(Debug, Clone, Default)]
pub struct Missed {
    pub times: Vec<DateTime<Utc>>,
    pub truncated: bool,
}

/// The expected scheduled fires of `job` in `[from, to]` that are due by `now`.
fn expected_fires(
    current: &CurrentJob,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
    grace: Duration,
) -> (Vec<DateTime<Utc>>, bool) {
    let job = &current.job;
    if job.spec.paused {
        return (Vec::new(), false);
    }
    let jitter = Duration::from_std(job.jitter).unwrap_or_default();
    let start = from.max(current.written_at);
    let end = to.min(now - grace - jitter);
    if end < start {
        return (Vec::new(), false);
    }
    match job.scheduled_between(start, end, MAX_EXPECTED_PER_JOB) {
        Ok(times) => (times, false),
        // Too many: check the newest ones only.
        Err(_) => {
            let timing = job.timing();
            let mut times = Vec::with_capacity(MAX_EXPECTED_PER_JOB);
            let mut at = end;
            while times.len() < MAX_EXPECTED_PER_JOB {
                match timing.previous_scheduled(at) {
                    Some(t) if t >= start => {
                        times.push(t);
                        at = t - Duration::milliseconds(1);
                    }
                    _ => break,
                }
            }
            times.reverse();
            (times, true)
        }
    }
}

/// The fires one job was expected to have had, before ClickHouse is asked
/// which of them ran: what a job costs while its batch is gathered.
pub struct Expected {
    id: String,
    times: Vec<DateTime<Utc>>,
    truncated: bool,
}

impl Expected {
    /// How many fires the job was expected to have had.
    pub fn fires(&self) -> usize {
        self.times.len()
    }
}

/// The expected fires in `[from, to]` due by `now` of those of `jobs` that
/// have any.
pub fn expected_of(
    jobs: &[CurrentJob],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
    grace: Duration,
) -> Vec<Expected> {
    jobs.iter()
        .filter_map(|current| {
            let (times, truncated) = expected_fires(current, from, to, now, grace);
            (!times.is_empty()).then(|| Expected {
                id: current.job.spec.id.clone(),
                times,
                truncated,
            })
        })
        .collect()
}

/// Scheduled fires in `[from, to]` of `jobs` that have no run event.
pub async fn missed_fires(
    reads: &ClickHouseReads,
    jobs: &[CurrentJob],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
    grace: Duration,
) -> Result<BTreeMap<String, Missed>, HistoryUnavailable> {
    missed_of(reads, expected_of(jobs, from, to, now, grace)).await
}

/// Which of the `expected` fires have no run event (one ClickHouse query).
pub async fn missed_of(
    reads: &ClickHouseReads,
    expected: Vec<Expected>,
) -> Result<BTreeMap<String, Missed>, HistoryUnavailable> {
    let earliest = expected.iter().filter_map(|e| e.times.first()).min();
    let latest = expected.iter().filter_map(|e| e.times.last()).max();
    let (Some(earliest), Some(latest)) = (earliest, latest) else {
        return Ok(BTreeMap::new());
    };
    let ids: Vec<&str> = expected.iter().map(|e| e.id.as_str()).collect();
    let query = present_runs_query(
        reads.client(),
        &ids,
        earliest.timestamp_millis(),
        latest.timestamp_millis(),
    );
    let present: HashSet<String> = reads
        .fetch_all::<String>(query, "query runs of expected fires")
        .await?
        .into_iter()
        .collect();
    let mut missed = BTreeMap::new();
    for Expected {
        id,
        times,
        truncated,
    } in expected
    {
        let times: Vec<_> = times
            .into_iter()
            .filter(|t| !present.contains(RunId::for_fire(&id, *t).as_str()))
            .collect();
        missed.insert(id, Missed { times, truncated });
    }
    Ok(missed)
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

/// Missed fires per job with any, as the gauge counts them (a job with
/// none is not shown, so not kept).
pub fn counts_of(missed: &BTreeMap<String, Missed>) -> BTreeMap<String, u64> {
    missed
        .iter()
        .filter(|(_, m)| !m.times.is_empty())
        .map(|(id, m)| (id.clone(), m.times.len() as u64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetcron_core::job::parse_job;

    fn current(definition: &str, written_at: DateTime<Utc>) -> CurrentJob {
        CurrentJob {
            job: parse_job(definition.as_bytes(), None).expect("valid"),
            written_at,
        }
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("instant")
            .with_timezone(&Utc)
    }

    #[test]
    fn expected_fires_start_at_the_definition_and_stop_before_the_grace() {
        let job = current(
            r#"{"id":"a","schedule":"0 * * * * *","target":{"type":"nats","subject":"s"}}"#,
            at("2026-01-01T10:00:30Z"),
        );
        let (times, truncated) = expected_fires(
            &job,
            at("2026-01-01T09:00:00Z"),
            at("2026-01-01T11:00:00Z"),
            at("2026-01-01T10:10:00Z"),
            MISSED_GRACE,
        );
        assert!(!truncated);
        // 10:01 .. 10:08 (10:09 and 10:10 are within the 2-minute grace).
        assert_eq!(times.first(), Some(&at("2026-01-01T10:01:00Z")));
        assert_eq!(times.last(), Some(&at("2026-01-01T10:08:00Z")));
        assert_eq!(times.len(), 8);
        let paused = current(
            r#"{"id":"a","schedule":"0 * * * * *","paused":true,"target":{"type":"nats","subject":"s"}}"#,
            at("2026-01-01T10:00:30Z"),
        );
        assert!(expected_fires(
            &paused,
            at("2026-01-01T09:00:00Z"),
            at("2026-01-01T11:00:00Z"),
            at("2026-01-01T10:10:00Z"),
            MISSED_GRACE
        )
        .0
        .is_empty());
    }

    #[test]
    fn too_many_expected_fires_keeps_the_newest() {
        let job = current(
            r#"{"id":"a","schedule":"* * * * * *","target":{"type":"nats","subject":"s"}}"#,
            at("2026-01-01T00:00:00Z"),
        );
        let (times, truncated) = expected_fires(
            &job,
            at("2026-01-01T00:00:00Z"),
            at("2026-01-02T00:00:00Z"),
            at("2026-01-02T00:00:00Z"),
            MISSED_GRACE,
        );
        assert!(truncated);
        assert_eq!(times.len(), MAX_EXPECTED_PER_JOB);
        assert_eq!(times.last(), Some(&at("2026-01-01T23:58:00Z")));
    }
}
