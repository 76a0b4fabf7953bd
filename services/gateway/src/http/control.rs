//! `POST /v1/runs/{run_id}/kill`, `POST /v1/runs/{run_id}/complete`,
//! `GET /v1/pools` and `GET /metrics` (pool gauges).

use std::sync::Arc;

use axum::extract::{Extension, Path, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use jetcron_core::api::ApiError;
use serde::Deserialize;

use super::writes::LimitedBody;
use super::{unavailable, HttpError, SortedJson};
use crate::caller::Caller;
use crate::runs::control::{self as run_control, CompletedReply};
use crate::runs::pools::{self, PoolsReply};
use crate::runs::projection;
use crate::GatewayState;

/// Body of `POST /v1/runs/{run_id}/kill` (may be empty).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KillBody {
    /// Recorded in the `killed` event; at most 1024 bytes.
    #[schemars(length(max = jetcron_core::control::MAX_REASON_BYTES), extend("format" = jetcron_core::job::patterns::bytes_format(0, jetcron_core::control::MAX_REASON_BYTES)))]
    reason: Option<String>,
}

pub async fn kill(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    run_id: Result<Path<String>, axum::extract::rejection::PathRejection>,
    LimitedBody(body): LimitedBody,
) -> Result<Json<crate::runs::control::KilledReply>, HttpError> {
    let Path(run_id) = run_id.map_err(super::bad_path)?;
    let request: KillBody = if body.iter().all(u8::is_ascii_whitespace) {
        KillBody::default()
    } else {
        crate::request_body::parse_body(&body)?
    };
    let request = jetcron_core::control::KillRequest {
        run_id,
        reason: request.reason,
    };
    Ok(Json(run_control::kill(&state, &caller, request).await?))
}

pub async fn complete(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    run_id: Result<Path<String>, axum::extract::rejection::PathRejection>,
    LimitedBody(body): LimitedBody,
) -> Result<(StatusCode, Json<CompletedReply>), HttpError> {
    let Path(run_id) = run_id.map_err(super::bad_path)?;
    let reply = run_control::complete(&state, &caller, &run_id, &body).await?;
    Ok((StatusCode::ACCEPTED, Json(reply)))
}

pub async fn pools(
    State(state): State<Arc<GatewayState>>,
) -> Result<SortedJson<PoolsReply>, HttpError> {
    let pools = pools::pools(&state).await.map_err(unavailable)?;
    Ok(SortedJson(PoolsReply { pools }))
}

pub async fn metrics(
    State(state): State<Arc<GatewayState>>,
) -> Result<impl IntoResponse, HttpError> {
    let pools = pools::pools(&state)
        .await
        .map_err(|e| HttpError(ApiError::unavailable(e)))?;
    // What this process recorded (every service it runs), then the gauges
    // read from NATS and ClickHouse at scrape time.
    let mut text = jetcron_io::prometheus::render();
    text.push_str(&pools::render_metrics(&pools));
    // A projector in this process reports its own backlog; one series only.
    let recorded = text.contains("\njetcron_projector_backlog ");
    let observed = match recorded {
        true => None,
        false => projection::projector_backlog(&state).await.ok().flatten(),
    };
    if let Some(backlog) = observed {
        text.push_str(&format!(
            "# HELP jetcron_projector_backlog Run events not yet stored in ClickHouse.\n\
             # TYPE jetcron_projector_backlog gauge\njetcron_projector_backlog {backlog}\n"
        ));
    }
    // Missed fires need ClickHouse; without it the pool gauges still answer.
    match state.missed.render(&state).await {
        Ok(missed) => text.push_str(&missed),
        Err(e) => tracing::warn!(error = %format!("{e:#}"), "missed fires gauge unavailable"),
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text))
}
