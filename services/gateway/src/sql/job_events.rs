//! Statements on [`JOB_EVENTS_TABLE`] (`jetcron.job_events`): `job.rejected`
//! events (definitions that were not applied) and `fire.missed` events
//! (recorded by the missed fire scan). The table holds both kinds, so every
//! statement names the kind; rows are deduplicated on `event_id`, so a
//! replayed projection answers the same.

use chrono::{DateTime, Utc};
use jetcron_core::job_events::{FIRE_MISSED_KIND, JOB_REJECTED_KIND};
use jetcron_io::clickhouse_schema::{JobEventRow, JOB_EVENT_COLUMNS};

use super::reads::{ClickHouseReads, HistoryUnavailable};
use super::JOB_EVENTS_TABLE;

/// The newest `limit` `job.rejected` events, of one job id when given.
pub async fn newest_rejections(
    reads: &ClickHouseReads,
    job_id: Option<&str>,
    limit: u32,
) -> Result<Vec<JobEventRow>, HistoryUnavailable> {
    let query = newest_rejections_query(reads.client(), job_id, limit);
    reads.fetch_all(query, "query job.rejected events").await
}

/// The query of [`newest_rejections`].
pub(super) fn newest_rejections_query(
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
        "SELECT {JOB_EVENT_COLUMNS} FROM {JOB_EVENTS_TABLE} WHERE kind = ? {filter} \
         ORDER BY at_ms DESC, event_id LIMIT 1 BY event_id LIMIT ?"
    );
    let mut query = client.query(&sql).bind(JOB_REJECTED_KIND);
    if let Some(id) = job_id {
        query = query.bind(id);
    }
    query.bind(limit)
}

/// Event ids of the `fire.missed` events already stored for `job_ids` with
/// scheduled times in a range, in ms.
pub async fn recorded_missed_event_ids(
    reads: &ClickHouseReads,
    job_ids: &[&str],
    from_ms: i64,
    to_ms: i64,
) -> Result<Vec<String>, HistoryUnavailable> {
    let query = recorded_missed_query(reads.client(), job_ids, from_ms, to_ms);
    reads.fetch_all(query, "query recorded missed fires").await
}

/// The query of [`recorded_missed_event_ids`] (deduplicated).
pub(super) fn recorded_missed_query(
    client: &clickhouse::Client,
    job_ids: &[&str],
    from_ms: i64,
    to_ms: i64,
) -> clickhouse::query::Query {
    let sql = format!(
        "SELECT DISTINCT event_id FROM {JOB_EVENTS_TABLE} \
         WHERE kind = ? AND at_ms >= ? AND at_ms <= ? AND has(?, job_id)"
    );
    client
        .query(&sql)
        .bind(FIRE_MISSED_KIND)
        .bind(from_ms)
        .bind(to_ms)
        .bind(job_ids)
}

/// How many `fire.missed` events were recorded with times in `(from, to]`.
pub async fn missed_fires_recorded(
    reads: &ClickHouseReads,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<u64, HistoryUnavailable> {
    let query = missed_fires_query(reads.client(), from, to);
    reads.fetch_one(query, "count missed fires").await
}

/// The query of [`missed_fires_recorded`] (events deduplicated by id).
pub(super) fn missed_fires_query(
    client: &clickhouse::Client,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> clickhouse::query::Query {
    let sql = format!(
        "SELECT toUInt64(uniqExact(event_id)) FROM {JOB_EVENTS_TABLE} \
         WHERE kind = ? AND at_ms > ? AND at_ms <= ?"
    );
    client
        .query(&sql)
        .bind(FIRE_MISSED_KIND)
        .bind(from.timestamp_millis())
        .bind(to.timestamp_millis())
}
