//! The HTTP API (axum). Reads, plus the run controls (kill, completion
//! reports); job writes go through the NATS service in this release. Every
//! failure is an [`ApiError`] rendered with the status of the shared error
//! table.

mod control;
mod health;
mod jobs;
mod runs;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use jetcron_core::api::{ApiError, ErrorCode};

use crate::GatewayState;

/// Every route of the gateway.
pub fn router(state: Arc<GatewayState>) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/v1/jobs", get(jobs::list))
        .route("/v1/jobs/{id}", get(jobs::get_one))
        .route("/v1/jobs/{id}/runs", get(runs::of_job))
        .route("/v1/runs/{run_id}", get(runs::get_one))
        .route("/v1/runs/{run_id}/kill", post(control::kill))
        .route("/v1/runs/{run_id}/complete", post(control::complete))
        .route("/v1/pools", get(control::pools))
        .route("/metrics", get(control::metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// An [`ApiError`] as an HTTP response.
pub struct HttpError(pub ApiError);

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.0.to_reply())).into_response()
    }
}

impl From<ApiError> for HttpError {
    fn from(e: ApiError) -> Self {
        HttpError(e)
    }
}

/// A dependency failed: log the chain, answer 503.
pub fn unavailable(e: anyhow::Error) -> HttpError {
    tracing::warn!(error = %format!("{e:#}"), "request failed on a dependency");
    HttpError(ApiError::new(ErrorCode::Unavailable, format!("{e:#}")))
}

async fn not_found() -> HttpError {
    HttpError(ApiError::new(ErrorCode::NotFound, "no such route"))
}

async fn method_not_allowed() -> Response {
    let error = ApiError::new(
        ErrorCode::InvalidRequest,
        "method not allowed: job writes go through the NATS API (jetcron.api.jobs.*) in this release",
    );
    (StatusCode::METHOD_NOT_ALLOWED, Json(error.to_reply())).into_response()
}

/// A path segment axum could not decode (e.g. `%ff`), as a JSON 400.
pub fn bad_path(e: axum::extract::rejection::PathRejection) -> HttpError {
    HttpError(ApiError::new(ErrorCode::InvalidRequest, e.body_text()))
}
