//! The console's buttons: pause, resume, trigger, backfill, delete (after a
//! confirmation page), kill, and pause/resume by label. Each checks the
//! session and the CSRF token ([`Viewer::may_write`]), calls the same
//! operation as the HTTP API, and redirects back with a `done` code, so a
//! reload does not repeat it.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use super::pages::{render, Frame};
use super::viewer::{url_escape, ConsoleError, Viewer};
use crate::caller::Caller;
use crate::jobs::requests::{DeleteJob, SelectJobs};
use crate::runs::manual::{BackfillJob, TriggerJob};
use crate::GatewayState;
use crate::{jobs, runs};
use jetcron_core::control::KillRequest;

#[derive(Debug, Deserialize)]
pub struct CsrfOnly {
    #[serde(default)]
    csrf: String,
}

fn job_path(id: &str) -> String {
    format!("/ui/jobs/{}", url_escape(id))
}

/// Pause or resume what `select` names (the caller checked the write),
/// then go back to `back` saying what happened.
async fn set_paused(
    state: &GatewayState,
    caller: &Caller,
    select: SelectJobs,
    back: String,
    paused: bool,
) -> Result<Response, ConsoleError> {
    let reply = jobs::requests::set_paused(state, caller, select, paused).await?;
    let done = match (reply.changed.is_empty(), paused) {
        (true, _) => "unchanged",
        (false, true) => "paused",
        (false, false) => "resumed",
    };
    let joiner = if back.contains('?') { '&' } else { '?' };
    Ok(Redirect::to(&format!("{back}{joiner}done={done}")).into_response())
}

/// One job, from its page.
async fn set_paused_one(
    state: Arc<GatewayState>,
    headers: HeaderMap,
    id: String,
    csrf: &str,
    paused: bool,
) -> Result<Response, ConsoleError> {
    let back = job_path(&id);
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_write(&headers, csrf, &back)?;
    let select = SelectJobs {
        id: Some(id),
        labels: None,
    };
    set_paused(&state, &viewer.caller(), select, back, paused).await
}

/// `POST /ui/jobs/{id}/pause`.
pub async fn pause(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<CsrfOnly>,
) -> Result<Response, ConsoleError> {
    set_paused_one(state, headers, id, &form.csrf, true).await
}

/// `POST /ui/jobs/{id}/resume`.
pub async fn resume(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<CsrfOnly>,
) -> Result<Response, ConsoleError> {
    set_paused_one(state, headers, id, &form.csrf, false).await
}

#[derive(Debug, Deserialize)]
pub struct SelectorForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    labels: String,
    /// The namespace the table showed (empty: every one the viewer may
    /// operate in).
    #[serde(default)]
    namespace: String,
}

/// Every job matching the table's label filter.
async fn set_paused_selected(
    state: Arc<GatewayState>,
    headers: HeaderMap,
    form: SelectorForm,
    paused: bool,
) -> Result<Response, ConsoleError> {
    let namespace = form.namespace.trim();
    let back = match namespace.is_empty() {
        true => format!("/ui/jobs?labels={}", url_escape(&form.labels)),
        false => format!(
            "/ui/jobs?labels={}&namespace={}",
            url_escape(&form.labels),
            url_escape(namespace)
        ),
    };
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_write(&headers, &form.csrf, &back)?;
    // The jobs of the namespace the table showed, not of every namespace
    // the viewer operates in.
    let mut caller = viewer.caller();
    if !namespace.is_empty() {
        caller.grants = caller.grants.within(namespace);
    }
    let labels = super::jobs_page::parse_labels(&form.labels)
        .map_err(|why| jetcron_core::api::ApiError::invalid_field("labels", why))?;
    let select = SelectJobs {
        id: None,
        labels: Some(labels),
    };
    set_paused(&state, &caller, select, back, paused).await
}

/// `POST /ui/jobs:pause` with a label selector.
pub async fn pause_selected(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Form(form): Form<SelectorForm>,
) -> Result<Response, ConsoleError> {
    set_paused_selected(state, headers, form, true).await
}

