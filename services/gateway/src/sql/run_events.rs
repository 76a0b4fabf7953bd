//! Statements on [`RUN_EVENTS_TABLE`] (`jetcron.run_events`), one row per
//! run event: the events of one run or of a job's newest runs (folded into
//! runs by [`jetcron_core::run_summary`], which dedups events, so a replayed
//! projection does not change an answer), which runs exist (backfill, missed
//! fires), and the notifications given up (`notify_failed` events are not in
//! the runs view: they do not change a run's state).

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use jetcron_io::clickhouse_schema::{RunEventRow, RUN_EVENT_COLUMNS};

use super::reads::{ClickHouseReads, HistoryUnavailable};
use super::{per_job_in_range, RUN_EVENTS_TABLE};

/// Every event of the newest `limit` runs of `job_id`, newest scheduled
/// time first, strictly after the run `before` when given.
pub async fn events_of_job_runs(
    reads: &ClickHouseReads,
    job_id: &str,
    limit: u32,
    before: Option<&(i64, String)>,
) -> Result<Vec<RunEventRow>, HistoryUnavailable> {
    let query = runs_of_job_query(reads.client(), job_id, limit, before);
    reads
        .fetch_all(query, format!("query runs of job {job_id}"))
        .await
}

/// The query of [`events_of_job_runs`].
pub(super) fn runs_of_job_query(
    client: &clickhouse::Client,
    job_id: &str,
    limit: u32,
    before: Option<&(i64, String)>,
) -> clickhouse::query::Query {
    // Newest first by (scheduled time, run id), both descending; a cursor
    // continues strictly after the last run of the previous page. One SQL
    // shape with or without a cursor (`? = 1` switches it off).
    let sql = format!(
        "SELECT {RUN_EVENT_COLUMNS} FROM {RUN_EVENTS_TABLE} \
         WHERE job_id = ? AND run_id IN ( \
             SELECT run_id FROM ( \
                 SELECT DISTINCT run_id, scheduled_ms FROM {RUN_EVENTS_TABLE} \
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

/// Which of `run_ids` (of `job_id`) have at least one event recorded.
pub async fn existing_run_ids(
    reads: &ClickHouseReads,
    job_id: &str,
    run_ids: &[String],
) -> Result<HashSet<String>, HistoryUnavailable> {
    let query = existing_runs_query(reads.client(), job_id, run_ids);
    let found: Vec<String> = reads
        .fetch_all(query, format!("look up existing runs of {job_id}"))
        .await?;
    Ok(found.into_iter().collect())
}

/// The query of [`existing_run_ids`].
pub(super) fn existing_runs_query(
    client: &clickhouse::Client,
    job_id: &str,
    run_ids: &[String],
) -> clickhouse::query::Query {
    let sql = format!(
        "SELECT DISTINCT run_id FROM {RUN_EVENTS_TABLE} WHERE job_id = ? AND has(?, run_id)"
    );
    client.query(&sql).bind(job_id).bind(run_ids)
}

/// Every event of one run.
pub async fn events_of_run(
    reads: &ClickHouseReads,
    run_id: &str,
) -> Result<Vec<RunEventRow>, HistoryUnavailable> {
    let query = run_query(reads.client(), run_id);
    reads.fetch_all(query, format!("query run {run_id}")).await
}

/// The query of [`events_of_run`].
pub(super) fn run_query(client: &clickhouse::Client, run_id: &str) -> clickhouse::query::Query {
    let sql = format!("SELECT {RUN_EVENT_COLUMNS} FROM {RUN_EVENTS_TABLE} WHERE run_id = ?");
    client.query(&sql).bind(run_id)
}

/// Run ids with events among `job_ids` in a scheduled range, in ms (the
/// runs of expected fires: the others were missed).
pub async fn present_run_ids(
    reads: &ClickHouseReads,
    job_ids: &[&str],
    from_ms: i64,
    to_ms: i64,
) -> Result<HashSet<String>, HistoryUnavailable> {
    let query = present_runs_query(reads.client(), job_ids, from_ms, to_ms);
    let present: Vec<String> = reads
        .fetch_all(query, "query runs of expected fires")
        .await?;
    Ok(present.into_iter().collect())
}

/// The query of [`present_run_ids`].
pub(super) fn present_runs_query(
    client: &clickhouse::Client,
    job_ids: &[&str],
    from_ms: i64,
    to_ms: i64,
) -> clickhouse::query::Query {
    let sql = format!(
        "SELECT DISTINCT run_id FROM {RUN_EVENTS_TABLE} \
         WHERE scheduled_ms >= ? AND scheduled_ms <= ? AND has(?, job_id)"
    );
    client.query(&sql).bind(from_ms).bind(to_ms).bind(job_ids)
}

/// Failed notifications per job (one job when given), of runs scheduled
/// in `[from, to]`: (job id, count), by job id.
pub async fn notify_failures(
    reads: &ClickHouseReads,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    job_id: Option<&str>,
) -> Result<Vec<(String, u64)>, HistoryUnavailable> {
    let query = notify_failures_query(reads.client(), from, to, job_id);
    reads.fetch_all(query, "query failed notifications").await
}

/// The query of [`notify_failures`].
pub(super) fn notify_failures_query(
    client: &clickhouse::Client,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    job_id: Option<&str>,
) -> clickhouse::query::Query {
    let select = format!(
        "SELECT job_id, uniqExact(event_id) AS failures FROM {RUN_EVENTS_TABLE} \
         WHERE kind = 'notify_failed' AND scheduled_ms >= ? AND scheduled_ms <= ?"
    );
    per_job_in_range(client, &select, from, to, job_id)
}
