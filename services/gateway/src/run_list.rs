//! `GET /v1/runs`: runs across jobs from the `jetcron.runs` view (one row per
//! run, kept by ClickHouse from the run events), filtered, newest first, with
//! a cursor.
//!
//! Every filter is a fixed SQL fragment with bound values; nothing from the
//! request is pasted into SQL. The cursor is the last row's (scheduled time,
//! run id), the sort key, so a page never repeats or skips a run when newer
//! runs arrive meanwhile.

use chrono::DateTime;
use jetcron_core::api::ApiError;
use jetcron_core::time_format::rfc3339_millis;
use serde::{Deserialize, Serialize};

use crate::clickhouse_reads::{ClickHouseReads, HistoryUnavailable};

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

/// A run in a listing.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ListedRun {
    pub run_id: String,
    pub job_id: String,
    pub status: String,
    pub trigger: String,
    pub pool: String,
    pub target_type: String,
    pub scheduled_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// First start minus scheduled time.
    pub fire_lag_ms: Option<i64>,
    pub duration_ms: Option<i64>,
    pub attempt: u32,
    pub max_attempts: u32,
    pub retries: u64,
    pub executor_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
}

fn instant(ms: i64) -> Option<String> {
    (ms > 0)
        .then(|| DateTime::from_timestamp_millis(ms))
        .flatten()
        .map(rfc3339_millis)
}

impl From<RunRow> for ListedRun {
    fn from(r: RunRow) -> Self {
        let finished = r.finished_ms > 0;
        Self {
            scheduled_at: instant(r.scheduled_ms).unwrap_or_default(),
            started_at: instant(r.started_ms),
            finished_at: instant(r.finished_ms),
            fire_lag_ms: (r.first_started_ms > 0).then(|| r.first_started_ms - r.scheduled_ms),
            duration_ms: (finished && r.started_ms > 0).then_some(r.duration_ms),
            error: (!r.error.is_empty()).then_some(r.error),
            shards: (r.shards > 1).then_some(r.shards),
            run_id: r.run_id,
            job_id: r.job_id,
            status: r.status,
            trigger: r.trigger,
            pool: r.pool,
            target_type: r.target_type,
            attempt: r.attempt,
            max_attempts: r.max_attempts,
            retries: r.retries,
            executor_id: r.executor_id,
        }
    }
}

/// Statuses a run can have.
pub const STATUSES: [&str; 7] = [
    "running",
    "retrying",
    "succeeded",
    "failed",
    "timed_out",
    "killed",
    "skipped",
];

/// The filters of a listing, checked.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub job_id: Option<String>,
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

/// An opaque cursor for the row after which the next page starts.
pub fn encode_cursor(scheduled_ms: i64, run_id: &str) -> String {
    format!("{scheduled_ms}_{run_id}")
}

/// The (scheduled_ms, run_id) of a cursor.
pub fn decode_cursor(cursor: &str) -> Result<(i64, String), ApiError> {
    let bad = || ApiError::invalid_field("cursor", "not a cursor from a previous page");
    let (ms, run_id) = cursor.split_once('_').ok_or_else(bad)?;
    let ms = ms.parse::<i64>().map_err(|_| bad())?;
    let run_id = uuid::Uuid::parse_str(run_id).map_err(|_| bad())?;
    Ok((ms, run_id.hyphenated().to_string()))
}

/// One page of runs and the cursor of the next (none on the last page).
pub async fn list(
    reads: &ClickHouseReads,
    filter: &RunFilter,
) -> Result<(Vec<ListedRun>, Option<String>), HistoryUnavailable> {
    // One more than asked tells whether a next page exists.
    let query = list_query(reads.client(), filter);
    let rows: Vec<RunRow> = reads.fetch_all(query, "query runs").await?;
    let more = rows.len() > filter.limit as usize;
    let runs: Vec<ListedRun> = rows
        .into_iter()
        .take(filter.limit as usize)
        .map(ListedRun::from)
        .collect();
    let next = if more {
        runs.last().map(|r| {
            let ms = chrono::DateTime::parse_from_rfc3339(&r.scheduled_at)
                .map(|t| t.timestamp_millis())
                .unwrap_or_default();
            encode_cursor(ms, &r.run_id)
        })
    } else {
        None
    };
    Ok((runs, next))
}

/// The query of [`list`]: `limit + 1` rows.
pub fn list_query(client: &clickhouse::Client, filter: &RunFilter) -> clickhouse::query::Query {
    let mut sql = format!(
        "SELECT {RUN_ROW_COLUMNS} FROM jetcron.runs WHERE scheduled_ms >= ? AND scheduled_ms <= ?"
    );
    if filter.job_id.is_some() {
        sql.push_str(" AND job_id = ?");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let id = "6a1c3f0e-9b7d-4e52-8c1a-5d2f7e90b3c4";
        let cursor = encode_cursor(1_700_000_000_123, id);
        assert_eq!(
            decode_cursor(&cursor).expect("valid"),
            (1_700_000_000_123, id.to_string())
        );
        for bad in [
            "",
            "123",
            "x_6a1c3f0e-9b7d-4e52-8c1a-5d2f7e90b3c4",
            "1_'; DROP TABLE x",
        ] {
            let err = decode_cursor(bad).expect_err(bad);
            assert_eq!(err.field.as_deref(), Some("cursor"));
        }
    }
}
