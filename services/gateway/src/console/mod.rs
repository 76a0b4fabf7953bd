//! The operator console: server-rendered HTML pages at `/ui/...` (and `/`),
//! served by the gateway on its own port.
//!
//! Every page is HTML over the gateway's own operations: the typed reads of
//! [`crate::jobs::reads`], [`crate::jobs::rejections`], [`crate::runs::reads`],
//! [`crate::runs::stats`] and [`crate::runs::figures`] (the console never
//! sends SQL), the in-memory [`crate::jobs::catalog`] for the job table, and
//! the writes of [`crate::jobs::store`], [`crate::jobs::requests`],
//! [`crate::runs::manual`] and [`crate::runs::control`]; so the console and
//! the HTTP API cannot disagree. Templates are askama
//! (compiled in, HTML-escaped by default); the stylesheet and one small
//! script are files of this crate served from `/ui/assets/`, and a strict
//! Content-Security-Policy allows no other script, so a job field can never
//! run as code. Reading works without JavaScript; the script only adds the
//! live schedule preview and confirmation prompts.
//!
//! Access follows the HTTP API: reads need a session only when the gateway
//! protects reads (`--protect-reads`), and then show secrets as the API
//! does; every write needs a session ([`session`]) and the form's CSRF token.
//! A session acts with its token's grant: a bootstrap token's is admin of
//! every namespace, a team's scoped token's its role in its namespace
//! (`viewer`); `access_page` is where a namespace's admins manage its
//! tokens, role bindings and target policy.

mod access_page;
mod actions;
mod assets;
mod channels_page;
mod charts;
mod diff;
mod edit_page;
mod job_form;
mod job_page;
mod jobs_page;
mod namespace_choice;
mod overview_page;
mod pages;
pub mod pending_sign_ins;
mod provider_sign_in;
mod run_page;
mod runs_page;
pub mod session;
mod sign_in;
mod viewer;

use std::sync::Arc;

use axum::http::{header, HeaderValue};
use axum::response::{Redirect, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::GatewayState;

/// The console's routes, to be merged into the gateway's router.
pub fn router(state: Arc<GatewayState>) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(overview_page::show))
        .route("/ui/login", get(sign_in::login_page).post(sign_in::login))
        .route("/ui/login/password", post(sign_in::login_with_password))
        .route("/ui/login/oidc", get(provider_sign_in::begin))
        .route("/ui/oidc/callback", get(provider_sign_in::callback))
        .route("/ui/logout", post(sign_in::logout))
        .route("/ui/assets/{name}", get(assets::serve))
        .route("/ui/preview", get(edit_page::preview))
        .route("/ui/jobs", get(jobs_page::show))
        .route("/ui/jobs:pause", post(actions::pause_selected))
        .route("/ui/jobs:resume", post(actions::resume_selected))
        .route(
            "/ui/jobs/new",
            get(edit_page::new_form).post(edit_page::save_form),
        )
        .route("/ui/jobs/new.json", post(edit_page::save_json))
        .route("/ui/jobs/{id}", get(job_page::show))
        .route(
            "/ui/jobs/{id}/edit",
            get(edit_page::edit_form).post(edit_page::save_form),
        )
        .route("/ui/jobs/{id}/edit.json", post(edit_page::save_json))
        .route("/ui/jobs/{id}/diff", get(job_page::diff))
        .route("/ui/jobs/{id}/pause", post(actions::pause))
        .route("/ui/jobs/{id}/resume", post(actions::resume))
        .route("/ui/jobs/{id}/trigger", post(actions::trigger))
        .route("/ui/jobs/{id}/backfill", post(actions::backfill))
        .route(
            "/ui/jobs/{id}/delete",
            get(actions::confirm_delete).post(actions::delete),
        )
        .route("/ui/runs", get(runs_page::show))
        .route("/ui/channels", get(channels_page::show))
        .route("/ui/access", get(access_page::show))
        .route("/ui/access/tokens", post(access_page::make_token))
        .route(
            "/ui/access/tokens/{id}/revoke",
            post(access_page::revoke_token),
        )
        .route("/ui/access/bindings", post(access_page::set_binding))
        .route(
            "/ui/access/bindings/remove",
            post(access_page::remove_binding),
        )
        .route("/ui/access/policy", post(access_page::set_policy))
        .route("/ui/access/policy/remove", post(access_page::remove_policy))
        .route("/ui/runs/{run_id}", get(run_page::show))
        .route("/ui/runs/{run_id}/kill", post(actions::kill))
        .layer(axum::middleware::map_response(protect))
        .with_state(state)
}

/// Headers on every console answer: no script but ours, no framing, no
/// sniffing, no caching of pages that may show secrets.
async fn protect(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}
