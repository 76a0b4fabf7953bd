//! Who is looking at a page, what they may do, and the sign-in pages.
//!
//! [`Viewer::of`] reads the session cookie and who it stands for: a
//! bootstrap token's session is admin of every namespace, a scoped token's
//! holds that token's role in its namespace (its record read on every
//! request, as the HTTP API does); [`Viewer::may_read`] sends an
//! anonymous viewer to the sign-in page when the gateway protects reads;
//! [`Viewer::may_write`] checks the session, the form's CSRF token and,
//! when the browser sends one, the `Origin` header. What a page shows and
//! offers follows the viewer's grants ([`Viewer::frame_for`]); the
//! operations check it again.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use super::pages::{render, ErrorPage, Frame, LoginPage};
use super::session::{self, Session};
use crate::caller::Caller;
use crate::GatewayState;
use jetcron_core::access::Role;

/// The viewer of one request.
#[derive(Debug, Clone)]
pub struct Viewer {
    pub session: Option<Session>,
    /// Whether reads show secrets (they need a session then).
    pub reads_protected: bool,
    /// Who the console's operations act for.
    caller: Caller,
}

impl Viewer {
    pub async fn of(state: &GatewayState, headers: &HeaderMap) -> Self {
        let reads_protected = state.http_auth.reads_protected();
        let signed_in = match session::from_headers(headers) {
            Some(value) => signed_in(state, &value).await,
            None => None,
        };
        let (session, caller) = match signed_in {
            Some((session, caller)) => (Some(session), caller),
            None => (None, Caller::anonymous_reader()),
        };
        Self {
            session,
            reads_protected,
            caller,
        }
    }

    /// Whether this viewer sees the secrets (credentials in definitions)
    /// of `namespace`'s jobs: signed in, and an editor there (who may
    /// write them anyway).
    pub fn sees_secrets_of(&self, namespace: &str) -> bool {
        self.session.is_some() && self.caller.grants.allows(Role::Editor, namespace)
    }

    /// Whether this viewer sees channel credentials: signed in as an admin
    /// of every namespace (channels are shared by all).
    pub fn sees_channel_secrets(&self) -> bool {
        self.session.is_some() && self.caller.grants.allows_everywhere(Role::Admin)
    }

    /// The caller the console's operations act for: a bootstrap token's
    /// session is admin of every namespace, a scoped token's holds its
    /// token's grant; without one, an anonymous reader.
    pub fn caller(&self) -> Caller {
        self.caller.clone()
    }

    /// `Ok` when the viewer may see `namespace`'s jobs and runs.
    pub fn may_see(&self, namespace: &str) -> Result<(), ConsoleError> {
        Ok(self.caller.grants.require(Role::Viewer, namespace)?)
    }

    /// The frame of a page titled `title` about no one namespace: what it
    /// offers, the viewer may do somewhere.
    pub fn frame(&self, title: impl Into<String>) -> Frame {
        let somewhere = |role: Role| {
            self.caller
                .grants
                .highest()
                .is_some_and(|highest| highest >= role)
        };
        self.frame_with(title, somewhere(Role::Operator), somewhere(Role::Editor))
    }

    /// The frame of a page about `namespace`'s job or run: what it offers,
    /// the viewer may do there.
    pub fn frame_for(&self, title: impl Into<String>, namespace: &str) -> Frame {
        let allows = |role: Role| self.caller.grants.allows(role, namespace);
        self.frame_with(title, allows(Role::Operator), allows(Role::Editor))
    }

    fn frame_with(&self, title: impl Into<String>, operates: bool, edits: bool) -> Frame {
        let signed_in = self.session.is_some();
        Frame {
            title: title.into(),
            signed_in,
            may_admin: signed_in && self.caller.grants.highest() == Some(Role::Admin),
            may_operate: signed_in && operates,
            may_edit: signed_in && edits,
            who: match self.caller.only_namespace() {
                Some(namespace) if signed_in => self
                    .caller
                    .grants
                    .role_in(namespace)
                    .map(|role| format!("{role} of {namespace}"))
                    .unwrap_or_default(),
                _ => String::new(),
            },
            csrf: self
                .session
                .as_ref()
                .map(|s| s.csrf.clone())
                .unwrap_or_default(),
            notice: String::new(),
        }
    }

    /// Reading `path` is allowed, or the answer sends the viewer to sign in.
    pub fn may_read(&self, path: &str) -> Result<(), ConsoleError> {
        match (self.reads_protected, &self.session) {
            (true, None) => Err(ConsoleError::SignIn(path.to_string())),
            _ => Ok(()),
        }
    }

    /// A write with the form's `csrf` is allowed.
    pub fn may_write(
        &self,
        headers: &HeaderMap,
        csrf: &str,
        back: &str,
    ) -> Result<(), ConsoleError> {
        let Some(session) = &self.session else {
            return Err(ConsoleError::SignIn(back.to_string()));
        };
        if !same_origin(headers) {
            return Err(ConsoleError::Forbidden(
                "this form was sent from another site".into(),
            ));
        }
        if !session::csrf_matches(session, csrf) {
            return Err(ConsoleError::Forbidden(
                "this form is out of date or was not made by this console: reload the page and try again".into(),
            ));
        }
        Ok(())
    }
}

