//! HTTP adapters of the alert channel operations ([`crate::channels::store`]):
//! `GET/POST /v1/channels`, `GET/PUT/DELETE /v1/channels/{name}`. Channels
//! are shared by every namespace: anyone who reads may list them (jobs name
//! them), only an admin of every namespace changes them or sees their
//! credentials (and only where reads need a token).

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use jetcron_core::access::Role;

use super::writes::{delete_precondition, precondition, DeleteQuery, LimitedBody};
use super::{query, HttpError, PathResult, QueryResult};
use crate::caller::Caller;
use crate::channels::requests::{
    ChannelDeletedReply, ChannelPutReply, ChannelReply, ChannelsReply, DeleteChannel, GetChannel,
    ListChannels, PutChannel,
};
use crate::GatewayState;

fn name_of(name: PathResult<String>) -> Result<String, HttpError> {
    let axum::extract::Path(name) = name.map_err(super::bad_path)?;
    Ok(name)
}

/// Whether a channel's credentials are shown to `caller`: where reads need
/// a token, to an admin of every namespace (channels are shared by all).
fn shows_credentials(state: &GatewayState, caller: &Caller) -> bool {
    state.http_auth.reads_protected() && caller.grants.allows_everywhere(Role::Admin)
}

/// `GET /v1/channels`.
pub async fn list(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<ChannelsReply>, HttpError> {
    let mut reply = state.channels.list(ListChannels {}).await?;
    if !shows_credentials(&state, &caller) {
        reply.channels = reply.channels.into_iter().map(|c| c.redacted()).collect();
    }
    Ok(Json(reply))
}

/// `GET /v1/channels/{name}`.
pub async fn get_one(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    name: PathResult<String>,
) -> Result<Json<ChannelReply>, HttpError> {
    let mut reply = state
        .channels
        .get(GetChannel {
            name: name_of(name)?,
        })
        .await?;
    if !shows_credentials(&state, &caller) {
        reply.channel = reply.channel.redacted();
    }
    Ok(Json(reply))
}

/// `POST /v1/channels`: create (201) or replace (200), as `channels.put`.
pub async fn create(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    LimitedBody(body): LimitedBody,
) -> Result<(StatusCode, Json<ChannelPutReply>), HttpError> {
    caller.grants.require_everywhere(Role::Admin)?;
    let request = PutChannel {
        definition: body.to_vec(),
        key: None,
        expected_revision: precondition(&headers)?,
    };
    let stored = state.channels.put(request).await?;
    tracing::info!(channel = %stored.channel.name(), revision = stored.revision, "channel stored over HTTP");
    let status = if stored.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(stored)))
}

/// `PUT /v1/channels/{name}`; `If-Match` / `If-None-Match: *` for compare-and-swap.
pub async fn replace(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    name: PathResult<String>,
    headers: HeaderMap,
    LimitedBody(body): LimitedBody,
) -> Result<Json<ChannelPutReply>, HttpError> {
    caller.grants.require_everywhere(Role::Admin)?;
    let request = PutChannel {
        definition: body.to_vec(),
        key: Some(name_of(name)?),
        expected_revision: precondition(&headers)?,
    };
    Ok(Json(state.channels.put(request).await?))
}

/// `DELETE /v1/channels/{name}`.
pub async fn delete(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    name: PathResult<String>,
    headers: HeaderMap,
    q: QueryResult<DeleteQuery>,
) -> Result<Json<ChannelDeletedReply>, HttpError> {
    caller.grants.require_everywhere(Role::Admin)?;
    let expected_revision = delete_precondition(query(q)?, &headers)?;
    let request = DeleteChannel {
        name: name_of(name)?,
        expected_revision,
    };
    Ok(Json(state.channels.delete(request).await?))
}
