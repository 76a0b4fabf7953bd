//! `GET /ui/jobs/{id}`: one job: its definition, next fires with the DST
//! notes of the preview, recent runs, missed fires, the bucket's revision
//! history, and its actions. `GET /ui/jobs/{id}/diff?from=&to=` shows what
//! changed between two revisions.
//!
//! Everything comes from the typed reads ([`crate::jobs::reads`],
//! [`crate::runs::reads`], [`crate::runs::stats`]), read at
//! once; the run parts are a convenience that only glances at ClickHouse
//! ([`Patience::Glance`]) and says so when ClickHouse is slow or away.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use jetcron_core::api::ApiError;
use jetcron_core::schedule_preview::Preview;
use serde::Deserialize;

use super::diff::{self, DiffLine};
use super::pages::{duration_ms, render, status_class, when, when_text, Frame};
use super::viewer::{url_escape, ConsoleError, Viewer};
use crate::jobs::reads::{self as job_reads, GetJobDetail};
use crate::jobs::rejections::Rejection;
use crate::jobs::stored::Revision;
use crate::runs::reads::{self as run_reads, JobRunsReply, ListJobRuns};
use crate::runs::stats::{self, GetStats};
use crate::sql::reads::Patience;
use crate::GatewayState;

/// Runs listed on a job's page.
const RECENT_RUNS: u32 = 20;

/// A run in a list.
pub struct RunLine {
    pub link: String,
    pub status: String,
    pub class: &'static str,
    pub trigger: String,
    pub scheduled: String,
    pub started: String,
    pub duration: String,
    pub attempts: String,
    /// Exit code or HTTP status.
    pub result: String,
    pub error: String,
}

impl RunLine {
    pub fn of(run: &jetcron_core::run_summary::RunSummary) -> Self {
        Self {
            link: format!("/ui/runs/{}", run.run_id.as_str()),
            status: run.status.to_string(),
            class: status_class(run.status),
            trigger: run.trigger.as_str().to_string(),
            scheduled: when(run.scheduled_at),
            started: run.first_started_at.map(when).unwrap_or_default(),
            duration: run.duration_ms.map(duration_ms).unwrap_or_default(),
            attempts: format!("{}/{}", run.attempt, run.max_attempts),
            result: match (run.exit_code, run.status_code) {
                (Some(code), _) => format!("exit {code}"),
                (None, Some(status)) => format!("HTTP {status}"),
                _ => String::new(),
            },
            error: run.error.clone().unwrap_or_default(),
        }
    }
}

/// A next fire with its DST note.
pub struct FireLine {
    pub at: String,
    pub local: String,
    pub note: String,
}

/// A revision in the history list.
pub struct RevisionLine {
    pub revision: u64,
    pub operation: &'static str,
    pub at: String,
    /// Who wrote it, through which door (`token:ab12 (billing CI), http`).
    pub author: String,
    pub valid: String,
    /// Link to the diff against the revision before it, if there is one.
    pub diff_link: String,
}

#[derive(Template)]
#[template(path = "console/job.html")]
pub struct JobPage {
    pub frame: Frame,
    pub id: String,
    pub id_link: String,
    pub revision: u64,
    pub updated: String,
    pub state: &'static str,
    pub valid: bool,
    pub problems: Vec<String>,
    pub description: String,
    pub definition: String,
    pub schedule: String,
    pub words: String,
    pub kind: String,
    pub fires: Vec<FireLine>,
    pub dropped: Vec<String>,
    pub if_resumed: bool,
    pub runs: Vec<RunLine>,
    pub runs_error: String,
    /// Why the last day's figures are left out (empty when they show).
    pub figures_error: String,
    pub more_runs_link: String,
    pub success_rate: String,
    pub runs_24h: u64,
    pub missed: Vec<String>,
    pub missed_count: u64,
    pub revisions: Vec<RevisionLine>,
    pub rejections: Vec<String>,
    pub redacted: bool,
    pub backfill_from: String,
    pub backfill_to: String,
    /// The jobs this one runs after, and the ones that run after it.
    pub parents: Vec<ChainLine>,
    pub children: Vec<ChainLine>,
}

/// One job of a chain, as the job page lists it.
#[derive(Debug, Clone)]
pub struct ChainLine {
    pub job: String,
    pub link: String,
    /// `success`, `failure` or `completed`.
    pub on: &'static str,
    pub state: &'static str,
}

