//! The HTTP API (axum): reads from the bucket and ClickHouse, the job writes
//! mirroring the NATS endpoints, and the run controls (kill, completion
//! reports). Every failure is an [`ApiError`] rendered with the status of the
//! shared error table.
//!
//! The routes are one table ([`routes`]): the router is built from it and so
//! is `/openapi.json` ([`openapi`]), so the document cannot list a route the
//! gateway does not serve, nor miss one; each entry also says who may call it
//! ([`auth::Access`]).

pub mod auth;
mod channels;
mod control;
pub mod health;
mod jobs;
pub mod openapi;
pub(crate) mod redact;
mod runs;
mod schedules;
mod writes;

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put, MethodRouter};
use axum::{Json, Router};
use jetcron_core::api::{ApiError, ErrorCode};
use schemars::{JsonSchema, Schema, SchemaGenerator};

use crate::GatewayState;
use auth::Access;

/// A request body's schema, made by the generator the document uses.
pub type BodySchema = fn(&mut SchemaGenerator) -> Schema;

/// The schema of `T` as a request body.
fn body<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// One route: how to serve it and how to describe it.
pub struct ApiRoute {
    pub method: Method,
    pub path: &'static str,
    pub access: Access,
    pub summary: &'static str,
    /// Query parameters: (name, description).
    pub query: &'static [(&'static str, &'static str)],
    /// The JSON body it reads, if any, and what it is.
    pub body: Option<(BodySchema, &'static str)>,
    /// Status of a successful answer.
    pub ok_status: u16,
    /// The schema of a successful answer, where the operation has a type.
    pub answer: Option<BodySchema>,
    /// Whether it needs an answer from ClickHouse, and so may answer
    /// `503 history_unavailable` ([`crate::clickhouse_reads`]).
    pub reads_history: bool,
    handler: MethodRouter<Arc<GatewayState>>,
}

impl ApiRoute {
    /// The successful answer is a `T` (the operation's reply type).
    fn answers<T: JsonSchema>(mut self) -> Self {
        self.answer = Some(body::<T>);
        self
    }

