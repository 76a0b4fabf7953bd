//! `GET /ui/access?namespace=`: a namespace's access, for its admins: its
//! scoped tokens (make one, shown once; revoke), its role bindings (give,
//! take away) and its target policy (set, remove). Each form calls the
//! same operation as the HTTP API ([`crate::tokens`], [`crate::bindings`],
//! [`crate::policies`]) with the viewer's grants, which the operation
//! checks; a team's admin sees its own namespace, an admin of `*` any one
//! (and `*` itself: the tokens and bindings of every namespace).

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use jetcron_core::access::{Role, Scope, ALL_NAMESPACES};
use serde::Deserialize;

use super::namespace_choice;
use super::pages::{render, when_text, Frame};
use super::viewer::{url_escape, ConsoleError, Viewer};
use crate::bindings::{self, SetBinding};
use crate::tokens::requests::{self as tokens, CreateToken};
use crate::{policies, GatewayState};

/// One token as the table shows it.
pub struct TokenLine {
    pub id: String,
    pub role: String,
    pub description: String,
    pub created: String,
    pub expires: String,
    pub created_by: String,
}

/// One binding as the table shows it.
pub struct BindingLine {
    pub subject: String,
    pub role: String,
    pub by: String,
}

#[derive(Template)]
#[template(path = "console/access.html")]
pub struct AccessPage {
    pub frame: Frame,
    pub namespace: String,
    /// The namespace can be chosen (an admin of `*`).
    pub chooses_namespace: bool,
    /// `*` has no policy.
    pub has_policy: bool,
    /// The policy as pretty JSON; empty: none.
    pub policy: String,
    pub policy_locked: bool,
    pub tokens: Vec<TokenLine>,
    pub bindings: Vec<BindingLine>,
}

/// The page that shows a token made, once.
#[derive(Template)]
#[template(path = "console/token_made.html")]
pub struct TokenMadePage {
    pub frame: Frame,
    pub namespace_link: String,
    pub token: String,
    pub role: String,
    pub namespace: String,
}

#[derive(Debug, Default, Deserialize)]
pub struct AccessQuery {
    #[serde(default)]
    namespace: String,
    done: Option<String>,
}

fn access_path(namespace: &str) -> String {
    format!("/ui/access?namespace={}", url_escape(namespace))
}

/// The viewer of a form posted from `namespace`'s access page, once its
/// session and CSRF token are checked, and the page to go back to.
async fn posting(
    state: &GatewayState,
    headers: &HeaderMap,
    csrf: &str,
    namespace: &str,
) -> Result<(Viewer, String), ConsoleError> {
    let back = access_path(namespace);
    let viewer = Viewer::of(state, headers).await;
    viewer.may_write(headers, csrf, &back)?;
    Ok((viewer, back))
}

/// The namespace a viewer's page is about and whether they pick it: the
/// one asked for among those they administer (the first when another is
/// asked for), the one asked for (or `*`) for an admin of `*`; refused
/// below admin.
fn shown_namespace(viewer: &Viewer, asked: &str) -> Result<(String, bool), ConsoleError> {
    let caller = viewer.caller();
    let chosen = namespace_choice::choose(&caller.grants, Role::Admin, asked)?;
    let namespace = chosen.shown().unwrap_or(ALL_NAMESPACES).to_string();
    let scope = Scope::parse("namespace", &namespace)
        .map_err(|p| jetcron_core::api::ApiError::invalid_field("namespace", p.message))?;
    match scope {
        Scope::All => caller.grants.require_everywhere(Role::Admin)?,
        Scope::One(ref one) => caller.grants.require(Role::Admin, one)?,
    }
    Ok((namespace, chosen.picks()))
}

/// `GET /ui/access`.
pub async fn show(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Query(query): Query<AccessQuery>,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::of(&state, &headers).await;
    if viewer.session.is_none() {
        return Err(ConsoleError::SignIn("/ui/access".into()));
    }
    let (namespace, chooses_namespace) = shown_namespace(&viewer, &query.namespace)?;
    let caller = viewer.caller();
    let tokens = tokens::list(&state, &caller)
        .await?
        .tokens
        .into_iter()
        .filter(|t| t.namespace == namespace)
        .map(|t| TokenLine {
            id: t.id,
            role: t.role.to_string(),
            description: t.description,
            created: when_text(&t.created_at),
            expires: t.expires_at.as_deref().map(when_text).unwrap_or_default(),
            created_by: t.created_by,
        })
        .collect();
    let bindings = bindings::list(&state, &caller, &namespace)
        .await?
        .bindings
        .into_iter()
        .map(|b| BindingLine {
            subject: b.binding.subject,
            role: b.binding.role.to_string(),
            by: b.author.map(|a| a.actor).unwrap_or_default(),
        })
        .collect();
    let has_policy = namespace != ALL_NAMESPACES;
    let (policy, policy_locked) = match has_policy {
        true => {
            let reply = policies::get(&state, &caller, &namespace).await?;
            let locked = reply.policy.as_ref().is_some_and(|p| p.locked);
            let text = reply
                .policy
                .and_then(|p| serde_json::to_string_pretty(&p).ok())
                .unwrap_or_default();
            (text, locked)
        }
        false => (String::new(), false),
    };
    let page = AccessPage {
        frame: viewer
            .frame_for(format!("Access to {namespace}"), &namespace)
            .with_done(query.done.as_deref()),
        chooses_namespace,
        has_policy,
        policy,
        policy_locked,
        tokens,
        bindings,
        namespace,
    };
    Ok(render(&page).into_response())
}

