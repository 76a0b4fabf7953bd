//! `GET /ui/`: the last 24 hours at a glance: fires per minute by hour,
//! success rate, failures, missed fires, executor pools with their backlog,
//! the projector's lag, recent rejected definitions, and links to the
//! Grafana dashboards when a Grafana URL is configured.
//!
//! Each part is one read operation of its own ([`crate::runs::figures`],
//! [`crate::runs::pools`], [`crate::runs::projection`],
//! [`crate::jobs::rejections`]); one that fails (ClickHouse away) says so
//! and the others still show. The ClickHouse parts only glance
//! ([`Patience::Glance`]): a slow ClickHouse leaves them out at once.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::charts;
use super::pages::{duration_ms, render, when_text, Frame};
use super::viewer::{url_escape, ConsoleError, Viewer};
use crate::jobs::rejections::{self, ListRejections};
use crate::runs::figures::{self, Day, HOURS};
use crate::runs::pools::{self, PoolState};
use crate::runs::projection;
use crate::sql::reads::Patience;
use crate::GatewayState;

#[derive(Template)]
#[template(path = "console/overview.html")]
pub struct OverviewPage {
    pub frame: Frame,
    pub jobs: usize,
    pub runs_24h: u64,
    pub failed_24h: u64,
    pub success_rate: String,
    pub fires_per_minute: String,
    pub chart: String,
    pub missed_24h: String,
    pub runs_error: String,
    pub pools: Vec<PoolState>,
    pub pools_error: String,
    pub projector: String,
    pub rejections: Vec<(String, String, String)>,
    pub rejections_error: String,
    pub grafana: Vec<(String, String)>,
}

#[derive(Debug, Default, Deserialize)]
pub struct OverviewQuery {
    done: Option<String>,
}

pub async fn show(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Query(query): Query<OverviewQuery>,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_read("/ui/")?;
    // The overview's figures cover every namespace: a session that sees
    // some starts at their jobs.
    if viewer.caller().grants.namespaces().is_some() {
        return Ok(axum::response::Redirect::to("/ui/jobs").into_response());
    }
    let now = state.clock.now();
    let (day, runs_error) = match figures::all_jobs_day(&state, Patience::Glance).await {
        Ok(day) => (day, String::new()),
        Err(e) => (Day::default(), format!("Run figures are unavailable: {e}")),
    };
    let (ok, failed) = day.totals();
    let runs_24h: u64 = (0..HOURS)
        .map(|h| day.succeeded[h] + day.failed[h] + day.other[h])
        .sum();
    let last_hour = day.succeeded[HOURS - 1] + day.failed[HOURS - 1] + day.other[HOURS - 1];
    let missed_24h = match figures::missed_fires_recorded(&state, Patience::Glance).await {
        Ok(n) => n.to_string(),
        Err(_) => "—".into(),
    };
    let (pools, pools_error) = match pools::pools(&state).await {
        Ok(p) => (p, String::new()),
        Err(e) => (Vec::new(), format!("Pools are unavailable: {e:#}")),
    };
    let projector = match (
        projection::projector_backlog(&state).await,
        projection::projected_until(&state, now).await,
    ) {
        (Ok(Some(backlog)), Ok(Some(until))) => format!(
            "{backlog} run events waiting; ClickHouse is complete up to {} ago",
            duration_ms((now - until).num_milliseconds().max(0))
        ),
        (Ok(None), _) | (_, Ok(None)) => "No projector has run yet.".into(),
        (Err(e), _) | (_, Err(e)) => format!("Projector state is unavailable: {e:#}"),
    };
    let (rejections, rejections_error) = match rejections::rejections(
        &state,
        ListRejections {
            job: None,
            limit: Some(10),
            patience: Patience::Glance,
        },
    )
    .await
    {
        Ok(reply) => (
            reply
                .rejections
                .into_iter()
                .map(|r| {
                    let problems: Vec<String> =
                        r.problems.iter().map(ToString::to_string).collect();
                    (when_text(&r.at), r.job_id, problems.join("; "))
                })
                .collect(),
            String::new(),
        ),
        Err(e) => (
            Vec::new(),
            format!("Rejections are unavailable: {}", e.message),
        ),
    };
    let grafana = state
        .grafana_url
        .as_deref()
        .map(|base| {
            let base = base.trim_end_matches('/');
            vec![
                (
                    "Overview dashboard".to_string(),
                    format!("{base}/d/jetcron-overview"),
                ),
                (
                    "Job drill-down".to_string(),
                    format!("{base}/d/jetcron-job"),
                ),
            ]
        })
        .unwrap_or_default();
    let page = OverviewPage {
        frame: viewer.frame("Overview").with_done(query.done.as_deref()),
        jobs: state.catalog.len(),
        runs_24h,
        failed_24h: failed,
        success_rate: if ok + failed > 0 {
            format!("{:.1} %", ok as f64 * 100.0 / (ok + failed) as f64)
        } else {
            "—".into()
        },
        fires_per_minute: format!("{:.1}", last_hour as f64 / 60.0),
        chart: charts::chart(&day),
        missed_24h,
        runs_error,
        pools,
        pools_error,
        projector,
        rejections: rejections
            .into_iter()
            .map(|(at, job, why)| (at, url_escape(&job), format!("{job}: {why}")))
            .collect(),
        rejections_error,
        grafana,
    };
    Ok(render(&page).into_response())
}
