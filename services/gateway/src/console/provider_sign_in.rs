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
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::{Extensions, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use subtle::ConstantTimeEq as _;

use super::pending_sign_ins;
use super::session::{self, cookie_named, Holder};
use super::sign_in::{
    begin_session, client_address, local_path, login_page_with, too_many, with_cookie,
};
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
    extensions: Extensions,
    Query(query): Query<BeginQuery>,
) -> Response {
    let viewer = Viewer::of(&state, &headers).await;
    let next = local_path(query.next.as_deref());
    let Some(provider) = state.provider.clone() else {
        let page = "This console has no identity provider (--oidc-issuer).";
        return login_page_with(&state, &viewer, next, page, StatusCode::NOT_FOUND);
    };
    // Each begun sign-in is kept until it ends: counted per address.
    let address = client_address(&headers, &extensions, state.limits.trust_forwarded_for);
    if let Err(wait) = state
        .sign_in_guard
        .provider_attempt(address, Instant::now())
    {
        return too_many(&state, &viewer, next, wait);
    }
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
    match state.pending_sign_ins.keep(&pending).await {
        Ok(id) => with_cookie(
            Redirect::to(url.as_str()).into_response(),
            &pending_sign_ins::cookie(&id, session::served_over_tls(&headers)),
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
        Some(id) => state.pending_sign_ins.take(&id, now).await,
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
    // A local user's bindings are not the provider's to give: a name the
    // provider says (by a claim other than a verified address, which a
    // local name cannot be) that a local user has is refused.
    match state.local_users.find(&signed_in.name).await {
        Ok(None) => {}
        Ok(Some(_)) => {
            tracing::warn!(name = %signed_in.name, "identity provider named a local user: refused");
            return refuse(
                "The identity provider names you as a local user of this console: sign in with that user's password, or ask an admin to remove the local user.",
                StatusCode::FORBIDDEN,
            );
        }
        Err(e) => return ConsoleError::Api(e).into_response(),
    }
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
