//! HTTP adapters of the policy operations ([`crate::policies`]):
//! `GET/PUT/DELETE /v1/namespaces/{namespace}/policy`.

use std::sync::Arc;

use axum::extract::{Extension, Path, State};
use axum::Json;

use super::writes::LimitedBody;
use super::{HttpError, PathResult};
use crate::caller::Caller;
use crate::policies::{self, PolicyRemovedReply, PolicyReply, PolicySetReply};
use crate::GatewayState;

fn namespace_of(namespace: PathResult<String>) -> Result<String, HttpError> {
    let Path(namespace) = namespace.map_err(super::bad_path)?;
    Ok(namespace)
}

/// `GET /v1/namespaces/{namespace}/policy`.
pub async fn get_one(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    namespace: PathResult<String>,
) -> Result<Json<PolicyReply>, HttpError> {
    let namespace = namespace_of(namespace)?;
    Ok(Json(policies::get(&state, &caller, &namespace).await?))
}

/// `PUT /v1/namespaces/{namespace}/policy` with the policy as the body.
pub async fn put(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    namespace: PathResult<String>,
    LimitedBody(body): LimitedBody,
) -> Result<Json<PolicySetReply>, HttpError> {
    let namespace = namespace_of(namespace)?;
    Ok(Json(
        policies::put(&state, &caller, &namespace, &body).await?,
    ))
}

/// `DELETE /v1/namespaces/{namespace}/policy`.
pub async fn delete(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    namespace: PathResult<String>,
) -> Result<Json<PolicyRemovedReply>, HttpError> {
    let namespace = namespace_of(namespace)?;
    Ok(Json(policies::delete(&state, &caller, &namespace).await?))
}
