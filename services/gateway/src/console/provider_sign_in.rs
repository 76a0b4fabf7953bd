//! Sign-in with the identity provider, the console's side
//! ([`crate::people::provider`] speaks to the provider):
//!
//! - `GET /ui/login/oidc?next=…` keeps a pending sign-in
//!   ([`super::pending_sign_ins`]) and sends the browser to the provider;
//! - `GET /ui/oidc/callback?code&state` takes the pending sign-in of this
//!   browser (once), checks `state` against it, has the code exchanged and
//!   the ID token verified, and begins a session for the person it names,
//!   with their groups. A wrong or replayed `state`, a sign-in begun in
//!   another browser or too long ago, an error from the provider and a
//!   refused token each end at the sign-in page with why, and no session.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use subtle::ConstantTimeEq as _;

use super::pending_sign_ins;
use super::session::{cookie_named, Holder};
use super::sign_in::{begin_session, local_path, login_page_with, served_over_tls, with_cookie};
use super::viewer::{ConsoleError, Viewer};
use crate::people::provider::ProviderError;
use crate::people::{Person, Via};
use crate::GatewayState;

/// What a callback without its own pending sign-in is told.
const OUT_OF_DATE: &str =
    "This sign-in is out of date or was not started in this browser: sign in again.";

#[derive(Debug, Default, Deserialize)]
pub struct BeginQuery {
    next: Option<String>,
}

/// `GET /ui/login/oidc`.
pub async fn begin(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Query(query): Query<BeginQuery>,
) -> Response {
    let viewer = Viewer::of(&state, &headers).await;
    let next = local_path(query.next.as_deref());
    let Some(provider) = state.provider.clone() else {
        let page = "This console has no identity provider (--oidc-issuer).";
        return login_page_with(&state, &viewer, next, page, StatusCode::NOT_FOUND);
    };
    let (url, pending) = match provider.begin(&next, state.clock.now()).await {
        Ok(begun) => begun,
        Err(e) => {
            tracing::warn!(error = %e, "sign-in with the identity provider not begun");
            return login_page_with(
                &state,
                &viewer,
                next,
                &e.to_string(),
                StatusCode::SERVICE_UNAVAILABLE,
            );
        }
    };
    match pending_sign_ins::keep(&state.sessions, &pending).await {
        Ok(id) => with_cookie(
            Redirect::to(url.as_str()).into_response(),
            &pending_sign_ins::cookie(&id, served_over_tls(&headers)),
        ),
        Err(e) => ConsoleError::Api(e).into_response(),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct CallbackQuery {
    #[serde(default)]
    code: String,
    #[serde(default)]
    state: String,
    error: Option<String>,
    error_description: Option<String>,
    iss: Option<String>,
}

/// `GET /ui/oidc/callback`.
pub async fn callback(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Query(query): Query<CallbackQuery>,
) -> Response {
    let viewer = Viewer::of(&state, &headers).await;
    let refuse = |why: &str, status: StatusCode| {
        with_cookie(
            login_page_with(&state, &viewer, "/ui/".into(), why, status),
            &pending_sign_ins::cleared_cookie(),
        )
    };
    let Some(provider) = state.provider.clone() else {
        return refuse(
            "This console has no identity provider.",
            StatusCode::NOT_FOUND,
        );
    };
    let now = state.clock.now();
    let pending = match cookie_named(&headers, pending_sign_ins::COOKIE) {
        Some(id) => pending_sign_ins::take(&state.sessions, &id, now).await,
        None => Ok(None),
    };
    let pending = match pending {
        Ok(Some(pending)) => pending,
        Ok(None) => return refuse(OUT_OF_DATE, StatusCode::BAD_REQUEST),
        Err(e) => return ConsoleError::Api(e).into_response(),
    };
    if !bool::from(pending.state.as_bytes().ct_eq(query.state.as_bytes())) {
        tracing::warn!("identity provider callback with another sign-in's state refused");
        return refuse(OUT_OF_DATE, StatusCode::BAD_REQUEST);
    }
    if let Some(error) = &query.error {
        let why = match &query.error_description {
            Some(description) => {
                format!("The identity provider refused the sign-in: {error}: {description}")
            }
            None => format!("The identity provider refused the sign-in: {error}"),
        };
        return refuse(&why, StatusCode::UNAUTHORIZED);
    }
    let issuer = &provider.settings().issuer;
    if query.iss.as_ref().is_some_and(|iss| iss != issuer) {
        return refuse(
            "The answer came from another identity provider.",
            StatusCode::BAD_REQUEST,
        );
    }
    let signed_in = match provider.finish(query.code, &pending, now).await {
        Ok(signed_in) => signed_in,
        Err(ProviderError::Refused(why)) => {
            tracing::warn!(why, "identity provider sign-in refused");
            return refuse(
                &format!("The sign-in was refused: {why}."),
                StatusCode::UNAUTHORIZED,
            );
        }
        Err(e @ ProviderError::Unavailable { .. }) => {
            return refuse(&e.to_string(), StatusCode::SERVICE_UNAVAILABLE);
        }
    };
    if let Some(note) = &signed_in.groups_note {
        tracing::warn!(name = %signed_in.name, note, "identity provider's groups claim not taken whole");
    }
    let person = Person {
        name: signed_in.name,
        groups: signed_in.groups,
        via: Via::Provider {
            issuer: issuer.clone(),
        },
    };
    with_cookie(
        begin_session(
            &state,
            &viewer,
            &headers,
            Holder::Person(person),
            &pending.next,
        )
        .await,
        &pending_sign_ins::cleared_cookie(),
    )
}
