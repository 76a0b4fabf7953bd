//! Creating and editing a job: the form ([`super::job_form`]) and the raw
//! JSON editor, both saved through [`crate::jobs::store::JobStore::put`] with
//! a compare-and-swap on the revision the edit started from (0: create
//! only), so two people editing at once get a conflict, not a lost update.
//! A refused definition comes back with each problem next to its field.
//!
//! `GET /ui/preview?schedule=&timezone=` answers the next five fires as an
//! HTML fragment for the page's script (the live preview while typing); the
//! page itself shows the preview of what it was rendered with, so it works
//! without the script too.

use jetcron_core::access::Role;
use std::collections::BTreeMap;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use jetcron_core::api::{ApiError, ErrorCode};
use jetcron_core::schedule_preview::PreviewRequest;
use serde::Deserialize;
use serde_json::Value;

use super::job_form::{errors_by_field, JobForm};
use super::pages::{render, when_text, Frame};
use super::viewer::{url_escape, ConsoleError, Viewer};
use crate::jobs::store::PutJob;
use crate::GatewayState;

/// Fires in the live preview.
const PREVIEW_FIRES: usize = 5;

/// The preview of a schedule, as the fragment and the page show it.
#[derive(Template, Default)]
#[template(path = "console/preview.html")]
pub struct PreviewFragment {
    pub description: String,
    pub fires: Vec<(String, String, String)>,
    pub error: String,
}

impl PreviewFragment {
    fn of(state: &GatewayState, schedule: &str, timezone: &str) -> Self {
        if schedule.trim().is_empty() {
            return Self::default();
        }
        let request = PreviewRequest {
            schedule: schedule.trim().to_string(),
            timezone: Some(timezone.trim().to_string()).filter(|t| !t.is_empty()),
            count: Some(PREVIEW_FIRES),
            from: None,
        };
        match crate::jobs::schedule_preview::preview(&request, state.clock.now()) {
            Ok(reply) => Self {
                description: reply.preview.description,
                fires: reply
                    .preview
                    .fires
                    .into_iter()
                    .map(|f| (when_text(&f.at), f.local, f.note.unwrap_or_default()))
                    .collect(),
                error: String::new(),
            },
            Err(e) => Self {
                error: e.message,
                ..Self::default()
            },
        }
    }
}

#[derive(Template)]
#[template(path = "console/edit.html")]
pub struct EditPage {
    pub frame: Frame,
    /// Empty for a new job.
    pub editing: String,
    pub editing_link: String,
    pub form: JobForm,
    pub json: String,
    pub errors: BTreeMap<String, Vec<String>>,
    pub conflict: String,
    /// The rendered [`PreviewFragment`] (escaped by its own template).
    pub preview: String,
}

impl EditPage {
    pub fn has_err(&self, field: &str) -> bool {
        self.errors.contains_key(field)
    }

    pub fn err(&self, field: &str) -> String {
        self.errors
            .get(field)
            .map(|m| m.join("; "))
            .unwrap_or_default()
    }

    /// `aria-invalid` of an input.
    pub fn invalid(&self, field: &str) -> &'static str {
        if self.has_err(field) {
            "true"
        } else {
            "false"
        }
    }

    pub fn is_type(&self, target: &str) -> bool {
        self.form.target_type == target
    }

    pub fn is_concurrency(&self, policy: &str) -> bool {
        self.form.concurrency == policy
    }
}

fn page(
    viewer: &Viewer,
    state: &GatewayState,
    editing: &str,
    form: JobForm,
    json: String,
) -> EditPage {
    let preview = PreviewFragment::of(state, &form.schedule, &form.timezone)
        .render()
        .unwrap_or_default();
    EditPage {
        frame: viewer.frame(if editing.is_empty() {
            "New job".to_string()
        } else {
            format!("Edit {editing}")
        }),
        editing: editing.to_string(),
        editing_link: url_escape(editing),
        form,
        json,
        errors: BTreeMap::new(),
        conflict: String::new(),
        preview,
    }
}

/// `GET /ui/jobs/new`.
pub async fn new_form(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::of(&state, &headers).await;
    if viewer.session.is_none() {
        return Err(ConsoleError::SignIn("/ui/jobs/new".into()));
    }
    viewer.caller().grants.require_somewhere(Role::Editor)?;
    let form = JobForm {
        target_type: "http".into(),
        ..JobForm::default()
    };
    let json = "{\n  \"id\": \"\",\n  \"schedule\": \"\",\n  \"target\": {\"type\": \"http\", \"url\": \"\"}\n}".to_string();
    Ok(render(&page(&viewer, &state, "", form, json)).into_response())
}

