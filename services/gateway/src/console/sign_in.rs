//! The sign-in page and its forms: an API token (a bootstrap token, or a
//! team's scoped token), or a local user's name and password; and
//! sign-out. Each sign-in begins a new server-side session
//! ([`super::session`]) and ends the one the browser had.
//!
//! A password sign-in is limited per name and per client address
//! ([`crate::people::sign_in_limits`]) before anything is checked, and a
//! wrong name and a wrong password get the same answer in the same time
//! ([`crate::people::passwords`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, Extensions, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use jetcron_core::api::ApiError;
use serde::Deserialize;

use super::pages::{render, LoginPage, ProviderButton};
use super::session::{self, Holder};
use super::viewer::{same_origin, url_escape, ConsoleError, Viewer};
use crate::people::sign_in_limits::Checked;
use crate::people::{Person, Via};
use crate::GatewayState;

/// What a wrong name and a wrong password are both told.
const NO_MATCH: &str = "That name and password do not match.";

/// Only paths of this console are followed after sign-in (no open redirect).
pub(super) fn local_path(next: Option<&str>) -> String {
    match next {
        Some(p)
            if p.starts_with("/ui/")
                && !p.starts_with("//")
                && !p.contains('\\')
                && p.chars().all(|c| c.is_ascii_graphic()) =>
        {
            p.to_string()
        }
        _ => "/ui/".to_string(),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// The sign-in page with `error` (maybe empty), answered with `status`.
pub(super) fn login_page_with(
    state: &GatewayState,
    viewer: &Viewer,
    next: String,
    error: &str,
    status: StatusCode,
) -> Response {
    let page = LoginPage {
        frame: viewer.frame("Sign in"),
        provider: state.provider.as_ref().map(|provider| ProviderButton {
            name: provider.settings().display_name.clone(),
            link: format!("/ui/login/oidc?next={}", url_escape(&next)),
        }),
        next,
        error: error.to_string(),
        no_tokens: state.http_auth.has_no_tokens(),
    };
    (status, render(&page)).into_response()
}

/// `GET /ui/login`.
pub async fn login_page(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    query: axum::extract::Query<LoginQuery>,
) -> Response {
    let viewer = Viewer::of(&state, &headers).await;
    let next = local_path(query.next.as_deref());
    login_page_with(&state, &viewer, next, "", StatusCode::OK)
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    token: String,
    #[serde(default)]
    next: String,
}

/// `POST /ui/login`: a token in, a new session out.
pub async fn login(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let viewer = Viewer::of(&state, &headers).await;
    let next = local_path(Some(&form.next));
    if !same_origin(&headers) {
        return from_elsewhere();
    }
    match holder_of(&state, form.token.trim()).await {
        Ok(Some(holder)) => begin_session(&state, &viewer, &headers, holder, &next).await,
        Ok(None) => login_page_with(
            &state,
            &viewer,
            next,
            "That token is not accepted by this gateway.",
            StatusCode::UNAUTHORIZED,
        ),
        Err(e) => ConsoleError::Api(e).into_response(),
    }
}

#[derive(Debug, Deserialize)]
pub struct PasswordForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    next: String,
}

/// `POST /ui/login/password`: a local user's name and password in, a new
/// session out.
pub async fn login_with_password(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    extensions: Extensions,
    Form(form): Form<PasswordForm>,
) -> Response {
    let viewer = Viewer::of(&state, &headers).await;
    let next = local_path(Some(&form.next));
    if !same_origin(&headers) {
        return from_elsewhere();
    }
    let name = form.name.trim().to_string();
    let address = client_address(&headers, &extensions, state.limits.trust_forwarded_for);
    if let Err(wait) = state.sign_in_guard.attempt(&name, address, Instant::now()) {
        return too_many(&state, &viewer, next, wait);
    }
    let user = match state.local_users.find(&name).await {
        Ok(user) => user,
        Err(e) => return ConsoleError::Api(e).into_response(),
    };
    let phc = user.as_ref().map(|u| u.record.password.clone());
    let checked = state.sign_in_guard.verify(phc, form.password).await;
    if checked == Checked::Busy {
        return too_many(&state, &viewer, next, std::time::Duration::from_secs(60));
    }
    let Some(user) = user.filter(|_| checked == Checked::Matches) else {
        tracing::info!(name = %name, address = ?address, "console password sign-in refused");
        return login_page_with(&state, &viewer, next, NO_MATCH, StatusCode::UNAUTHORIZED);
    };
    state.sign_in_guard.succeeded(&name);
    let person = Person {
        name,
        groups: Vec::new(),
        via: Via::Password {
            user_revision: user.revision,
        },
    };
    begin_session(&state, &viewer, &headers, Holder::Person(person), &next).await
}

/// Who a presented token stands for, if it may sign in: a bootstrap
/// token, or a live scoped token whose secret matches.
async fn holder_of(state: &GatewayState, presented: &str) -> Result<Option<Holder>, ApiError> {
    if let Some(token_sha256) = state.http_auth.bootstrap_digest(presented) {
        return Ok(Some(Holder::Bootstrap { token_sha256 }));
    }
    let record = crate::tokens::requests::live_record(state, presented).await?;
    Ok(record.map(|record| Holder::Token {
        id: record.id,
        secret_sha256: record.secret_sha256,
    }))
}

/// Begin a session for `holder` (ending the viewer's old one) and send
/// the browser to `next` with its cookie.
pub(super) async fn begin_session(
    state: &GatewayState,
    viewer: &Viewer,
    headers: &HeaderMap,
    holder: Holder,
    next: &str,
) -> Response {
    if let Some(before) = &viewer.session {
        // A session that cannot be ended now still ends at its timeouts.
        let _ = state.sessions.end(before).await;
    }
    match state.sessions.begin(holder, state.clock.now()).await {
        Ok((id, _)) => {
            let lifetime = state.sessions.timeouts().lifetime;
            let cookie = session::cookie(&id, lifetime, session::served_over_tls(headers));
            with_cookie(Redirect::to(next).into_response(), &cookie)
        }
        Err(e) => ConsoleError::Api(e).into_response(),
    }
}

/// The answer to a sign-in form posted from another site.
fn from_elsewhere() -> Response {
    ConsoleError::Forbidden("this form was sent from another site".into()).into_response()
}

/// The answer to a sign-in past its limits: 429, and when to try again.
pub(super) fn too_many(
    state: &GatewayState,
    viewer: &Viewer,
    next: String,
    wait: std::time::Duration,
) -> Response {
    let minutes = wait.as_secs().div_ceil(60).max(1);
    let unit = if minutes == 1 { "minute" } else { "minutes" };
    let error = format!("Too many sign-in attempts: try again in {minutes} {unit}.");
    let mut response = login_page_with(state, viewer, next, &error, StatusCode::TOO_MANY_REQUESTS);
    if let Ok(seconds) = HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, seconds);
    }
    response
}