impl ChainLine {
    fn of(peer: &crate::jobs::catalog::ChainPeer) -> Self {
        Self {
            job: peer.job.clone(),
            link: format!("/ui/jobs/{}", url_escape(&peer.job)),
            on: peer.on.as_str(),
            state: peer.state,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct JobQuery {
    done: Option<String>,
    cursor: Option<String>,
}

/// A definition as the page shows it, pretty-printed; empty when the
/// stored value is not JSON.
fn pretty(definition: Option<&serde_json::Value>) -> String {
    definition
        .and_then(|d| serde_json::to_string_pretty(d).ok())
        .unwrap_or_default()
}

pub async fn show(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(query): Query<JobQuery>,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_read(&format!("/ui/jobs/{}", url_escape(&id)))?;
    let namespace = jetcron_core::job::namespace_of(&id).to_string();
    viewer.may_see(&namespace)?;
    let (detail, history, runs, stats) = tokio::join!(
        job_reads::job_detail(
            &state,
            GetJobDetail {
                id: id.clone(),
                next: Some(5),
            },
        ),
        job_reads::job_history(&state, id.clone()),
        run_reads::job_runs(
            &state,
            ListJobRuns {
                id: id.clone(),
                limit: Some(RECENT_RUNS),
                cursor: query.cursor.clone(),
                patience: Patience::Glance,
            },
        ),
        stats::stats(
            &state,
            GetStats {
                job: Some(id.clone()),
                patience: Patience::Glance,
                ..GetStats::default()
            },
        ),
    );
    let (detail, history) = (detail?, history?);
    let figures_error = match (&detail.history_unavailable, &stats) {
        (Some(why), _) => format!("Run figures are unavailable: {why}"),
        (None, Err(e)) => format!("Run figures are unavailable: {}", e.message),
        (None, Ok(_)) => String::new(),
    };
    let stats = stats
        .ok()
        .and_then(|s| s.jobs.into_iter().find(|j| j.job_id == id));
    // Anonymous viewers of a gateway with open reads, and viewers below
    // editor, see secrets hidden, as the API shows them.
    let hides_secrets = !viewer.sees_secrets_of(&namespace);
    let detail = match hides_secrets {
        true => detail.redacted(),
        false => detail,
    };
    let redacted = hides_secrets && detail.job.job.is_some();
    let definition = pretty(detail.job.job.as_ref());
    let spec = detail.job.job.as_ref();
    let text = |name: &str| {
        spec.and_then(|d| d.get(name))
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let preview = detail.schedule_preview.as_ref();
    let now = state.clock.now();
    let (runs, runs_error, more_runs_link) = run_lines(runs, &id);
    let page = JobPage {
        frame: viewer
            .frame_for(format!("Job {id}"), &namespace)
            .with_done(query.done.as_deref()),
        id_link: url_escape(&id),
        revision: detail.job.revision,
        updated: when_text(&detail.job.updated_at),
        state: match (detail.job.valid, detail.next_fires_if_resumed) {
            (false, _) => "invalid",
            (true, true) => "paused",
            (true, false) => "active",
        },
        valid: detail.job.valid,
        problems: detail
            .job
            .problems
            .iter()
            .map(ToString::to_string)
            .collect(),
        description: text("description"),
        definition,
        schedule: text("schedule"),
        words: preview.map(|p| p.description.clone()).unwrap_or_default(),
        kind: preview.map(|p| p.kind.to_string()).unwrap_or_default(),
        fires: preview.map(fire_lines).unwrap_or_default(),
        dropped: preview.map(dropped_lines).unwrap_or_default(),
        if_resumed: detail.next_fires_if_resumed,
        parents: detail.parents.iter().map(ChainLine::of).collect(),
        children: detail.children.iter().map(ChainLine::of).collect(),
        runs,
        runs_error,
        figures_error,
        more_runs_link,
        success_rate: detail
            .success_rate_24h
            .map(|r| format!("{:.1} %", r * 100.0))
            .unwrap_or_else(|| "—".into()),
        runs_24h: detail.runs_24h,
        missed_count: stats.as_ref().map_or(0, |s| s.missed_fires),
        missed: stats
            .map(|s| s.missed_examples.iter().map(|t| when_text(t)).collect())
            .unwrap_or_default(),
        revisions: revision_lines(&history.revisions, &id),
        rejections: history.rejections.iter().map(rejection_line).collect(),
        redacted,
        backfill_from: (now - chrono::Duration::hours(1))
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string(),
        backfill_to: now.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        id,
    };
    Ok(render(&page).into_response())
}

/// The recent runs of job `id`, why they are missing, and the link to the
/// next page of them.
fn run_lines(runs: Result<JobRunsReply, ApiError>, id: &str) -> (Vec<RunLine>, String, String) {
    match runs {
        Ok(reply) => (
            reply.runs.iter().map(RunLine::of).collect(),
            String::new(),
            reply
                .next_cursor
                .map(|c| format!("/ui/jobs/{}?cursor={}", url_escape(id), url_escape(&c)))
                .unwrap_or_default(),
        ),
        Err(e) => (
            Vec::new(),
            format!("Runs are unavailable: {}", e.message),
            String::new(),
        ),
    }
}

/// An author as the history table shows it.
fn author_text(author: &jetcron_core::audit::Author) -> String {
    let door = author.door.as_str();
    match &author.note {
        Some(note) => format!("{} ({note}), {door}", author.actor),
        None if author.actor == door => author.actor.clone(),
        None => format!("{}, {door}", author.actor),
    }
}

/// The revisions of job `id`, newest first, each put linked to its diff
/// against the put before it.
fn revision_lines(revisions: &[Revision], id: &str) -> Vec<RevisionLine> {
    let mut previous_put: Option<u64> = None;
    let mut lines: Vec<RevisionLine> = revisions
        .iter()
        .map(|r| {
            let diff_link = match (r.operation, previous_put) {
                ("put", Some(before)) => format!(
                    "/ui/jobs/{}/diff?from={before}&to={}",
                    url_escape(id),
                    r.revision
                ),
                _ => String::new(),
            };
            if r.operation == "put" {
                previous_put = Some(r.revision);
            }
            RevisionLine {
                revision: r.revision,
                operation: r.operation,
                at: when_text(&r.at),
                author: r.author.as_ref().map(author_text).unwrap_or_default(),
                valid: match r.valid {
                    Some(true) => "valid".into(),
                    Some(false) => "invalid".into(),
                    None => String::new(),
                },
                diff_link,
            }
        })
        .collect();
    lines.reverse();
    lines
}

/// The next fires of a preview with their wall times and DST notes.
fn fire_lines(preview: &Preview) -> Vec<FireLine> {
    preview
        .fires
        .iter()
        .map(|f| FireLine {
            at: when_text(&f.at),
            local: f.local.clone(),
            note: f.note.clone().unwrap_or_default(),
        })
        .collect()
}

/// The wall times a preview's zone skips or repeats, and why they fire once
/// or not at all.
fn dropped_lines(preview: &Preview) -> Vec<String> {
    preview
        .dropped
        .iter()
        .map(|d| match d.reason {
            "in_gap" => format!(
                "{} does not fire: it falls in a spring-forward gap",
                d.wall_time
            ),
            _ => format!(
                "{} does not fire a second time: the hour repeats at fall-back",
                d.wall_time
            ),
        })
        .collect()
}

/// A rejected definition of the job: when, from where, and its problems.
fn rejection_line(rejection: &Rejection) -> String {
    let problems: Vec<String> = rejection.problems.iter().map(ToString::to_string).collect();
    format!(
        "{} ({}): {}",
        when_text(&rejection.at),
        rejection.source,
        problems.join("; ")
    )
}

#[derive(Debug, Deserialize)]
pub struct DiffQuery {
    from: u64,
    to: u64,
}

#[derive(Template)]
#[template(path = "console/diff.html")]
pub struct DiffPage {
    pub frame: Frame,
    pub id: String,
    pub id_link: String,
    pub from: u64,
    pub to: u64,
    pub lines: Vec<DiffLine>,
}

/// `GET /ui/jobs/{id}/diff?from=&to=`.
pub async fn diff(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<DiffQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_read(&format!("/ui/jobs/{}", url_escape(&id)))?;
    let namespace = jetcron_core::job::namespace_of(&id).to_string();
    viewer.may_see(&namespace)?;
    let Query(query) = query.map_err(|e| ApiError::malformed(e.body_text()))?;
    let history = match viewer.sees_secrets_of(&namespace) {
        true => job_reads::job_history(&state, id.clone()).await?,
        false => job_reads::job_history(&state, id.clone()).await?.redacted(),
    };
    let pick = |revision: u64| {
        history
            .revisions
            .iter()
            .find(|r| r.revision == revision)
            .map(|r| pretty(r.job.as_ref()))
            .ok_or_else(|| {
                ApiError::not_found(
                    "revision",
                    format!("the bucket keeps no revision {revision} of {id:?}"),
                )
            })
    };
    let before = pick(query.from)?;
    let after = pick(query.to)?;
    let page = DiffPage {
        frame: viewer.frame_for(
            format!("Job {id}: revision {} → {}", query.from, query.to),
            &namespace,
        ),
        id_link: url_escape(&id),
        id,
        from: query.from,
        to: query.to,
        lines: diff::lines(&before, &after),
    };
    Ok(render(&page).into_response())
}
