//! Liveness and readiness.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::GatewayState;

/// The process answers.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "ok": true }))
}

/// NATS is connected and ClickHouse answers.
pub async fn readyz(State(state): State<Arc<GatewayState>>) -> (StatusCode, Json<Value>) {
    let nats_ok = state.nats.connection_state() == async_nats::connection::State::Connected;
    let clickhouse = state.runs.ping().await;
    let ready = nats_ok && clickhouse.is_ok();
    // How far the projector is behind: grows while ClickHouse is away.
    let backlog = crate::pools::projector_backlog(&state).await.ok().flatten();
    let body = json!({
        "ok": ready,
        "projector_backlog": backlog,
        "nats": if nats_ok { "connected".to_string() } else { state.nats.connection_state().to_string() },
        "clickhouse": match &clickhouse { Ok(()) => "ok".to_string(), Err(e) => format!("{e:#}") },
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}
