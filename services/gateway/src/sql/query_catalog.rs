//! Every ClickHouse query the gateway sends, built by the same builders its
//! fetches use, with sample values and every optional filter on: a test
//! runs each on the 18.16 server and on a current ClickHouse (chdb) and
//! compares the answers. A new query belongs here too.

use chrono::{DateTime, Duration, Utc};

use super::runs_view::{self, RunFilter};
use super::{job_events, run_events};
use crate::runs::figures::{HOURS, LAST_RUN_WITHIN};

/// A query with sample values bound: its name and SQL.
type Sample = (&'static str, String);

/// (name, SQL with the sample values bound) of every gateway query.
pub fn samples(
    client: &clickhouse::Client,
    job_id: &str,
    run_id: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<Sample> {
    let mut samples = run_history_samples(client, job_id, run_id, to);
    samples.extend(listing_and_stats_samples(client, job_id, from, to));
    samples.extend(missed_fire_samples(client, job_id, from, to));
    samples.extend(rejection_samples(client, job_id));
    samples.extend(console_samples(client, job_id, to));
    samples
}

fn sql(query: clickhouse::query::Query) -> String {
    query.sql_display().to_string()
}

/// A run id after every other (a cursor that continues past all runs).
const LAST_RUN_ID: &str = "ffffffff-ffff-ffff-ffff-ffffffffffff";

/// The queries of one job's runs and of one run (its events).
fn run_history_samples(
    client: &clickhouse::Client,
    job_id: &str,
    run_id: &str,
    to: DateTime<Utc>,
) -> Vec<Sample> {
    let after = (to.timestamp_millis(), LAST_RUN_ID.to_string());
    vec![
        (
            "runs of a job (events)",
            sql(run_events::runs_of_job_query(client, job_id, 50, None)),
        ),
        (
            "runs of a job after a cursor (events)",
            sql(run_events::runs_of_job_query(
                client,
                job_id,
                50,
                Some(&after),
            )),
        ),
        (
            "one run (events)",
            sql(run_events::run_query(client, run_id)),
        ),
        (
            "existing runs (backfill)",
            sql(run_events::existing_runs_query(
                client,
                job_id,
                &[run_id.to_string()],
            )),
        ),
    ]
}

/// The run listing with every filter, and the statistics.
fn listing_and_stats_samples(
    client: &clickhouse::Client,
    job_id: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<Sample> {
    let every_filter = RunFilter {
        job_id: Some(job_id.to_string()),
        namespace: Some(jetcron_core::job::namespace_of(job_id).to_string()),
        statuses: vec!["succeeded".into(), "failed".into()],
        pool: Some("default".into()),
        from_ms: from.timestamp_millis(),
        to_ms: to.timestamp_millis(),
        error_contains: None,
        after: None,
        limit: 50,
    };
    let searching = RunFilter {
        job_id: None,
        namespace: None,
        statuses: Vec::new(),
        pool: None,
        error_contains: Some("EXIT".into()),
        after: Some((to.timestamp_millis(), LAST_RUN_ID.into())),
        ..every_filter.clone()
    };
    vec![
        (
            "runs, every filter",
            sql(runs_view::list_query(client, &every_filter)),
        ),
        (
            "runs, text and cursor",
            sql(runs_view::list_query(client, &searching)),
        ),
        (
            "stats, all jobs",
            sql(runs_view::run_stats_query(client, from, to, None)),
        ),
        (
            "stats, one job",
            sql(runs_view::run_stats_query(client, from, to, Some(job_id))),
        ),
    ]
}

/// Failed notifications and the missed fire count and scan.
fn missed_fire_samples(
    client: &clickhouse::Client,
    job_id: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<Sample> {
    let (from_ms, to_ms) = (from.timestamp_millis(), to.timestamp_millis());
    vec![
        (
            "failed notifications, all jobs",
            sql(run_events::notify_failures_query(client, from, to, None)),
        ),
        (
            "failed notifications, one job",
            sql(run_events::notify_failures_query(
                client,
                from,
                to,
                Some(job_id),
            )),
        ),
        (
            "runs present (missed fires)",
            sql(run_events::present_runs_query(
                client,
                &[job_id],
                from_ms,
                to_ms,
            )),
        ),
        (
            "missed fires already recorded",
            sql(job_events::recorded_missed_query(
                client,
                &[job_id],
                from_ms,
                to_ms,
            )),
        ),
    ]
}

/// The newest rejections, of all jobs and of one.
fn rejection_samples(client: &clickhouse::Client, job_id: &str) -> Vec<Sample> {
    vec![
        (
            "rejections",
            sql(job_events::newest_rejections_query(client, None, 50)),
        ),
        (
            "rejections of a job",
            sql(job_events::newest_rejections_query(
                client,
                Some(job_id),
                50,
            )),
        ),
    ]
}

/// The console's figures: a page of jobs, every job, missed fires.
fn console_samples(client: &clickhouse::Client, job_id: &str, to: DateTime<Utc>) -> Vec<Sample> {
    vec![
        (
            "console: last runs of a page of jobs",
            sql(runs_view::last_runs_query(
                client,
                &[job_id, "other"],
                to - LAST_RUN_WITHIN,
                to,
            )),
        ),
        (
            "console: a page of jobs by hour",
            sql(runs_view::hours_query(
                client,
                Some(&[job_id, "other"]),
                to,
                HOURS as i64,
            )),
        ),
        (
            "console: every job by hour",
            sql(runs_view::hours_query(client, None, to, HOURS as i64)),
        ),
        (
            "console: missed fires recorded",
            sql(job_events::missed_fires_query(
                client,
                to - Duration::hours(HOURS as i64),
                to,
            )),
        ),
    ]
}