/// The session of cookie `value` and who it stands for, if it is one: a
/// bootstrap token's, or a live scoped token's (its record read now).
async fn signed_in(state: &GatewayState, value: &str) -> Option<(Session, Caller)> {
    let now = state.clock.now();
    let Some(id) = session::scoped_token_id(value) else {
        let session = session::verify(&state.http_auth, value, now)?;
        return Some((session, Caller::console()));
    };
    // A bucket that does not answer signs nobody in.
    let record = state.tokens.get(id).await.ok().flatten()?;
    if record.expired_at(now) {
        return None;
    }
    let session = session::verify_scoped(&record, value, now)?;
    let caller = record.caller(jetcron_core::audit::Door::Console)?;
    Some((session, caller))
}

/// A session for a presented token: a bootstrap token, or a live scoped
/// token whose secret matches.
async fn sign_in(state: &GatewayState, presented: &str) -> Option<Session> {
    let now = state.clock.now();
    if let Some(session) = session::sign_in(&state.http_auth, presented, now) {
        return Some(session);
    }
    let record = crate::tokens::requests::live_record(state, presented)
        .await
        .ok()
        .flatten()?;
    Some(session::sign_in_scoped(&record, now))
}

/// Whether the `Origin` header, when present, names the host served.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let origin_host = origin
        .split_once("://")
        .map_or(origin, |(_, rest)| rest)
        .trim_end_matches('/');
    !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
}

/// Why a console request ends without its page.
#[derive(Debug)]
pub enum ConsoleError {
    /// Sign in first, then come back to this path.
    SignIn(String),
    /// The write was refused.
    Forbidden(String),
    /// An operation's error, shown on an error page.
    Api(jetcron_core::api::ApiError),
}

impl From<jetcron_core::api::ApiError> for ConsoleError {
    fn from(e: jetcron_core::api::ApiError) -> Self {
        Self::Api(e)
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        match self {
            ConsoleError::SignIn(back) => {
                Redirect::to(&format!("/ui/login?next={}", url_escape(&back))).into_response()
            }
            ConsoleError::Forbidden(why) => {
                let page = ErrorPage::new(Frame::plain("Refused"), "Refused", why);
                (StatusCode::FORBIDDEN, render(&page)).into_response()
            }
            ConsoleError::Api(e) => {
                if e.code.http_status() >= 500 {
                    tracing::warn!(error = %e.message, "console page failed on a dependency");
                }
                let status =
                    StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::BAD_GATEWAY);
                let title = status.canonical_reason().unwrap_or("Error");
                let page = ErrorPage::new(Frame::plain(title), title, e.message);
                (status, render(&page)).into_response()
            }
        }
    }
}

/// `text` as a query-string value.
pub fn url_escape(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// Only paths of this console are followed after sign-in (no open redirect).
fn local_path(next: Option<&str>) -> String {
    match next {
        Some(p) if p.starts_with("/ui/") && !p.starts_with("//") && !p.contains('\\') => {
            p.to_string()
        }
        _ => "/ui/".to_string(),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// `GET /ui/login`.
pub async fn login_page(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    query: axum::extract::Query<LoginQuery>,
) -> Response {
    let viewer = Viewer::of(&state, &headers).await;
    let page = LoginPage {
        frame: viewer.frame("Sign in"),
        next: local_path(query.next.as_deref()),
        error: String::new(),
        no_tokens: state.http_auth.has_no_tokens(),
    };
    render(&page).into_response()
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    token: String,
    #[serde(default)]
    next: String,
}

/// `POST /ui/login`: a token in, a session cookie out.
pub async fn login(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let viewer = Viewer::of(&state, &headers).await;
    let next = local_path(Some(&form.next));
    if !same_origin(&headers) {
        return ConsoleError::Forbidden("this form was sent from another site".into())
            .into_response();
    }
    match sign_in(&state, form.token.trim()).await {
        Some(session) => {
            let secure = headers
                .get("x-forwarded-proto")
                .and_then(|v| v.to_str().ok())
                == Some("https");
            let mut response = Redirect::to(&next).into_response();
            if let Ok(cookie) = session::cookie(&session, secure).parse() {
                response.headers_mut().insert(header::SET_COOKIE, cookie);
            }
            response
        }
        None => {
            let page = LoginPage {
                frame: viewer.frame("Sign in"),
                next,
                error: "That token is not accepted by this gateway.".into(),
                no_tokens: state.http_auth.has_no_tokens(),
            };
            (StatusCode::UNAUTHORIZED, render(&page)).into_response()
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /ui/logout`.
pub async fn logout(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    let viewer = Viewer::of(&state, &headers).await;
    if let Err(e) = viewer.may_write(&headers, &form.csrf, "/ui/") {
        return e.into_response();
    }
    let mut response = Redirect::to("/ui/login").into_response();
    if let Ok(cookie) = session::cleared_cookie().parse() {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_console_paths_are_followed_after_sign_in() {
        assert_eq!(local_path(Some("/ui/jobs/a?x=1")), "/ui/jobs/a?x=1");
        for bad in [
            "https://evil.example/",
            "//evil.example/ui/",
            "/ui/\\evil",
            "/v1/jobs",
            "",
        ] {
            assert_eq!(local_path(Some(bad)), "/ui/", "{bad}");
        }
    }

    #[test]
    fn a_form_from_another_origin_is_refused() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "127.0.0.1:8080".parse().expect("host"));
        assert!(same_origin(&headers));
        headers.insert(
            header::ORIGIN,
            "http://127.0.0.1:8080".parse().expect("origin"),
        );
        assert!(same_origin(&headers));
        headers.insert(
            header::ORIGIN,
            "http://evil.example".parse().expect("origin"),
        );
        assert!(!same_origin(&headers));
    }
}
