//! `job.rejected` history from ClickHouse `jetcron.job_events` (read through
//! [`crate::sql::job_events`]): definitions sent with `nats pub` or written
//! into the bucket that were not applied.

use jetcron_core::job::FieldError;
use jetcron_core::time_format::rfc3339_millis;
use jetcron_io::clickhouse_schema::JobEventRow;
use serde::Serialize;

use crate::sql::job_events;
use crate::sql::reads::{ClickHouseReads, HistoryUnavailable};

/// One rejection as the API shows it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Rejection {
    pub event_id: String,
    pub source: String,
    pub job_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    pub at: String,
    pub size: u64,
    pub problems: Vec<FieldError>,
}

impl From<JobEventRow> for Rejection {
    fn from(row: JobEventRow) -> Self {
        let at = chrono::DateTime::from_timestamp_millis(row.at_ms).unwrap_or_default();
        Self {
            event_id: row.event_id,
            source: row.source,
            job_id: row.job_id,
            revision: (row.revision > 0).then_some(row.revision),
            at: rfc3339_millis(at),
            size: row.size,
            problems: serde_json::from_str(&row.problems).unwrap_or_default(),
        }
    }
}

/// The newest `limit` rejections, of one job id when given.
pub async fn newest(
    reads: &ClickHouseReads,
    job_id: Option<&str>,
    limit: u32,
) -> Result<Vec<Rejection>, HistoryUnavailable> {
    let rows = job_events::newest_rejections(reads, job_id, limit).await?;
    Ok(rows.into_iter().map(Rejection::from).collect())
}
