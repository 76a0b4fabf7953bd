//! HTTP adapters of the role binding operations ([`crate::bindings`]):
//! `GET /v1/namespaces/{namespace}/bindings`,
//! `PUT/DELETE /v1/namespaces/{namespace}/bindings/{subject}`.

use std::sync::Arc;

use axum::extract::{Extension, Path, State};
use axum::Json;

use super::writes::LimitedBody;
use super::{HttpError, PathResult};
use crate::bindings::{self, BindingRemovedReply, BindingSetReply, BindingsReply};
use crate::caller::Caller;
use crate::request_body::parse_body;
use crate::GatewayState;

/// `GET /v1/namespaces/{namespace}/bindings`.
pub async fn list(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    namespace: PathResult<String>,
) -> Result<Json<BindingsReply>, HttpError> {
    let Path(namespace) = namespace.map_err(super::bad_path)?;
    Ok(Json(bindings::list(&state, &caller, &namespace).await?))
}

/// `PUT /v1/namespaces/{namespace}/bindings/{subject}` with `{"role"}`.
pub async fn set(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    path: PathResult<(String, String)>,
    LimitedBody(body): LimitedBody,
) -> Result<Json<BindingSetReply>, HttpError> {
    let Path((namespace, subject)) = path.map_err(super::bad_path)?;
    let request = parse_body(&body)?;
    Ok(Json(
        bindings::set(&state, &caller, &namespace, &subject, request).await?,
    ))
}

/// `DELETE /v1/namespaces/{namespace}/bindings/{subject}`.
pub async fn remove(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    path: PathResult<(String, String)>,
) -> Result<Json<BindingRemovedReply>, HttpError> {
    let Path((namespace, subject)) = path.map_err(super::bad_path)?;
    Ok(Json(
        bindings::remove(&state, &caller, &namespace, &subject).await?,
    ))
}