/// The client's address: the connection's peer, or, behind a proxy the
/// gateway is told to trust (`--trust-forwarded-for`), the address that
/// proxy saw (the last of `X-Forwarded-For`).
pub(super) fn client_address(
    headers: &HeaderMap,
    extensions: &Extensions,
    trust_forwarded: bool,
) -> Option<IpAddr> {
    if trust_forwarded {
        let forwarded = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .next_back()
            .and_then(|a| forwarded_address(a.trim()));
        if forwarded.is_some() {
            return forwarded;
        }
    }
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip())
}

/// An `X-Forwarded-For` entry's address: `192.0.2.7`, `2001:db8::7`, or
/// with a port, `192.0.2.7:4711`, `[2001:db8::7]:4711`.
fn forwarded_address(entry: &str) -> Option<IpAddr> {
    entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// `response` also setting `cookie`.
pub(super) fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(cookie) = cookie.parse() {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /ui/logout`: the session ends now, on every gateway.
pub async fn logout(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    let viewer = Viewer::of(&state, &headers).await;
    if let Err(e) = viewer.may_write(&headers, &form.csrf, "/ui/") {
        return e.into_response();
    }
    if let Some(session) = &viewer.session {
        if let Err(e) = state.sessions.end(session).await {
            return ConsoleError::Api(e).into_response();
        }
    }
    with_cookie(
        Redirect::to("/ui/login").into_response(),
        &session::cleared_cookie(session::served_over_tls(&headers)),
    )
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
            "/ui/\u{1}",
            "/ui/jobs\nLocation: x",
            "/ui/jöbs",
        ] {
            assert_eq!(local_path(Some(bad)), "/ui/", "{bad}");
        }
    }

    #[test]
    fn the_client_address_is_the_peer_unless_a_proxy_is_trusted() {
        let mut extensions = Extensions::new();
        extensions.insert(ConnectInfo(SocketAddr::from(([10, 0, 0, 9], 5555))));
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", "1.2.3.4, 5.6.7.8".parse().expect("xff"));
        let peer = IpAddr::from([10, 0, 0, 9]);
        assert_eq!(client_address(&headers, &extensions, false), Some(peer));
        assert_eq!(
            client_address(&headers, &extensions, true),
            Some(IpAddr::from([5, 6, 7, 8]))
        );
        assert_eq!(
            client_address(&HeaderMap::new(), &extensions, true),
            Some(peer)
        );
        assert_eq!(client_address(&headers, &Extensions::new(), false), None);
        assert_eq!(
            forwarded_address("[2001:db8::7]:4711"),
            Some("2001:db8::7".parse().expect("v6"))
        );
        assert_eq!(
            forwarded_address("192.0.2.7:4711"),
            Some(IpAddr::from([192, 0, 2, 7]))
        );
        assert_eq!(forwarded_address("unknown"), None);
    }
}
