//! Runs from their events in ClickHouse (`jetcron.run_events`, read through
//! [`crate::sql::run_events`]): a run, a job's newest runs, which runs exist.
//!
//! Rows are folded into runs by [`jetcron_core::run_summary`], which dedups
//! events, so a replayed projection does not change an answer. Every read is
//! bounded in time by [`ClickHouseReads`].

use std::collections::BTreeMap;

use jetcron_core::run_summary::{summarize, RunSummary};
use jetcron_io::clickhouse_schema::RunEventRow;

use crate::sql::reads::{ClickHouseReads, HistoryUnavailable, Patience};
use crate::sql::run_events;

/// Read access to run history.
#[derive(Clone)]
pub struct RunHistory {
    reads: ClickHouseReads,
}

impl RunHistory {
    pub fn new(reads: ClickHouseReads) -> Self {
        Self { reads }
    }

    /// The bounded ClickHouse reads, for the other read modules.
    pub fn reads(&self) -> &ClickHouseReads {
        &self.reads
    }

    /// This history read with `patience`.
    pub fn with(&self, patience: Patience) -> Self {
        Self {
            reads: self.reads.with(patience),
        }
    }

    /// The newest `job.rejected` events ([`crate::jobs::rejections`]).
    pub async fn rejections(
        &self,
        job_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<crate::jobs::rejections::Rejection>, HistoryUnavailable> {
        crate::jobs::rejections::newest(&self.reads, job_id, limit).await
    }

    /// Whether ClickHouse answers `SELECT 1` (a glance: `/readyz` answers
    /// at once).
    pub async fn ping(&self) -> Result<(), HistoryUnavailable> {
        self.reads.with(Patience::Glance).ping().await
    }

    /// The newest `limit` runs of a job, newest scheduled time first.
    pub async fn runs_of_job(
        &self,
        job_id: &str,
        limit: u32,
        before: Option<&(i64, String)>,
    ) -> Result<(Vec<RunSummary>, Option<String>), HistoryUnavailable> {
        // One run more than asked tells whether a next page exists.
        let rows =
            run_events::events_of_job_runs(&self.reads, job_id, limit.saturating_add(1), before)
                .await?;
        let mut by_run: BTreeMap<String, Vec<_>> = BTreeMap::new();
        for row in rows {
            let run_id = row.run_id.clone();
            if let Some(event) = row.into_event() {
                by_run.entry(run_id).or_default().push(event);
            }
        }
        let mut runs: Vec<RunSummary> = by_run
            .into_values()
            .filter_map(|events| summarize(events, false))
            .collect();
        runs.sort_by(|a, b| (b.scheduled_at, &b.run_id).cmp(&(a.scheduled_at, &a.run_id)));
        let next = if runs.len() > limit as usize {
            runs.truncate(limit as usize);
            runs.last().map(|r| {
                crate::runs::listing::encode_cursor(
                    r.scheduled_at.timestamp_millis(),
                    r.run_id.as_str(),
                )
            })
        } else {
            None
        };
        Ok((runs, next))
    }

    /// Which of `run_ids` (of `job_id`) have at least one event recorded.
    pub async fn existing_run_ids(
        &self,
        job_id: &str,
        run_ids: &[String],
    ) -> Result<std::collections::HashSet<String>, HistoryUnavailable> {
        if run_ids.is_empty() {
            return Ok(Default::default());
        }
        run_events::existing_run_ids(&self.reads, job_id, run_ids).await
    }

    /// One run with its ordered events.
    pub async fn run(&self, run_id: &str) -> Result<Option<RunSummary>, HistoryUnavailable> {
        let rows = run_events::events_of_run(&self.reads, run_id).await?;
        let events = rows
            .into_iter()
            .filter_map(RunEventRow::into_event)
            .collect();
        Ok(summarize(events, true))
    }
}
