//! `GET /ui/runs/{run_id}`: one run: every event in order (the fire, each
//! attempt's start, failures, retries with their delay, the ending), the
//! attempts, the output the run recorded, and a Kill button while it runs.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::pages::{duration_ms, render, status_class, when, Frame};
use super::viewer::{url_escape, ConsoleError, Viewer};
use crate::runs::reads;
use crate::GatewayState;

/// One line of the timeline.
pub struct EventLine {
    pub at: String,
    pub kind: String,
    pub class: &'static str,
    pub attempt: String,
    pub detail: String,
}

/// One attempt.
pub struct AttemptLine {
    pub attempt: String,
    pub executor: String,
    pub started: String,
    pub finished: String,
    pub outcome: String,
    pub class: &'static str,
    pub error: String,
}

#[derive(Template)]
#[template(path = "console/run.html")]
pub struct RunPage {
    pub frame: Frame,
    pub run_id: String,
    pub job_id: String,
    pub job_link: String,
    pub status: String,
    pub class: &'static str,
    pub trigger: String,
    pub scheduled: String,
    pub duration: String,
    pub result: String,
    pub error: String,
    pub events: Vec<EventLine>,
    pub attempts: Vec<AttemptLine>,
    pub output: String,
    pub output_truncated: bool,
    pub running: bool,
    /// The run whose end started this one (a chained run): its job, id and page.
    pub parent: Option<(String, String, String)>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RunQuery {
    done: Option<String>,
}

fn kind_class(kind: &str) -> &'static str {
    match kind {
        "succeeded" => "ok",
        "failed" | "timed_out" | "killed" | "notify_failed" => "bad",
        "retrying" => "warn",
        "started" | "due" => "busy",
        _ => "",
    }
}

pub async fn show(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(run_id): Path<String>,
    Query(query): Query<RunQuery>,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_read(&format!("/ui/runs/{}", url_escape(&run_id)))?;
    let run = reads::run(&state, &run_id).await?.run;
    let namespace = jetcron_core::job::namespace_of(&run.job_id).to_string();
    viewer.may_see(&namespace)?;
    let trigger = run.trigger.as_str().to_string();
    let mut events = vec![EventLine {
        at: when(run.scheduled_at),
        kind: "due".into(),
        class: kind_class("due"),
        attempt: String::new(),
        detail: format!("{trigger} fire"),
    }];
    let mut output = String::new();
    let mut output_truncated = false;
    for event in run.events.iter().flatten() {
        let kind = event.kind.as_str();
        let mut detail = Vec::new();
        if let Some(outcome) = event.outcome {
            detail.push(format!("attempt {}", outcome.as_str()));
        }
        if let Some(error) = &event.error {
            detail.push(error.clone());
        }
        if let Some(retry_at) = event.retry_at {
            detail.push(format!(
                "next attempt at {} (in {})",
                when(retry_at),
                duration_ms((retry_at - event.at).num_milliseconds().max(0))
            ));
        }
        if let Some(code) = event.exit_code {
            detail.push(format!("exit {code}"));
        }
        if let Some(status) = event.status_code {
            detail.push(format!("HTTP {status}"));
        }
        if let Some(ms) = event.duration_ms {
            detail.push(duration_ms(ms));
        }
        if let Some(text) = &event.output {
            output = text.clone();
            output_truncated = event.output_truncated;
        }
        events.push(EventLine {
            at: when(event.at),
            kind: kind.to_string(),
            class: kind_class(kind),
            attempt: match event.shard {
                Some(shard) => format!("{}/{} · shard {shard}", event.attempt, event.max_attempts),
                None => format!("{}/{}", event.attempt, event.max_attempts),
            },
            detail: detail.join(" · "),
        });
    }
    if output.is_empty() {
        output = run.output.clone().unwrap_or_default();
        output_truncated = run.output_truncated;
    }
    let attempts = run
        .attempts
        .iter()
        .flatten()
        .map(|a| AttemptLine {
            attempt: match a.shard {
                Some(shard) => format!("{} (shard {shard})", a.attempt),
                None => a.attempt.to_string(),
            },
            executor: a.executor_id.clone(),
            started: a.started_at.map(when).unwrap_or_default(),
            finished: a.finished_at.map(when).unwrap_or_default(),
            outcome: a.outcome.to_string(),
            class: status_class(a.outcome),
            error: a.error.clone().unwrap_or_default(),
        })
        .collect();
    let page = RunPage {
        frame: viewer
            .frame_for(format!("Run of {}", run.job_id), &namespace)
            .with_done(query.done.as_deref()),
        run_id: run.run_id.as_str().to_string(),
        job_link: format!("/ui/jobs/{}", url_escape(&run.job_id)),
        job_id: run.job_id.clone(),
        status: run.status.to_string(),
        class: status_class(run.status),
        trigger,
        scheduled: when(run.scheduled_at),
        duration: run.duration_ms.map(duration_ms).unwrap_or_default(),
        result: match (run.exit_code, run.status_code) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(status)) => format!("HTTP {status}"),
            _ => String::new(),
        },
        error: run.error.clone().unwrap_or_default(),
        events,
        attempts,
        output,
        output_truncated,
        running: matches!(run.status, "running" | "retrying"),
        parent: run.parent_run_id.as_ref().map(|parent| {
            (
                run.parent_job_id.clone().unwrap_or_default(),
                parent.as_str().to_string(),
                format!("/ui/runs/{}", url_escape(parent.as_str())),
            )
        }),
    };
    Ok(render(&page).into_response())
}
