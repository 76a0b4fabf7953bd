//! `job.rejected` history from ClickHouse `jetcron.job_events` (read through
//! [`crate::sql::job_events`]): definitions sent with `nats pub` or written
//! into the bucket that were not applied; and [`rejections`], the read
//! operation of `GET /v1/rejections` (a typed request to a typed answer or
//! an [`ApiError`]).

use jetcron_core::api::ApiError;
use jetcron_core::job::FieldError;
use jetcron_core::time_format::rfc3339_millis;
use jetcron_io::clickhouse_schema::JobEventRow;
use serde::{Deserialize, Serialize};

use crate::read_params;
use crate::sql::job_events;
use crate::sql::reads::{ClickHouseReads, HistoryUnavailable, Patience};
use crate::GatewayState;

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

/// Newest rejections, of one job when `job` is given.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListRejections {
    /// Only those naming this job id (as written, valid or not: 1 to 256 bytes).
    #[schemars(length(min = 1, max = 256), extend("format" = jetcron_core::job::patterns::bytes_format(1, 256)))]
    pub job: Option<String>,
    /// Page size, 1 to 500 (default 50).
    #[schemars(range(min = 1, max = read_params::MAX_LIMIT))]
    pub limit: Option<u32>,
    /// How long to wait for ClickHouse (not a parameter).
    #[serde(skip)]
    pub patience: Patience,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RejectionsReply {
    pub ok: bool,
    pub rejections: Vec<Rejection>,
}

pub async fn rejections(
    state: &GatewayState,
    request: ListRejections,
) -> Result<RejectionsReply, ApiError> {
    let limit = read_params::checked_limit(request.limit)?;
    if let Some(job) = &request.job {
        if job.is_empty() || job.len() > 256 {
            return Err(ApiError::invalid_field(
                "job",
                "must be 1 to 256 characters",
            ));
        }
    }
    let rejections = state
        .runs
        .with(request.patience)
        .rejections(request.job.as_deref(), limit)
        .await?;
    Ok(RejectionsReply {
        ok: true,
        rejections,
    })
}