#[derive(Debug, Deserialize)]
pub struct TokenForm {
    #[serde(default)]
    csrf: String,
    namespace: String,
    role: String,
    #[serde(default)]
    expires_in: String,
    #[serde(default)]
    description: String,
}

/// `POST /ui/access/tokens`: a token made, shown this once.
pub async fn make_token(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Form(form): Form<TokenForm>,
) -> Result<Response, ConsoleError> {
    let (viewer, _) = posting(&state, &headers, &form.csrf, &form.namespace).await?;
    let expires_in = Some(form.expires_in.trim().to_string()).filter(|e| !e.is_empty());
    let request = CreateToken {
        namespace: form.namespace.clone(),
        role: form.role.clone(),
        expires_in,
        description: form.description,
    };
    let made = tokens::create(&state, &viewer.caller(), request).await?;
    let page = TokenMadePage {
        frame: viewer.frame("Token made"),
        namespace_link: url_escape(&made.record.namespace),
        token: made.token,
        role: made.record.role.to_string(),
        namespace: made.record.namespace,
    };
    Ok(render(&page).into_response())
}

#[derive(Debug, Deserialize)]
pub struct NamespaceForm {
    #[serde(default)]
    csrf: String,
    namespace: String,
}

/// `POST /ui/access/tokens/{id}/revoke`.
pub async fn revoke_token(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<NamespaceForm>,
) -> Result<Response, ConsoleError> {
    let (viewer, back) = posting(&state, &headers, &form.csrf, &form.namespace).await?;
    tokens::revoke(&state, &viewer.caller(), &id).await?;
    Ok(Redirect::to(&format!("{back}&done=revoked")).into_response())
}

#[derive(Debug, Deserialize)]
pub struct BindingForm {
    #[serde(default)]
    csrf: String,
    namespace: String,
    subject: String,
    #[serde(default)]
    role: String,
}

/// `POST /ui/access/bindings`: give a subject a role.
pub async fn set_binding(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Form(form): Form<BindingForm>,
) -> Result<Response, ConsoleError> {
    let (viewer, back) = posting(&state, &headers, &form.csrf, &form.namespace).await?;
    let request = SetBinding { role: form.role };
    bindings::set(
        &state,
        &viewer.caller(),
        &form.namespace,
        form.subject.trim(),
        request,
    )
    .await?;
    Ok(Redirect::to(&format!("{back}&done=saved")).into_response())
}

/// `POST /ui/access/bindings/remove`: take a subject's role away.
pub async fn remove_binding(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Form(form): Form<BindingForm>,
) -> Result<Response, ConsoleError> {
    let (viewer, back) = posting(&state, &headers, &form.csrf, &form.namespace).await?;
    bindings::remove(&state, &viewer.caller(), &form.namespace, &form.subject).await?;
    Ok(Redirect::to(&format!("{back}&done=removed")).into_response())
}

#[derive(Debug, Deserialize)]
pub struct PolicyForm {
    #[serde(default)]
    csrf: String,
    namespace: String,
    #[serde(default)]
    policy: String,
}

/// `POST /ui/access/policy`: set the namespace's policy (JSON).
pub async fn set_policy(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Form(form): Form<PolicyForm>,
) -> Result<Response, ConsoleError> {
    let (viewer, back) = posting(&state, &headers, &form.csrf, &form.namespace).await?;
    policies::put(
        &state,
        &viewer.caller(),
        &form.namespace,
        form.policy.as_bytes(),
    )
    .await?;
    Ok(Redirect::to(&format!("{back}&done=saved")).into_response())
}

/// `POST /ui/access/policy/remove`.
pub async fn remove_policy(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Form(form): Form<NamespaceForm>,
) -> Result<Response, ConsoleError> {
    let (viewer, back) = posting(&state, &headers, &form.csrf, &form.namespace).await?;
    policies::delete(&state, &viewer.caller(), &form.namespace).await?;
    Ok(Redirect::to(&format!("{back}&done=removed")).into_response())
}
