//! The run figures of one page of the job table, in two ClickHouse queries
//! for all its rows: each job's last run (within a week) and its runs of
//! the last 24 hours by hour, succeeded against failed (the sparkline).
//! A ClickHouse outage leaves the figures empty; the table still shows (the
//! page glances: [`crate::sql::reads::Patience::Glance`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};

use crate::sql::job_events;
use crate::sql::reads::{ClickHouseReads, HistoryUnavailable};
use crate::sql::runs_view::{self, HourRow, LastRunRow};

/// How far back the last run is looked for.
pub const LAST_RUN_WITHIN: Duration = Duration::days(7);
/// Hours in a sparkline.
pub const HOURS: usize = 24;

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
}

impl Day {
    /// Succeeded and failed runs of the whole day.
    pub fn totals(&self) -> (u64, u64) {
        (self.succeeded.iter().sum(), self.failed.iter().sum())
    }
}

/// The figures of a page's rows.
#[derive(Debug, Default)]
pub struct RowFigures {
    pub last: BTreeMap<String, LastRunRow>,
    pub day: BTreeMap<String, Day>,
}

pub async fn fetch(
    reads: &ClickHouseReads,
    job_ids: &[&str],
    now: DateTime<Utc>,
) -> Result<RowFigures, HistoryUnavailable> {
    if job_ids.is_empty() {
        return Ok(RowFigures::default());
    }
    let (last, hours) = tokio::join!(
        runs_view::last_runs(reads, job_ids, now - LAST_RUN_WITHIN, now),
        runs_view::runs_by_hour(reads, Some(job_ids), now, HOURS as i64),
    );
    let (last, hours) = (last?, hours?);
    let mut day: BTreeMap<String, Day> = BTreeMap::new();
    for row in hours {
        day.entry(row.job_id.clone()).or_default().add(&row);
    }
    Ok(RowFigures {
        last: last.into_iter().map(|r| (r.job_id.clone(), r)).collect(),
        day,
    })
}

/// Every job's runs of the last 24 hours by hour (the overview).
pub async fn all_jobs_day(
    reads: &ClickHouseReads,
    now: DateTime<Utc>,
) -> Result<Day, HistoryUnavailable> {
    let rows = runs_view::runs_by_hour(reads, None, now, HOURS as i64).await?;
    let mut day = Day::default();
    rows.iter().for_each(|row| day.add(row));
    Ok(day)
}

/// `fire.missed` events recorded in the 24 hours before `now`.
pub async fn missed_fires_recorded(
    reads: &ClickHouseReads,
    now: DateTime<Utc>,
) -> Result<u64, HistoryUnavailable> {
    job_events::missed_fires_recorded(reads, now - Duration::hours(HOURS as i64), now).await
}

/// An inline SVG bar chart of `day` (the overview): runs per hour, stacked
/// succeeded / other / failed, with the peak written beside it.
pub fn chart(day: &Day) -> String {
    let total = |h: usize| day.succeeded[h] + day.failed[h] + day.other[h];
    let peak = (0..HOURS).map(total).max().unwrap_or(0).max(1);
    let mut svg = format!(
        r#"<svg class="chart" viewBox="0 0 480 120" role="img" aria-label="Runs per hour over the last 24 hours, at most {peak} in an hour">"#
    );
    for hour in 0..HOURS {
        let x = hour * 20;
        let mut y = 120u64;
        for (count, class) in [
            (day.succeeded[hour], "ok"),
            (day.other[hour], "muted"),
            (day.failed[hour], "bad"),
        ] {
            let height = (count * 110).div_ceil(peak);
            if height > 0 {
                y = y.saturating_sub(height);
                svg.push_str(&format!(
                    r#"<rect x="{x}" y="{y}" width="16" height="{height}" class="{class}"/>"#
                ));
            }
        }
    }
    svg.push_str(&format!(
        r#"<text x="478" y="10" text-anchor="end" class="axis">{peak}/h</text></svg>"#
    ));
    svg
}

/// An inline SVG sparkline of `day`: one bar per hour, its height the runs
/// of that hour, failed runs stacked on top in the failure colour. Numbers
/// only, so nothing from a job reaches the markup.
pub fn sparkline(day: &Day) -> String {
    let peak = (0..HOURS)
        .map(|h| day.succeeded[h] + day.failed[h])
        .max()
        .unwrap_or(0)
        .max(1);
    let mut svg = String::from(
        r#"<svg class="spark" viewBox="0 0 72 16" width="72" height="16" aria-hidden="true">"#,
    );
    for hour in 0..HOURS {
        let x = hour * 3;
        let ok = day.succeeded[hour] * 16 / peak;
        let bad = (day.failed[hour] * 16).div_ceil(peak);
        if ok > 0 {
            svg.push_str(&format!(
                r#"<rect x="{x}" y="{}" width="2" height="{ok}" class="ok"/>"#,
                16 - ok
            ));
        }
        if bad > 0 {
            svg.push_str(&format!(
                r#"<rect x="{x}" y="{}" width="2" height="{bad}" class="bad"/>"#,
                16u64.saturating_sub(ok + bad)
            ));
        }
    }
    svg.push_str("</svg>");
    svg
}
