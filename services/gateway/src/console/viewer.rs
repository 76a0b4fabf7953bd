//! Who is looking at a page, what they may do, and the sign-in pages.
//!
//! [`Viewer::of`] reads the session cookie, the session it names
//! ([`super::session`]) and who that stands for: a bootstrap token's
//! session is admin of every namespace while the token is configured, a
//! scoped token's holds that token's role in its namespace while the token
//! lives (its record read on every request, as the HTTP API does);
//! [`Viewer::may_read`] sends an
//! anonymous viewer to the sign-in page when the gateway protects reads;
//! [`Viewer::may_write`] checks the session, the form's CSRF token and,
//! when the browser sends one, the `Origin` header. What a page shows and
//! offers follows the viewer's grants ([`Viewer::frame_for`]); the
//! operations check it again.

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::pages::{render, ErrorPage, Frame};
use super::session::{self, Holder, Session};
use crate::caller::Caller;
use crate::people::Via;
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
            who: match signed_in {
                true => self.who(),
                false => String::new(),
            },
            csrf: self
                .session
                .as_ref()
                .map(|s| s.csrf().to_string())
                .unwrap_or_default(),
            notice: String::new(),
        }
    }

    /// Who the signed-in viewer is, as the pages' header says it: a
    /// person's name, a team token's role (`operator of billing`).
    fn who(&self) -> String {
        if let Some(name) = self.caller.person_name() {
            return name.to_string();
        }
        match self.caller.only_namespace() {
            Some(namespace) => self
                .caller
                .grants
                .role_in(namespace)
                .map(|role| format!("{role} of {namespace}"))
                .unwrap_or_default(),
            None => String::new(),
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

/// The session of cookie `value` and who it stands for, if it is a live
/// one: its record read from the sessions bucket now, and what it holds
/// still good (a configured bootstrap token, a live scoped token with the
/// same secret, a person whose roles can be read). A bucket that does not
/// answer signs nobody in.
async fn signed_in(state: &GatewayState, value: &str) -> Option<(Session, Caller)> {
    let now = state.clock.now();
    let session = state.sessions.find(value, now).await.ok().flatten()?;
    let caller = match &session.record.holder {
        Holder::Bootstrap { token_sha256 } => state
            .http_auth
            .accepts_digest(token_sha256)
            .then(Caller::console)?,
        Holder::Token { id, secret_sha256 } => {
            let record = state.tokens.get(id).await.ok().flatten()?;
            if !record.hash_matches(secret_sha256) || record.expired_at(now) {
                return None;
            }
            record.caller(jetcron_core::audit::Door::Console)?
        }
        Holder::Person(person) => {
            if let Via::Password { user_revision } = person.via {
                local_user_unchanged(state, &person.name, user_revision).await?;
            }
            let last = state.bindings.last_sequence().await.ok()?;
            let grants = state
                .bound_roles
                .grants_after(last, &person.name, &person.groups)
                .await?;
            Caller::person(person, grants)
        }
    };
    Some((session, caller))
}

/// `Some` while local user `name`'s record is at `revision`, as when the
/// session began: removing the user or changing the password ends their
/// sessions.
async fn local_user_unchanged(state: &GatewayState, name: &str, revision: u64) -> Option<()> {
    let user = state.local_users.get(name).await.ok().flatten()?;
    (user.revision == revision).then_some(())
}

/// Whether the `Origin` header, when present, names the host served.
pub(super) fn same_origin(headers: &HeaderMap) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

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
