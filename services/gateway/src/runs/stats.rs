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
//! The same computation runs periodically in [`crate::missed_fires::scan`],
//! which records each missed fire as a `fire.missed` job event in ClickHouse
//! (for Grafana) and feeds the gauge.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use jetcron_core::events::RunId;
use jetcron_core::job::ValidJob;
use jetcron_core::time_format::rfc3339_millis;
use serde::Serialize;

use crate::sql::reads::{ClickHouseReads, HistoryUnavailable};
use crate::sql::run_events;
use crate::sql::runs_view::{self, JobStatsRow};

/// A fire is missed only once it is this much older than its (jittered) time
/// (the default of [`crate::limits::Limits::missed_grace`]).
pub const MISSED_GRACE: Duration = Duration::minutes(2);
/// Most expected fires enumerated per job and request.
pub const MAX_EXPECTED_PER_JOB: usize = 10_000;
/// Most jobs whose missed fires one statistics request (or one lookup of
/// the scan) checks.
pub const MAX_STATS_JOBS: usize = 2_000;

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
    let present = run_events::present_run_ids(
        reads,
        &ids,
        earliest.timestamp_millis(),
        latest.timestamp_millis(),
    )
    .await?;
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
