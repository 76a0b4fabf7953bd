//! Every ClickHouse query the gateway sends, built by the same functions the
//! handlers use, with sample values and every optional filter on: a test
//! runs each on the 18.16 server and on a current ClickHouse (chdb) and
//! compares the answers. A new query belongs here too.

use chrono::{DateTime, Utc};

use crate::console::row_figures;
use crate::run_list::RunFilter;
use crate::{rejections, run_history, run_list, stats};

/// (name, SQL with the sample values bound) of every gateway query.
pub fn samples(
    client: &clickhouse::Client,
    job_id: &str,
    run_id: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<(&'static str, String)> {
    let sql = |q: clickhouse::query::Query| q.sql_display().to_string();
    let every_filter = RunFilter {
        job_id: Some(job_id.to_string()),
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
        statuses: Vec::new(),
        pool: None,
        error_contains: Some("EXIT".into()),
        after: Some((
            to.timestamp_millis(),
            "ffffffff-ffff-ffff-ffff-ffffffffffff".into(),
        )),
        ..every_filter.clone()
    };
    vec![
        (
            "runs of a job (events)",
            sql(run_history::runs_of_job_query(client, job_id, 50, None)),
        ),
        (
            "runs of a job after a cursor (events)",
            sql(run_history::runs_of_job_query(
                client,
                job_id,
                50,
                Some(&(
                    to.timestamp_millis(),
                    "ffffffff-ffff-ffff-ffff-ffffffffffff".into(),
                )),
            )),
        ),
        (
            "one run (events)",
            sql(run_history::run_query(client, run_id)),
        ),
        (
            "existing runs (backfill)",
            sql(run_history::existing_runs_query(
                client,
                job_id,
                &[run_id.to_string()],
            )),
        ),
        (
            "runs, every filter",
            sql(run_list::list_query(client, &every_filter)),
        ),
        (
            "runs, text and cursor",
            sql(run_list::list_query(client, &searching)),
        ),
        (
            "stats, all jobs",
            sql(stats::run_stats_query(client, from, to, None)),
        ),
        (
            "stats, one job",
            sql(stats::run_stats_query(client, from, to, Some(job_id))),
        ),
        (
            "failed notifications, all jobs",
            sql(stats::notify_failures_query(client, from, to, None)),
        ),
        (
            "failed notifications, one job",
            sql(stats::notify_failures_query(client, from, to, Some(job_id))),
        ),
        (
            "runs present (missed fires)",
            sql(stats::present_runs_query(
                client,
                &[job_id],
                from.timestamp_millis(),
                to.timestamp_millis(),
            )),
        ),
        (
            "missed fires already recorded",
            sql(stats::recorded_missed_query(
                client,
                &[job_id],
                from.timestamp_millis(),
                to.timestamp_millis(),
            )),
        ),
        (
            "rejections",
            sql(rejections::newest_query(client, None, 50)),
        ),
        (
            "rejections of a job",
            sql(rejections::newest_query(client, Some(job_id), 50)),
        ),
        (
            "console: last runs of a page of jobs",
            sql(row_figures::last_runs_query(client, &[job_id, "other"], to)),
        ),
        (
            "console: a page of jobs by hour",
            sql(row_figures::hours_query(
                client,
                Some(&[job_id, "other"]),
                to,
            )),
        ),
        (
            "console: every job by hour",
            sql(row_figures::hours_query(client, None, to)),
        ),
        (
            "console: missed fires recorded",
            sql(row_figures::missed_fires_query(client, to)),
        ),
    ]
}