/// `POST /ui/jobs:resume` with a label selector.
pub async fn resume_selected(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Form(form): Form<SelectorForm>,
) -> Result<Response, ConsoleError> {
    set_paused_selected(state, headers, form, false).await
}

/// `POST /ui/jobs/{id}/trigger`: a manual run now; answers with its page.
pub async fn trigger(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<CsrfOnly>,
) -> Result<Response, ConsoleError> {
    let back = job_path(&id);
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_write(&headers, &form.csrf, &back)?;
    runs::manual::trigger(&state, &viewer.caller(), TriggerJob { id }).await?;
    Ok(Redirect::to(&format!("{back}?done=triggered")).into_response())
}

#[derive(Debug, Deserialize)]
pub struct BackfillForm {
    #[serde(default)]
    csrf: String,
    from: String,
    to: String,
}

/// `POST /ui/jobs/{id}/backfill`.
pub async fn backfill(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<BackfillForm>,
) -> Result<Response, ConsoleError> {
    let back = job_path(&id);
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_write(&headers, &form.csrf, &back)?;
    runs::manual::backfill(
        &state,
        &viewer.caller(),
        BackfillJob {
            id,
            from: form.from.trim().to_string(),
            to: form.to.trim().to_string(),
        },
    )
    .await?;
    Ok(Redirect::to(&format!("{back}?done=backfilled")).into_response())
}

#[derive(Template)]
#[template(path = "console/delete.html")]
pub struct DeletePage {
    pub frame: Frame,
    pub id: String,
    pub id_link: String,
    pub revision: u64,
}

/// `GET /ui/jobs/{id}/delete`: the confirmation.
pub async fn confirm_delete(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::of(&state, &headers).await;
    let back = job_path(&id);
    if viewer.session.is_none() {
        return Err(ConsoleError::SignIn(format!("{back}/delete")));
    }
    let namespace = jetcron_core::job::namespace_of(&id);
    viewer
        .caller()
        .grants
        .require(jetcron_core::access::Role::Editor, namespace)?;
    let job = jobs::requests::get(
        &state,
        &viewer.caller(),
        jobs::requests::GetJob { id: id.clone() },
    )
    .await?;
    let page = DeletePage {
        frame: viewer.frame_for(format!("Delete {id}?"), namespace),
        id_link: url_escape(&id),
        id,
        revision: job.job.revision,
    };
    Ok(render(&page).into_response())
}

#[derive(Debug, Deserialize)]
pub struct DeleteForm {
    #[serde(default)]
    csrf: String,
    /// The revision the operator confirmed: a job changed since is not deleted.
    expected_revision: u64,
}

/// `POST /ui/jobs/{id}/delete`.
pub async fn delete(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<DeleteForm>,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_write(&headers, &form.csrf, &job_path(&id))?;
    jobs::requests::delete(
        &state,
        &viewer.caller(),
        DeleteJob {
            id,
            expected_revision: Some(form.expected_revision),
        },
    )
    .await?;
    Ok(Redirect::to("/ui/jobs?done=deleted").into_response())
}

#[derive(Debug, Deserialize)]
pub struct KillForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
}

/// `POST /ui/runs/{run_id}/kill`.
pub async fn kill(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(run_id): Path<String>,
    Form(form): Form<KillForm>,
) -> Result<Response, ConsoleError> {
    let back = format!("/ui/runs/{}", url_escape(&run_id));
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_write(&headers, &form.csrf, &back)?;
    let reason = form.reason.trim();
    runs::control::kill(
        &state,
        &viewer.caller(),
        KillRequest {
            run_id,
            reason: Some(if reason.is_empty() {
                "killed from the console".to_string()
            } else {
                reason.to_string()
            }),
        },
    )
    .await?;
    Ok(Redirect::to(&format!("{back}?done=killed")).into_response())
}
