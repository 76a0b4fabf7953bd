//! `--metrics-addr`: `/metrics` for processes without the gateway (a ticker,
//! executor or projector on its own). The gateway serves the same registry on
//! its own `/metrics`.

use std::net::SocketAddr;

use anyhow::Context as _;
use axum::http::header;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

/// Serve the registry's text on `addr` until `shutdown`.
pub async fn serve(addr: SocketAddr, shutdown: CancellationToken) -> anyhow::Result<()> {
    jetcron_core::prometheus::install()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("bind metrics address {addr}"))?;
    let app = axum::Router::new().route(
        "/metrics",
        get(|| async {
            (
                [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                jetcron_core::prometheus::render(),
            )
        }),
    );
    tracing::info!(%addr, "metrics listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .context("serve metrics")
}
