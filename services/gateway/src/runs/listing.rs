//! `GET /v1/runs`: runs across jobs from the `jetcron.runs` view (one row per
//! run, kept by ClickHouse from the run events; read through
//! [`crate::sql::runs_view`]), filtered, newest first, with a cursor.
//!
//! The cursor is the last row's (scheduled time, run id), the sort key, so a
//! page never repeats or skips a run when newer runs arrive meanwhile.

use chrono::DateTime;
use jetcron_core::api::ApiError;
use jetcron_core::time_format::rfc3339_millis;
use serde::Serialize;

use crate::sql::reads::{ClickHouseReads, HistoryUnavailable};
use crate::sql::runs_view::{self, RunFilter, RunRow};

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
    let rows = runs_view::runs(reads, filter).await?;
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
