//! Run queries against ClickHouse `jetcron.run_events`.
//!
//! Every value is bound (the client escapes it), never pasted into SQL. Rows
//! are folded into runs by [`jetcron_core::run_summary`], which dedups events,
//! so a replayed projection does not change an answer. Every read is bounded
//! in time by [`ClickHouseReads`].

use std::collections::BTreeMap;

use jetcron_core::run_summary::{summarize, RunSummary};
use jetcron_io::clickhouse_schema::{RunEventRow, RUN_EVENT_COLUMNS};

use crate::clickhouse_reads::{ClickHouseReads, HistoryUnavailable, Patience};

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

    /// The newest `job.rejected` events ([`crate::rejections`]).
    pub async fn rejections(
        &self,
        job_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<crate::rejections::Rejection>, HistoryUnavailable> {
        crate::rejections::newest(&self.reads, job_id, limit).await
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
        let query = runs_of_job_query(self.reads.client(), job_id, limit.saturating_add(1), before);
        let rows: Vec<RunEventRow> = self
            .reads
            .fetch_all(query, format!("query runs of job {job_id}"))
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
                crate::run_list::encode_cursor(r.scheduled_at.timestamp_millis(), r.run_id.as_str())
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
        let query = existing_runs_query(self.reads.client(), job_id, run_ids);
        let found: Vec<String> = self
            .reads
            .fetch_all(query, format!("look up existing runs of {job_id}"))
            .await?;
        Ok(found.into_iter().collect())
    }

    /// One run with its ordered events.
    pub async fn run(&self, run_id: &str) -> Result<Option<RunSummary>, HistoryUnavailable> {
        let query = run_query(self.reads.client(), run_id);
        let rows: Vec<RunEventRow> = self
            .reads
            .fetch_all(query, format!("query run {run_id}"))
            .await?;
        let events = rows
            .into_iter()
            .filter_map(RunEventRow::into_event)
            .collect();
        Ok(summarize(events, true))
    }
}

/// Every event of the newest `limit` runs of `job_id`.
pub fn runs_of_job_query(
    client: &clickhouse::Client,
    job_id: &str,
    limit: u32,
    before: Option<&(i64, String)>,
) -> clickhouse::query::Query {
    // Newest first by (scheduled time, run id), both descending; a cursor
    // continues strictly after the last run of the previous page. One SQL
    // shape with or without a cursor (`? = 1` switches it off).
    let sql = format!(
        "SELECT {RUN_EVENT_COLUMNS} FROM jetcron.run_events \
         WHERE job_id = ? AND run_id IN ( \
             SELECT run_id FROM ( \
                 SELECT DISTINCT run_id, scheduled_ms FROM jetcron.run_events \
                 WHERE job_id = ? \
                   AND (? = 1 OR scheduled_ms < ? OR (scheduled_ms = ? AND run_id < ?)) \
                 ORDER BY scheduled_ms DESC, run_id DESC LIMIT ?))"
    );
    let (no_cursor, ms, run_id) = match before {
        Some((ms, run_id)) => (0u8, *ms, run_id.as_str()),
        None => (1u8, 0, ""),
    };
    client
        .query(&sql)
        .bind(job_id)
        .bind(job_id)
        .bind(no_cursor)
        .bind(ms)
        .bind(ms)
        .bind(run_id)
        .bind(limit)
}

/// Which of `run_ids` have events.
pub fn existing_runs_query(
    client: &clickhouse::Client,
    job_id: &str,
    run_ids: &[String],
) -> clickhouse::query::Query {
    client
        .query("SELECT DISTINCT run_id FROM jetcron.run_events WHERE job_id = ? AND has(?, run_id)")
        .bind(job_id)
        .bind(run_ids)
}

/// Every event of one run.
pub fn run_query(client: &clickhouse::Client, run_id: &str) -> clickhouse::query::Query {
    let sql = format!("SELECT {RUN_EVENT_COLUMNS} FROM jetcron.run_events WHERE run_id = ?");
    client.query(&sql).bind(run_id)
}
