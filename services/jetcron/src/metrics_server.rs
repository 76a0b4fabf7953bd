//! `--metrics-addr`: `/metrics`, `/healthz` and `/readyz` for processes
//! without the gateway (a ticker, executor or projector on its own). The
//! gateway serves the same registry and readiness on its own HTTP address.
//! `/readyz` is 200 once every service of the process has verified its NATS
//! topology, 503 with what each one waits for before.

use std::net::SocketAddr;

use anyhow::Context as _;
use axum::http::{header, StatusCode};
use axum::routing::get;
use axum::Json;
use jetcron_io::readiness::Readiness;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Serve the registry's text and the probes on `addr` until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    jetcron_io::prometheus::install()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("bind metrics address {addr}"))?;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    jetcron_io::prometheus::render(),
                )
            }),
        )
        .route("/healthz", get(|| async { Json(json!({ "ok": true })) }))
        .route(
            "/readyz",
            get(move || {
                let readiness = readiness.clone();
                async move {
                    let ready = readiness.all_ready();
                    let services = readiness.report();
                    let status = if ready {
                        StatusCode::OK
                    } else {
                        StatusCode::SERVICE_UNAVAILABLE
                    };
                    (status, Json(json!({ "ok": ready, "services": services })))
                }
            }),
        );
    tracing::info!(%addr, "metrics listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .context("serve metrics")
}
