//! The `jetcron` NATS micro service (`nats micro ls` finds it).
//!
//! Endpoint `jetcron.api.jobs.put`: body = a job definition; reply =
//! `{"ok":true,"job":{...},"revision":N}` or `{"ok":false,"error":{...}}`
//! with `Nats-Service-Error` / `Nats-Service-Error-Code` set. A request without
//! a reply subject (`nats pub`) is applied all the same; a refused one is
//! logged.

use async_nats::service::{ServiceExt as _, NATS_SERVICE_ERROR, NATS_SERVICE_ERROR_CODE};
use async_nats::HeaderMap;
use futures::StreamExt as _;
use jetcron_core::api::ApiError;
use jetcron_core::subjects;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::job_store::JobStore;

/// Serve the API until `shutdown`.
pub async fn serve(
    client: async_nats::Client,
    jobs: JobStore,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let service = client
        .service_builder()
        .description("jetcron job scheduler API")
        .start(subjects::API_SERVICE, env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| anyhow::anyhow!("start NATS service {}: {e}", subjects::API_SERVICE))?;
    let group = service.group(subjects::API_JOBS_GROUP);
    let mut put = group
        .endpoint("put")
        .await
        .map_err(|e| anyhow::anyhow!("add endpoint {}: {e}", subjects::API_JOBS_PUT))?;
    info!(subject = subjects::API_JOBS_PUT, "NATS API serving");
    loop {
        let request = tokio::select! {
            _ = shutdown.cancelled() => break,
            request = put.next() => match request {
                Some(r) => r,
                None => break,
            },
        };
        let reply = match jobs.put(&request.message.payload).await {
            Ok((job, revision)) => {
                info!(job_id = %job.id, revision, "job stored");
                Ok(serde_json::json!({ "ok": true, "job": job, "revision": revision }))
            }
            Err(error) => {
                warn!(error = %error, reply = request.message.reply.is_some(), "job put refused");
                Err(error)
            }
        };
        if request.message.reply.is_none() {
            continue;
        }
        let (body, headers) = match reply {
            Ok(body) => (body, HeaderMap::new()),
            Err(error) => {
                let mut headers = HeaderMap::new();
                headers.insert(NATS_SERVICE_ERROR, error.message.as_str());
                headers.insert(
                    NATS_SERVICE_ERROR_CODE,
                    error.code.http_status().to_string().as_str(),
                );
                (error.to_reply(), headers)
            }
        };
        if let Err(e) = request
            .respond_with_headers(Ok(body.to_string().into()), headers)
            .await
        {
            warn!(error = %e, "cannot send API reply");
        }
    }
    if let Err(e) = service.stop().await {
        warn!(error = %e, "cannot stop NATS service cleanly");
    }
    Ok(())
}

/// Used by tests and docs: the error a reply carries, if any.
pub fn reply_error(body: &[u8]) -> Option<ApiError> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    serde_json::from_value(value.get("error")?.clone()).ok()
}
