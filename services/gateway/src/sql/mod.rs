//! Every SQL statement the gateway sends to ClickHouse, and the one client
//! that sends them.
//!
//! Why one room: the history is read from two engines (the 18.16 server of
//! Debian and current ClickHouse), and a statement that works on one may not
//! on the other; [`query_catalog`] lists every statement built here with
//! sample values, and an integration test runs each on both. A statement
//! outside this room would escape that test. So the statements live here,
//! one file per table they read, each a builder binding every value (nothing
//! from a request is pasted into SQL) and a fetch through [`reads`], which
//! bounds every read in time; the client's query methods are not reachable
//! from outside, so no other module can send one. The other rooms get rows
//! and fold them into their answers.
//!
//! Table names come from constants: core's [`RUN_EVENTS_TABLE`] and
//! [`JOB_EVENTS_TABLE`], and [`RUNS_VIEW`] (core names no constant for the
//! view, so it is named once here).
//!
//! - [`run_events`]: `jetcron.run_events`, one row per event (a run's page,
//!   a job's runs, backfill's lookup, missed fires, failed notifications);
//! - [`runs_view`]: `jetcron.runs`, one row per run as ClickHouse folds them
//!   (the run listing, statistics, the console's figures);
//! - [`job_events`]: `jetcron.job_events` (rejections, recorded missed fires).

pub mod job_events;
pub mod query_catalog;
pub mod reads;
pub mod run_events;
pub mod runs_view;

use chrono::{DateTime, Utc};
pub use jetcron_core::subjects::{JOB_EVENTS_TABLE, RUN_EVENTS_TABLE};

/// The view of one row per run, kept by ClickHouse from the run events
/// (`schemas/clickhouse/004_run_state.sql`). Qualified, a trusted constant
/// used unescaped in SQL, as core's table names are.
pub const RUNS_VIEW: &str = "jetcron.runs";

/// `select` (whose WHERE ends with the scheduled range `>= ? AND <= ?`)
/// for one job or all, grouped by job.
fn per_job_in_range(
    client: &clickhouse::Client,
    select: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    job_id: Option<&str>,
) -> clickhouse::query::Query {
    let mut sql = select.to_string();
    if job_id.is_some() {
        sql.push_str(" AND job_id = ?");
    }
    sql.push_str(" GROUP BY job_id ORDER BY job_id");
    let mut query = client
        .query(&sql)
        .bind(from.timestamp_millis())
        .bind(to.timestamp_millis());
    if let Some(id) = job_id {
        query = query.bind(id);
    }
    query
}
