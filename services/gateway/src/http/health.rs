//! Liveness and readiness.
//!
//! `/readyz` is 200 only when NATS is connected, ClickHouse answers and every
//! service of the process has verified its NATS topology. It only glances at
//! ClickHouse ([`crate::sql::reads::Patience::Glance`]): a hung
//! ClickHouse makes it answer 503 within a second, not hang. Before the
//! gateway's own topology is there, [`serve_while_starting`] answers the two
//! probes (503, saying what is awaited) so that an orchestrator sees a live,
//! starting process rather than a closed port.

use std::sync::Arc;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Json;
use jetcron_io::readiness::Readiness;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::GatewayState;

/// The probes served while the gateway starts; [`Starting::stop`] hands the
/// port over to the full router.
pub struct Starting {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Starting {
    /// Stop answering and wait until the port is free for the full router.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Serve `/healthz` (200) and `/readyz` (503 with the services' states) on
/// `listener` until [`Starting::stop`].
pub fn serve_while_starting(
    listener: std::net::TcpListener,
    readiness: Readiness,
) -> anyhow::Result<Starting> {
    listener.set_nonblocking(true).context("gateway listener")?;
    let listener = tokio::net::TcpListener::from_std(listener).context("gateway listener")?;
    let app = axum::Router::new().route("/healthz", get(healthz)).route(
        "/readyz",
        get(move || {
            let readiness = readiness.clone();
            async move {
                let body = json!({
                    "ok": false,
                    "services": readiness.report(),
                });
                (StatusCode::SERVICE_UNAVAILABLE, Json(body))
            }
        }),
    );
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stopped.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "serving probes while starting failed");
        }
    });
    Ok(Starting { stop, task })
}

/// The body of `/readyz` (200 or 503), as the document states it (while
/// the gateway starts, only `ok` and `services`).
#[derive(serde::Serialize, schemars::JsonSchema)]
#[allow(dead_code)]
pub struct ReadinessReport {
    /// Whether the process is ready (then the status is 200).
    ok: bool,
    /// `connected`, or the NATS connection's state.
    #[serde(skip_serializing_if = "Option::is_none")]
    nats: Option<String>,
    /// `ok`, or why ClickHouse did not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    clickhouse: Option<String>,
    /// Run events not yet stored in ClickHouse, when known (`null`: not known).
    #[serde(skip_serializing_if = "Option::is_none")]
    projector_backlog: Option<Option<u64>>,
    /// Each service of the process: `ready` or what it waits for.
    services: std::collections::BTreeMap<String, String>,
}

/// The process answers.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "ok": true }))
}

/// NATS is connected and ClickHouse answers.
pub async fn readyz(State(state): State<Arc<GatewayState>>) -> (StatusCode, Json<Value>) {
    let nats_ok = state.nats.connection_state() == async_nats::connection::State::Connected;
    let clickhouse = state.runs.ping().await;
    let topology_ok = state.readiness.all_ready();
    let ready = nats_ok && clickhouse.is_ok() && topology_ok;
    // How far the projector is behind: grows while ClickHouse is away.
    let backlog = crate::runs::projection::projector_backlog(&state)
        .await
        .ok()
        .flatten();
    let body = json!({
        "ok": ready,
        "projector_backlog": backlog,
        "nats": if nats_ok { "connected".to_string() } else { state.nats.connection_state().to_string() },
        "clickhouse": match &clickhouse { Ok(()) => "ok".to_string(), Err(e) => e.to_string() },
        "services": state.readiness.report(),
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}
