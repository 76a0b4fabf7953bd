//! The run figures the console shows beside jobs, as read operations like
//! the others: each job's last run within a week and its runs of the last
//! 24 hours by hour, for a page of the job table ([`row_figures`]); every
//! job's last 24 hours by hour ([`all_jobs_day`]) and the missed fires
//! recorded in them ([`missed_fires_recorded`]), for the overview.
//!
//! They count what ClickHouse folds (the runs view), so a page of 50 jobs
//! costs two queries, not 50 run listings. They fail only when ClickHouse
//! gives no answer, so their error is [`HistoryUnavailable`] (an
//! [`ApiError`](jetcron_core::api::ApiError) by `From`); the console shows
//! its page without them then, and they only glance when asked to.

use std::collections::BTreeMap;

use chrono::Duration;

use crate::sql::job_events;
use crate::sql::reads::{HistoryUnavailable, Patience};
use crate::sql::runs_view::{self, HourRow, LastRunRow};
use crate::GatewayState;

/// How far back the last run is looked for.
pub const LAST_RUN_WITHIN: Duration = Duration::days(7);
/// Hours of a [`Day`].
pub const HOURS: usize = 24;

/// A job's newest run within [`LAST_RUN_WITHIN`].
#[derive(Debug, Clone)]
pub struct LastRun {
    pub run_id: String,
    pub status: String,
    pub scheduled_ms: i64,
    pub duration_ms: i64,
}

impl From<LastRunRow> for LastRun {
    fn from(row: LastRunRow) -> Self {
        Self {
            run_id: row.last_run_id,
            status: row.last_status,
            scheduled_ms: row.last_scheduled_ms,
            duration_ms: row.last_duration_ms,
        }
    }
}

/// One job's (or every job's) last 24 hours, oldest hour first.
#[derive(Debug, Clone, Default)]
pub struct Day {
    pub succeeded: [u64; HOURS],
    pub failed: [u64; HOURS],
    /// Running, retrying and skipped runs.
    pub other: [u64; HOURS],
}

impl Day {
    fn add(&mut self, row: &HourRow) {
        if let Some(slot) = HOURS.checked_sub(1 + row.hours_ago as usize) {
            self.succeeded[slot] += row.succeeded;
            self.failed[slot] += row.failed;
            self.other[slot] += row.other;
        }
    }

    /// Succeeded and failed runs of the whole day.
    pub fn totals(&self) -> (u64, u64) {
        (self.succeeded.iter().sum(), self.failed.iter().sum())
    }
}

/// The figures of some jobs' rows, by job id (a job without runs has none).
#[derive(Debug, Default)]
pub struct RowFigures {
    pub last: BTreeMap<String, LastRun>,
    pub day: BTreeMap<String, Day>,
}

/// The figures of the rows of `jobs`, read with `patience`.
#[derive(Debug, Clone, Default)]
pub struct GetRowFigures {
    pub jobs: Vec<String>,
    pub patience: Patience,
}

/// Each job's last run and its last 24 hours, in two queries for all.
pub async fn row_figures(
    state: &GatewayState,
    request: GetRowFigures,
) -> Result<RowFigures, HistoryUnavailable> {
    if request.jobs.is_empty() {
        return Ok(RowFigures::default());
    }
    let now = state.clock.now();
    let reads = state.runs.reads().with(request.patience);
    let jobs: Vec<&str> = request.jobs.iter().map(String::as_str).collect();
    let (last, hours) = tokio::join!(
        runs_view::last_runs(&reads, &jobs, now - LAST_RUN_WITHIN, now),
        runs_view::runs_by_hour(&reads, Some(&jobs), now, HOURS as i64),
    );
    let (last, hours) = (last?, hours?);
    let mut day: BTreeMap<String, Day> = BTreeMap::new();
    for row in hours {
        day.entry(row.job_id.clone()).or_default().add(&row);
    }
    Ok(RowFigures {
        last: last
            .into_iter()
            .map(|r| (r.job_id.clone(), LastRun::from(r)))
            .collect(),
        day,
    })
}

/// Every job's runs of the last 24 hours by hour, read with `patience`.
pub async fn all_jobs_day(
    state: &GatewayState,
    patience: Patience,
) -> Result<Day, HistoryUnavailable> {
    let reads = state.runs.reads().with(patience);
    let rows = runs_view::runs_by_hour(&reads, None, state.clock.now(), HOURS as i64).await?;
    let mut day = Day::default();
    rows.iter().for_each(|row| day.add(row));
    Ok(day)
}

/// How many `fire.missed` events were recorded in the last 24 hours, read
/// with `patience`.
pub async fn missed_fires_recorded(
    state: &GatewayState,
    patience: Patience,
) -> Result<u64, HistoryUnavailable> {
    let reads = state.runs.reads().with(patience);
    let now = state.clock.now();
    job_events::missed_fires_recorded(&reads, now - Duration::hours(HOURS as i64), now).await
}
