//! `GET /ui/runs`: runs across jobs, newest first, filtered by job, status
//! and error text, with a cursor ([`crate::runs::reads::runs`]).

use std::sync::Arc;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use jetcron_core::access::Role;
use serde::Deserialize;

use super::namespace_choice;
use super::pages::{duration_ms, render, status_class, when_text, Frame};
use super::viewer::{url_escape, ConsoleError, Viewer};
use crate::runs::reads::{self, ListRuns};
use crate::GatewayState;

pub struct ListedLine {
    pub link: String,
    pub job_id: String,
    pub job_link: String,
    pub status: String,
    pub class: &'static str,
    pub scheduled: String,
    pub duration: String,
    pub attempts: String,
    pub error: String,
}

#[derive(Template)]
#[template(path = "console/runs.html")]
pub struct RunsPage {
    pub frame: Frame,
    pub job: String,
    pub status: String,
    pub q: String,
    pub namespace: String,
    /// The namespace can be chosen (not for a team's session).
    pub chooses_namespace: bool,
    /// The namespaces to choose from (those of the jobs held).
    pub namespaces: Vec<String>,
    pub runs: Vec<ListedLine>,
    pub next_link: String,
    pub problem: String,
}

#[derive(Debug, Default, Deserialize)]
pub struct RunsQuery {
    #[serde(default)]
    job: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    q: String,
    /// One namespace's runs (a team's session: always its own).
    #[serde(default)]
    namespace: String,
    cursor: Option<String>,
}

fn some(text: &str) -> Option<String> {
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

pub async fn show(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Query(query): Query<RunsQuery>,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_read("/ui/runs")?;
    let caller = viewer.caller();
    let chosen = namespace_choice::choose(&caller.grants, Role::Viewer, &query.namespace)?;
    let namespace = chosen.shown().map(str::to_string);
    if let Some(job) = some(&query.job) {
        viewer.may_see(jetcron_core::job::namespace_of(&job))?;
    }
    let request = ListRuns {
        job: some(&query.job),
        namespace: namespace.clone(),
        status: some(&query.status),
        q: some(&query.q),
        cursor: query.cursor.clone(),
        ..ListRuns::default()
    };
    let (runs, next_link, problem) = match reads::runs(&state, request).await {
        Ok(reply) => (
            reply
                .runs
                .iter()
                .map(|r| ListedLine {
                    link: format!("/ui/runs/{}", r.run_id),
                    job_link: format!("/ui/jobs/{}", url_escape(&r.job_id)),
                    job_id: r.job_id.clone(),
                    status: r.status.clone(),
                    class: status_class(&r.status),
                    scheduled: when_text(&r.scheduled_at),
                    duration: r.duration_ms.map(duration_ms).unwrap_or_default(),
                    attempts: format!("{}/{}", r.attempt, r.max_attempts),
                    error: r.error.clone().unwrap_or_default(),
                })
                .collect(),
            reply
                .next_cursor
                .map(|c| {
                    format!(
                        "/ui/runs?job={}&status={}&q={}&namespace={}&cursor={}",
                        url_escape(&query.job),
                        url_escape(&query.status),
                        url_escape(&query.q),
                        url_escape(namespace.as_deref().unwrap_or_default()),
                        url_escape(&c)
                    )
                })
                .unwrap_or_default(),
            String::new(),
        ),
        Err(e) => (Vec::new(), String::new(), e.message),
    };
    let page = RunsPage {
        frame: viewer.frame("Runs"),
        job: query.job,
        status: query.status,
        q: query.q,
        chooses_namespace: chosen.picks(),
        namespaces: chosen.offered(|| state.catalog.namespaces()),
        namespace: namespace.unwrap_or_default(),
        runs,
        next_link,
        problem,
    };
    Ok(render(&page).into_response())
}
