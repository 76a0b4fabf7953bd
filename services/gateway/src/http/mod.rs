//! The HTTP API (axum): reads from the bucket and ClickHouse, the job writes
//! mirroring the NATS endpoints, and the run controls (kill, completion
//! reports). Every failure is an [`ApiError`] rendered with the status of the
//! shared error table.
//!
//! The routes are one table ([`routes`], each entry an [`ApiRoute`]): the
//! router is built from it and so is `/openapi.json` ([`openapi`]), so the
//! document cannot list a route the gateway does not serve, nor miss one;
//! each entry also says who may call it ([`auth::Access`]), what it reads
//! (path captures and headers typed in `params`, queries and bodies by the
//! handlers' own types) and what it may answer.

pub mod auth;
mod bindings;
mod channels;
mod control;
pub mod health;
mod jobs;
pub mod openapi;
mod params;
mod policies;
mod route;
mod routes;
mod runs;
mod schedules;
mod tokens;
mod writes;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use jetcron_core::api::{ApiError, ErrorCode};

use crate::GatewayState;
pub use route::{ApiRoute, BodySchema, RequestBody, Unavailable};
pub use routes::routes;

/// The router of [`routes`], each route behind its access check.
pub fn router(state: Arc<GatewayState>) -> Router {
    let mut router = Router::new();
    for route in routes() {
        let guarded = route
            .handler
            .route_layer(axum::middleware::from_fn_with_state(
                (state.clone(), route.access),
                auth::require,
            ));
        router = router.route(route.path, guarded);
    }
    router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(track))
        .with_state(state)
}

/// `jetcron_http_requests_total{route,method,status}` and
/// `jetcron_http_request_duration_seconds{route}`; the route is the matched
/// pattern (`/v1/jobs/{id}`), so ids do not multiply the series.
async fn track(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().as_str().to_string();
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::histogram!("jetcron_http_request_duration_seconds", "route" => route.clone())
        .record(started.elapsed().as_secs_f64());
    metrics::counter!("jetcron_http_requests_total", "route" => route, "method" => method, "status" => status)
        .increment(1);
    response
}

/// An [`ApiError`] as an HTTP response.
#[derive(Debug)]
pub struct HttpError(pub ApiError);

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::warn!(error = %self.0.message, "request failed on a dependency");
        }
        (status, Json(self.0.to_reply())).into_response()
    }
}

impl From<ApiError> for HttpError {
    fn from(e: ApiError) -> Self {
        HttpError(e)
    }
}

/// A dependency failed: answer 503 (logged as every 5xx is).
pub fn unavailable(e: anyhow::Error) -> HttpError {
    HttpError(ApiError::unavailable(e))
}

/// A query string as axum decoded it, or why it could not.
pub type QueryResult<T> = Result<axum::extract::Query<T>, axum::extract::rejection::QueryRejection>;
/// A path parameter as axum decoded it, or why it could not.
pub type PathResult<T> = Result<axum::extract::Path<T>, axum::extract::rejection::PathRejection>;

/// The query of a request, or a 400 naming what is wrong with it.
pub fn query<T>(q: QueryResult<T>) -> Result<T, HttpError> {
    q.map(|axum::extract::Query(q)| q)
        .map_err(|e| HttpError(ApiError::malformed(e.body_text())))
}

/// A typed answer as a JSON body whose objects list their keys in
/// alphabetical order: the bytes the API's reads have always answered, as
/// they were encoded through `serde_json::Value`, which keeps its keys
/// sorted (the workspace does not enable serde_json's `preserve_order`).
/// `Json<T>` would list them in field order instead, changing the bytes of
/// every such answer; the NATS service encodes its replies the same way.
#[derive(Debug)]
pub struct SortedJson<T>(pub T);

impl<T: serde::Serialize> IntoResponse for SortedJson<T> {
    fn into_response(self) -> Response {
        match serde_json::to_value(&self.0) {
            Ok(answer) => Json(answer).into_response(),
            Err(e) => HttpError(ApiError::internal("encode the answer", e)).into_response(),
        }
    }
}

async fn not_found() -> HttpError {
    HttpError(ApiError::new(
        ErrorCode::NotFound,
        "no such route (GET /openapi.json lists them)",
    ))
}

async fn method_not_allowed() -> Response {
    let error = ApiError::malformed(
        "method not allowed on this route (GET /openapi.json lists the routes)",
    );
    (StatusCode::METHOD_NOT_ALLOWED, Json(error.to_reply())).into_response()
}

/// A path segment axum could not decode (e.g. `%ff`), as a JSON 400.
pub fn bad_path(e: axum::extract::rejection::PathRejection) -> HttpError {
    HttpError(ApiError::malformed(e.body_text()))
}

/// `Ok` when `caller` may read job `id` ([`crate::caller::Caller::may_view`]).
pub(crate) fn may_view(caller: &crate::caller::Caller, id: &str) -> Result<(), HttpError> {
    caller.may_view(id).map_err(HttpError)
}