    /// It needs an answer from ClickHouse.
    fn reads_history(mut self) -> Self {
        self.reads_history = true;
        self
    }
}

#[allow(clippy::too_many_arguments)]
fn route(
    method: Method,
    path: &'static str,
    access: Access,
    summary: &'static str,
    query: &'static [(&'static str, &'static str)],
    body: Option<(BodySchema, &'static str)>,
    ok_status: u16,
    handler: MethodRouter<Arc<GatewayState>>,
) -> ApiRoute {
    ApiRoute {
        method,
        path,
        access,
        summary,
        query,
        body,
        ok_status,
        answer: None,
        reads_history: false,
        handler,
    }
}

const RUNS_LIMIT: &[(&str, &str)] = &[("limit", "page size, 1 to 500 (default 50)")];

/// Every route of the gateway.
pub fn routes() -> Vec<ApiRoute> {
    use jetcron_core::control::Completion;
    use jetcron_core::job::JobSpec;
    use Access::{Public, Read, Write};
    vec![
        route(Method::GET, "/healthz", Public, "Liveness: the process answers", &[], None, 200, get(health::healthz)),
        route(Method::GET, "/readyz", Public, "Readiness: NATS and ClickHouse reachable", &[], None, 200, get(health::readyz)),
        route(Method::GET, "/metrics", Public, "Prometheus metrics (pool queues)", &[], None, 200, get(control::metrics)),
        route(Method::GET, "/openapi.json", Public, "This document", &[], None, 200, get(openapi::serve)),
        route(Method::GET, "/v1/jobs", Read, "List jobs (as jetcron.api.jobs.list)", &[("labels", "label selector: key=value pairs separated by commas")], None, 200, get(jobs::list)).answers::<crate::job_requests::JobsReply>(),
        route(Method::POST, "/v1/jobs", Write, "Create (201) or replace (200) a job (as jetcron.api.jobs.put)", &[], Some((body::<JobSpec>, "a job definition; a top-level expected_revision makes it a compare-and-swap (0: create only)")), 201, post(writes::create)).answers::<crate::job_store::PutReply>(),
        route(Method::POST, "/v1/jobs:pause", Write, "Pause every job matching a label selector", &[], Some((body::<LabelSelector>, "the selector")), 200, post(writes::pause_selected)).answers::<crate::job_requests::PausedReply>(),
        route(Method::POST, "/v1/jobs:resume", Write, "Resume every job matching a label selector", &[], Some((body::<LabelSelector>, "the selector")), 200, post(writes::resume_selected)).answers::<crate::job_requests::PausedReply>(),
        route(Method::GET, "/v1/jobs/{id}", Read, "A job: definition, next fire times (for a paused job: those a resume would run), last run", &[("next", "how many next fires, 1 to 1000 (default 5)")], None, 200, get(jobs::get_one)).answers::<crate::read_requests::JobDetail>(),
        route(Method::PUT, "/v1/jobs/{id}", Write, "Create or replace job {id}; If-Match: <revision> or If-None-Match: * for compare-and-swap", &[], Some((body::<JobSpec>, "a job definition; its id, if given, must be {id}")), 200, put(writes::replace)).answers::<crate::job_store::PutReply>(),
        route(Method::DELETE, "/v1/jobs/{id}", Write, "Delete job {id} (its history stays)", &[("expected_revision", "delete only if this is still the current revision")], None, 200, delete(writes::delete)).answers::<crate::job_requests::DeletedReply>(),
        route(Method::GET, "/v1/jobs/{id}/history", Read, "Every kept revision of job {id} and its recent rejections", &[], None, 200, get(jobs::history)).answers::<crate::read_requests::JobHistory>(),
        route(Method::GET, "/v1/jobs/{id}/runs", Read, "Runs of job {id}, newest first", RUNS_LIMIT, None, 200, get(runs::of_job)).answers::<crate::read_requests::JobRunsReply>().reads_history(),
        route(Method::POST, "/v1/jobs/{id}/pause", Write, "Pause job {id}", &[], None, 200, post(writes::pause)).answers::<crate::job_requests::PausedReply>(),
        route(Method::POST, "/v1/jobs/{id}/resume", Write, "Resume job {id}", &[], None, 200, post(writes::resume)).answers::<crate::job_requests::PausedReply>(),
        route(Method::POST, "/v1/jobs/{id}/trigger", Write, "Run job {id} now (a manual run)", &[], None, 202, post(writes::trigger)).answers::<crate::manual_runs::TriggeredReply>(),
        route(Method::POST, "/v1/jobs/{id}/backfill", Write, "Run the scheduled times of job {id} in a past range", &[], Some((body::<BackfillBody>, "the range")), 202, post(writes::backfill)).answers::<crate::manual_runs::BackfilledReply>().reads_history(),
        route(Method::GET, "/v1/rejections", Read, "Definitions that were not applied (job.rejected)", &[("job", "only those naming this job id"), ("limit", "page size, 1 to 500 (default 50)")], None, 200, get(jobs::rejections)).answers::<crate::read_requests::RejectionsReply>().reads_history(),
        route(Method::GET, "/v1/runs", Read, "Runs across jobs, newest first, with filters and a cursor", &[("job", "job id"), ("status", "statuses, comma separated"), ("pool", "pool"), ("from", "RFC 3339, scheduled time (default: to − 7 days)"), ("to", "RFC 3339, scheduled time (default: now); at most 92 days after from"), ("q", "text the error contains (case-insensitive)"), ("cursor", "next_cursor of the previous page"), ("limit", "page size, 1 to 500 (default 50)")], None, 200, get(runs::list)).answers::<crate::read_requests::RunsReply>().reads_history(),
        route(Method::GET, "/v1/stats", Read, "Per job: runs by status, success rate, fire lag and duration percentiles, missed fires", &[("job", "one job"), ("from", "RFC 3339 (default: to − 24h)"), ("to", "RFC 3339 (default: now); at most 31 days after from")], None, 200, get(runs::stats)).answers::<crate::read_requests::StatsReply>().reads_history(),
        route(Method::GET, "/v1/runs/{run_id}", Read, "A run with its event timeline and attempts", &[], None, 200, get(runs::get_one)).answers::<crate::read_requests::RunReply>().reads_history(),
        route(Method::POST, "/v1/runs/{run_id}/kill", Write, "Stop run {run_id} wherever it runs (as jetcron.api.runs.kill)", &[], Some((body::<control::KillBody>, "optional reason")), 200, post(control::kill)).answers::<crate::run_control::KilledReply>(),
        route(Method::POST, "/v1/runs/{run_id}/complete", Write, "Report the result of an asynchronous target", &[], Some((body::<Completion>, "the result")), 202, post(control::complete)),
        route(Method::GET, "/v1/schedules/preview", Read, "The next fires of a schedule line, with wall times, DST notes and the line in English (as jetcron.api.schedules.preview)", &[("schedule", "the schedule line, as in a job"), ("timezone", "IANA zone (default UTC)"), ("count", "fires, 1 to 1000 (default 10)"), ("from", "RFC 3339; fires after it (default now)")], None, 200, get(schedules::preview)).answers::<crate::schedule_requests::PreviewReply>(),
        route(Method::GET, "/v1/channels", Read, "Alert channels (as jetcron.api.channels.list); credentials hidden unless reads are protected", &[], None, 200, get(channels::list)).answers::<crate::channel_requests::ChannelsReply>(),
        route(Method::POST, "/v1/channels", Write, "Create (201) or replace (200) an alert channel (as jetcron.api.channels.put)", &[], Some((body::<jetcron_core::channel::Channel>, "a channel definition")), 201, post(channels::create)).answers::<crate::channel_requests::ChannelPutReply>(),
        route(Method::GET, "/v1/channels/{name}", Read, "An alert channel", &[], None, 200, get(channels::get_one)).answers::<crate::channel_requests::ChannelReply>(),
        route(Method::PUT, "/v1/channels/{name}", Write, "Create or replace channel {name}; If-Match: <revision> or If-None-Match: * for compare-and-swap", &[], Some((body::<jetcron_core::channel::Channel>, "a channel definition; its name, if given, must be {name}")), 200, put(channels::replace)).answers::<crate::channel_requests::ChannelPutReply>(),
        route(Method::DELETE, "/v1/channels/{name}", Write, "Delete channel {name} (its history stays)", &[("expected_revision", "delete only if this is still the current revision")], None, 200, delete(channels::delete)).answers::<crate::channel_requests::ChannelDeletedReply>(),
        route(Method::GET, "/v1/pools", Read, "Pools: queued due events and consumers", &[], None, 200, get(control::pools)),
    ]
}

/// Body of the selector routes (documentation of `jobs.pause`'s selector form).
#[derive(JsonSchema)]
#[allow(dead_code)]
struct LabelSelector {
    /// Every label a job must carry to be selected.
    labels: std::collections::BTreeMap<String, String>,
}

/// Body of `POST /v1/jobs/{id}/backfill`.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct BackfillBody {
    /// RFC 3339 start of the range (inclusive).
    from: String,
    /// RFC 3339 end of the range (inclusive, not in the future).
    to: String,
}

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

/// A typed answer as the JSON body of a reply.
pub fn encoded<T: serde::Serialize>(answer: &T) -> Result<Json<serde_json::Value>, HttpError> {
    serde_json::to_value(answer)
        .map(Json)
        .map_err(|e| HttpError(ApiError::internal("encode the answer", e)))
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
