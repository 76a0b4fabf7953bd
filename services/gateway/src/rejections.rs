//! `job.rejected` history from ClickHouse `jetcron.job_events`: definitions
//! sent with `nats pub` or written into the bucket that were not applied.
//!
//! Values are bound, never pasted into SQL; rows are deduplicated on
//! `event_id` (`LIMIT 1 BY`), so a replayed projection answers the same. The
//! table holds other job events too (`fire.missed`), so every query names
//! the kind.

use jetcron_core::job::FieldError;
use jetcron_core::job_events::JOB_REJECTED_KIND;
use jetcron_core::time_format::rfc3339_millis;
use jetcron_io::clickhouse_schema::{JobEventRow, JOB_EVENT_COLUMNS};
use serde::Serialize;

use crate::clickhouse_reads::{ClickHouseReads, HistoryUnavailable};

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
    let query = newest_query(reads.client(), job_id, limit);
    let rows: Vec<JobEventRow> = reads.fetch_all(query, "query job.rejected events").await?;
    Ok(rows.into_iter().map(Rejection::from).collect())
}

/// The query of [`newest`].
pub fn newest_query(
    client: &clickhouse::Client,
    job_id: Option<&str>,
    limit: u32,
) -> clickhouse::query::Query {
    let filter = if job_id.is_some() {
        "AND job_id = ?"
    } else {
        ""
    };
    let sql = format!(
        "SELECT {JOB_EVENT_COLUMNS} FROM jetcron.job_events WHERE kind = ? {filter} \
         ORDER BY at_ms DESC, event_id LIMIT 1 BY event_id LIMIT ?"
    );
    let mut query = client.query(&sql).bind(JOB_REJECTED_KIND);
    if let Some(id) = job_id {
        query = query.bind(id);
    }
    query.bind(limit)
}