/// `GET /ui/jobs/{id}/edit`.
pub async fn edit_form(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::of(&state, &headers).await;
    if viewer.session.is_none() {
        return Err(ConsoleError::SignIn(format!(
            "/ui/jobs/{}/edit",
            url_escape(&id)
        )));
    }
    let namespace = jetcron_core::job::namespace_of(&id);
    viewer.caller().grants.require(Role::Editor, namespace)?;
    let stored = crate::jobs::requests::get(
        &state,
        &viewer.caller(),
        crate::jobs::requests::GetJob { id: id.clone() },
    )
    .await?
    .job;
    let form = JobForm::of(stored.job.as_ref(), stored.revision);
    let json = stored
        .job
        .as_ref()
        .and_then(|d| serde_json::to_string_pretty(d).ok())
        .unwrap_or_default();
    Ok(render(&page(&viewer, &state, &id, form, json)).into_response())
}

/// Save `definition` for the edit of `editing` (empty: a new job), or show
/// the page again with what went wrong.
async fn save(
    state: &GatewayState,
    viewer: &Viewer,
    editing: &str,
    form: JobForm,
    definition: Vec<u8>,
) -> Result<Response, ConsoleError> {
    let request = PutJob {
        key: (!editing.is_empty()).then(|| editing.to_string()),
        expected_revision: Some(form.expected_revision),
        definition: definition.clone(),
    };
    let json = serde_json::from_slice::<Value>(&definition)
        .ok()
        .and_then(|d| serde_json::to_string_pretty(&d).ok())
        .unwrap_or_else(|| String::from_utf8_lossy(&definition).into_owned());
    match state
        .jobs
        .put(&viewer.caller(), request, state.clock.now())
        .await
    {
        Ok(reply) => {
            let done = if reply.created { "created" } else { "saved" };
            Ok(Redirect::to(&format!(
                "/ui/jobs/{}?done={done}",
                url_escape(&reply.job.id)
            ))
            .into_response())
        }
        Err(e) if matches!(e.code, ErrorCode::InvalidJob | ErrorCode::InvalidRequest) => {
            let mut page = page(viewer, state, editing, form, json);
            page.errors = if e.problems.is_empty() {
                BTreeMap::from([(e.field.clone().unwrap_or_default(), vec![e.message.clone()])])
            } else {
                errors_by_field(&e.problems)
            };
            Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&page)).into_response())
        }
        Err(e) if e.code == ErrorCode::Conflict => {
            let mut page = page(viewer, state, editing, form, json);
            page.conflict = if editing.is_empty() {
                "A job with this id exists already: pick another id, or open that job and edit it."
                    .to_string()
            } else {
                "Someone changed this job since you opened it. Your edit is below, not saved: open the job in another tab to see their change (the history shows the difference), then edit again."
                    .to_string()
            };
            Ok((StatusCode::CONFLICT, render(&page)).into_response())
        }
        Err(e) => Err(ConsoleError::Api(e)),
    }
}

/// `POST /ui/jobs/new` and `POST /ui/jobs/{id}/edit`: the form.
pub async fn save_form(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    id: Option<Path<String>>,
    Form(form): Form<JobForm>,
) -> Result<Response, ConsoleError> {
    let editing = id.map(|Path(id)| id).unwrap_or_default();
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_write(&headers, &form.csrf, "/ui/jobs")?;
    let base = if editing.is_empty() {
        None
    } else {
        crate::jobs::requests::get(
            &state,
            &viewer.caller(),
            crate::jobs::requests::GetJob {
                id: editing.clone(),
            },
        )
        .await
        .ok()
        .and_then(|reply| reply.job.job)
    };
    let mut form = form;
    if !editing.is_empty() {
        // The id of an edited job is its key.
        form.id = editing.clone();
    }
    let definition = form.apply_to(base.as_ref());
    let bytes = serde_json::to_vec(&definition)
        .map_err(|e| ApiError::internal("encode the definition", e))?;
    save(&state, &viewer, &editing, form, bytes).await
}

#[derive(Debug, Deserialize)]
pub struct JsonForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    expected_revision: u64,
    #[serde(default)]
    definition: String,
}

/// `POST /ui/jobs/new.json` and `POST /ui/jobs/{id}/edit.json`: the raw editor.
pub async fn save_json(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    id: Option<Path<String>>,
    Form(posted): Form<JsonForm>,
) -> Result<Response, ConsoleError> {
    let editing = id.map(|Path(id)| id).unwrap_or_default();
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_write(&headers, &posted.csrf, "/ui/jobs")?;
    let parsed: Option<Value> = serde_json::from_str(&posted.definition).ok();
    let mut form = JobForm::of(parsed.as_ref(), posted.expected_revision);
    form.expected_revision = posted.expected_revision;
    save(
        &state,
        &viewer,
        &editing,
        form,
        posted.definition.into_bytes(),
    )
    .await
}

#[derive(Debug, Deserialize)]
pub struct PreviewQuery {
    #[serde(default)]
    schedule: String,
    #[serde(default)]
    timezone: String,
}

/// `GET /ui/preview?schedule=&timezone=`: the live preview fragment.
pub async fn preview(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Query(query): Query<PreviewQuery>,
) -> Result<Response, ConsoleError> {
    Viewer::of(&state, &headers).await.may_read("/ui/")?;
    Ok(render(&PreviewFragment::of(
        &state,
        &query.schedule,
        &query.timezone,
    ))
    .into_response())
}
