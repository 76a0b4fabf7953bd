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
mod bindings;
mod channels;
mod control;
pub mod health;
mod jobs;
pub mod openapi;
mod policies;
mod runs;
mod schedules;
mod tokens;
mod writes;

use std::sync::Arc;

use axum::handler::Handler;
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
    /// `503 history_unavailable` ([`crate::sql::reads`]).
    pub reads_history: bool,
    handler: MethodRouter<Arc<GatewayState>>,
}

impl ApiRoute {
    /// `GET path`, open to `access`: answers 200, takes no query parameters
    /// and no body until told otherwise.
    fn get<H: Handler<T, Arc<GatewayState>>, T: 'static>(
        path: &'static str,
        access: Access,
        summary: &'static str,
        handler: H,
    ) -> Self {
        Self::new(Method::GET, path, access, summary, get(handler))
    }

    /// `POST path` (see [`ApiRoute::get`]).
    fn post<H: Handler<T, Arc<GatewayState>>, T: 'static>(
        path: &'static str,
        access: Access,
        summary: &'static str,
        handler: H,
    ) -> Self {
        Self::new(Method::POST, path, access, summary, post(handler))
    }

    /// `PUT path` (see [`ApiRoute::get`]).
    fn put<H: Handler<T, Arc<GatewayState>>, T: 'static>(
        path: &'static str,
        access: Access,
        summary: &'static str,
        handler: H,
    ) -> Self {
        Self::new(Method::PUT, path, access, summary, put(handler))
    }

    /// `DELETE path` (see [`ApiRoute::get`]).
    fn delete<H: Handler<T, Arc<GatewayState>>, T: 'static>(
        path: &'static str,
        access: Access,
        summary: &'static str,
        handler: H,
    ) -> Self {
        Self::new(Method::DELETE, path, access, summary, delete(handler))
    }

    fn new(
        method: Method,
        path: &'static str,
        access: Access,
        summary: &'static str,
        handler: MethodRouter<Arc<GatewayState>>,
    ) -> Self {
        Self {
            method,
            path,
            access,
            summary,
            query: &[],
            body: None,
            ok_status: 200,
            answer: None,
            reads_history: false,
            handler,
        }
    }

    /// It takes these query parameters: (name, description).
    fn query(mut self, parameters: &'static [(&'static str, &'static str)]) -> Self {
        self.query = parameters;
        self
    }

    /// It reads a JSON body that is a `T`, described as `description`.
    fn body<T: JsonSchema>(mut self, description: &'static str) -> Self {
        self.body = Some((body::<T>, description));
        self
    }

    /// A successful answer has this status (not 200).
    fn status(mut self, ok_status: u16) -> Self {
        self.ok_status = ok_status;
        self
    }

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

const RUNS_LIMIT: &[(&str, &str)] = &[("limit", "page size, 1 to 500 (default 50)")];

/// Every route of the gateway. The tables below keep one route a line
/// (`rustfmt::skip`), so that they read down like the API's index.
pub fn routes() -> Vec<ApiRoute> {
    let mut routes = service_routes();
    routes.extend(job_routes());
    routes.extend(job_action_routes());
    routes.extend(run_routes());
    routes.extend(channel_routes());
    routes.extend(token_routes());
    routes.extend(policy_routes());
    routes.extend(binding_routes());
    routes
}

/// Scoped API tokens, made and revoked by a namespace's admins.
#[rustfmt::skip]
fn token_routes() -> Vec<ApiRoute> {
    use crate::tokens::requests::{CreateToken, CreatedToken, RevokedReply, TokensReply};
    use Access::Write;
    vec![
        ApiRoute::post("/v1/tokens", Write, "Make a token with a role in a namespace (by an admin of it); the answer shows it once", tokens::create).body::<CreateToken>("namespace, role, expires_in, description").status(201).answers::<CreatedToken>(),
        ApiRoute::get("/v1/tokens", Write, "The tokens of the namespaces the caller administers, without secrets", tokens::list).answers::<TokensReply>(),
        ApiRoute::delete("/v1/tokens/{id}", Write, "Revoke token {id}: every later request with it is refused", tokens::revoke).answers::<RevokedReply>(),
    ]
}

/// The namespaces' target policies: read by a namespace's viewers, set
/// by its admins (by an admin of `*` when locked).
#[rustfmt::skip]
fn policy_routes() -> Vec<ApiRoute> {
    use crate::policies::{PolicyRemovedReply, PolicyReply, PolicySetReply};
    use jetcron_core::policy::Policy;
    use Access::{Read, Write};
    vec![
        ApiRoute::get("/v1/namespaces/{namespace}/policy", Read, "The target policy of a namespace: which subjects, URL prefixes, pools, shell and chains its jobs may use (null: no limit)", policies::get_one).answers::<PolicyReply>(),
        ApiRoute::put("/v1/namespaces/{namespace}/policy", Write, "Set a namespace's target policy (an admin of it; of * when locked); the answer lists the jobs it refuses", policies::put).body::<Policy>("the policy; an absent list does not limit its kind").answers::<PolicySetReply>(),
        ApiRoute::delete("/v1/namespaces/{namespace}/policy", Write, "Remove a namespace's target policy: its jobs may use any target", policies::delete).answers::<PolicyRemovedReply>(),
    ]
}

/// Role bindings: who (a person or group) holds which role in a
/// namespace; managed by its admins (`*`: by an admin of `*`).
#[rustfmt::skip]
fn binding_routes() -> Vec<ApiRoute> {
    use crate::bindings::{BindingRemovedReply, BindingSetReply, BindingsReply, SetBinding};
    use Access::Write;
    vec![
        ApiRoute::get("/v1/namespaces/{namespace}/bindings", Write, "Who holds which role in a namespace (* : in every one), each with who gave it (an admin of it)", bindings::list).answers::<BindingsReply>(),
        ApiRoute::put("/v1/namespaces/{namespace}/bindings/{subject}", Write, "Give user:<name> or group:<name> a role in a namespace (an admin of it)", bindings::set).body::<SetBinding>("the role").answers::<BindingSetReply>(),
        ApiRoute::delete("/v1/namespaces/{namespace}/bindings/{subject}", Write, "Take a subject's role in a namespace away", bindings::remove).answers::<BindingRemovedReply>(),
    ]
}

/// The process's own routes (probes, metrics, this document) and the pools.
#[rustfmt::skip]
fn service_routes() -> Vec<ApiRoute> {
    use Access::{Public, Read};
    vec![
        ApiRoute::get("/healthz", Public, "Liveness: the process answers", health::healthz),
        ApiRoute::get("/readyz", Public, "Readiness: NATS and ClickHouse reachable", health::readyz),
        ApiRoute::get("/metrics", Public, "Prometheus metrics (pool queues)", control::metrics),
        ApiRoute::get("/openapi.json", Public, "This document", openapi::serve),
        ApiRoute::get("/v1/pools", Read, "Pools: queued due events and consumers", control::pools),
    ]
}

/// Job definitions: list, put, read, delete, history, pause by selector;
/// and the preview of a schedule line.
#[rustfmt::skip]
fn job_routes() -> Vec<ApiRoute> {
    use crate::jobs::requests::{DeletedReply, JobsReply, PausedReply};
    use crate::jobs::store::PutReply;
    use crate::jobs::reads::{JobDetail, JobHistory};
    use crate::jobs::schedule_preview::PreviewReply;
    use jetcron_core::job::JobSpec;
    use Access::{Read, Write};
    vec![
        ApiRoute::get("/v1/jobs", Read, "List jobs (as jetcron.api.jobs.list)", jobs::list).query(&[("labels", "label selector: key=value pairs separated by commas"), ("namespace", "only this namespace's jobs (default: the names without a dot)"), ("limit", "at most this many jobs, 1 to 1000 (default: all); next_after in the answer goes on"), ("after", "only jobs whose id sorts after this one (the next_after of the page before)")]).answers::<JobsReply>(),
        ApiRoute::post("/v1/jobs", Write, "Create (201) or replace (200) a job (as jetcron.api.jobs.put)", writes::create).body::<JobSpec>("a job definition; a top-level expected_revision makes it a compare-and-swap (0: create only)").status(201).answers::<PutReply>(),
        ApiRoute::post("/v1/jobs:pause", Write, "Pause every job matching a label selector", writes::pause_selected).body::<LabelSelector>("the selector").answers::<PausedReply>(),
        ApiRoute::post("/v1/jobs:resume", Write, "Resume every job matching a label selector", writes::resume_selected).body::<LabelSelector>("the selector").answers::<PausedReply>(),
        ApiRoute::get("/v1/jobs/{id}", Read, "A job: definition, next fire times (for a paused job: those a resume would run), last run", jobs::get_one).query(&[("next", "how many next fires, 1 to 1000 (default 5)")]).answers::<JobDetail>(),
        ApiRoute::put("/v1/jobs/{id}", Write, "Create or replace job {id}; If-Match: <revision> or If-None-Match: * for compare-and-swap", writes::replace).body::<JobSpec>("a job definition; its id, if given, must be {id}").answers::<PutReply>(),
        ApiRoute::delete("/v1/jobs/{id}", Write, "Delete job {id} (its history stays)", writes::delete).query(&[("expected_revision", "delete only if this is still the current revision")]).answers::<DeletedReply>(),
        ApiRoute::get("/v1/jobs/{id}/history", Read, "Every kept revision of job {id} and its recent rejections", jobs::history).answers::<JobHistory>(),
        ApiRoute::get("/v1/schedules/preview", Read, "The next fires of a schedule line, with wall times, DST notes and the line in English (as jetcron.api.schedules.preview)", schedules::preview).query(&[("schedule", "the schedule line, as in a job"), ("timezone", "IANA zone (default UTC)"), ("count", "fires, 1 to 1000 (default 10)"), ("from", "RFC 3339; fires after it (default now)")]).answers::<PreviewReply>(),
    ]
}

/// One job's runs and actions, and the rejected definitions.
#[rustfmt::skip]
fn job_action_routes() -> Vec<ApiRoute> {
    use crate::jobs::requests::PausedReply;
    use crate::runs::manual::{BackfilledReply, TriggeredReply};
    use crate::jobs::rejections::RejectionsReply;
    use crate::runs::reads::JobRunsReply;
    use Access::{Read, Write};
    vec![
        ApiRoute::get("/v1/jobs/{id}/runs", Read, "Runs of job {id}, newest first", runs::of_job).query(RUNS_LIMIT).answers::<JobRunsReply>().reads_history(),
        ApiRoute::post("/v1/jobs/{id}/pause", Write, "Pause job {id}", writes::pause).answers::<PausedReply>(),
        ApiRoute::post("/v1/jobs/{id}/resume", Write, "Resume job {id}", writes::resume).answers::<PausedReply>(),
        ApiRoute::post("/v1/jobs/{id}/trigger", Write, "Run job {id} now (a manual run)", writes::trigger).status(202).answers::<TriggeredReply>(),
        ApiRoute::post("/v1/jobs/{id}/backfill", Write, "Run the scheduled times of job {id} in a past range", writes::backfill).body::<BackfillBody>("the range").status(202).answers::<BackfilledReply>().reads_history(),
        ApiRoute::get("/v1/rejections", Read, "Definitions that were not applied (job.rejected)", jobs::rejections).query(&[("job", "only those naming this job id"), ("limit", "page size, 1 to 500 (default 50)")]).answers::<RejectionsReply>().reads_history(),
    ]
}

/// Runs across jobs, statistics, one run and its controls.
#[rustfmt::skip]
fn run_routes() -> Vec<ApiRoute> {
    use crate::runs::reads::{RunReply, RunsReply};
    use crate::runs::stats::StatsReply;
    use crate::runs::control::KilledReply;
    use jetcron_core::control::Completion;
    use Access::{Read, Write};
    vec![
        ApiRoute::get("/v1/runs", Read, "Runs across jobs, newest first, with filters and a cursor", runs::list).query(&[("job", "job id"), ("namespace", "only the runs of this namespace's jobs (default: the names without a dot)"), ("status", "statuses, comma separated"), ("pool", "pool"), ("from", "RFC 3339, scheduled time (default: to − 7 days)"), ("to", "RFC 3339, scheduled time (default: now); at most 92 days after from"), ("q", "text the error contains (case-insensitive)"), ("cursor", "next_cursor of the previous page"), ("limit", "page size, 1 to 500 (default 50)")]).answers::<RunsReply>().reads_history(),
        ApiRoute::get("/v1/stats", Read, "Per job: runs by status, success rate, fire lag and duration percentiles, missed fires", runs::stats).query(&[("job", "one job"), ("from", "RFC 3339 (default: to − 24h)"), ("to", "RFC 3339 (default: now); at most 31 days after from")]).answers::<StatsReply>().reads_history(),
        ApiRoute::get("/v1/runs/{run_id}", Read, "A run with its event timeline and attempts", runs::get_one).answers::<RunReply>().reads_history(),
        ApiRoute::post("/v1/runs/{run_id}/kill", Write, "Stop run {run_id} wherever it runs (as jetcron.api.runs.kill)", control::kill).body::<control::KillBody>("optional reason").answers::<KilledReply>(),
        ApiRoute::post("/v1/runs/{run_id}/complete", Write, "Report the result of an asynchronous target", control::complete).body::<Completion>("the result").status(202),
    ]
}

/// Alert channels.
#[rustfmt::skip]
fn channel_routes() -> Vec<ApiRoute> {
    use crate::channels::requests::{ChannelDeletedReply, ChannelPutReply, ChannelReply, ChannelsReply};
    use jetcron_core::channel::Channel;
    use Access::{Read, Write};
    vec![
        ApiRoute::get("/v1/channels", Read, "Alert channels (as jetcron.api.channels.list); credentials hidden unless reads are protected", channels::list).answers::<ChannelsReply>(),
        ApiRoute::post("/v1/channels", Write, "Create (201) or replace (200) an alert channel (as jetcron.api.channels.put)", channels::create).body::<Channel>("a channel definition").status(201).answers::<ChannelPutReply>(),
        ApiRoute::get("/v1/channels/{name}", Read, "An alert channel", channels::get_one).answers::<ChannelReply>(),
        ApiRoute::put("/v1/channels/{name}", Write, "Create or replace channel {name}; If-Match: <revision> or If-None-Match: * for compare-and-swap", channels::replace).body::<Channel>("a channel definition; its name, if given, must be {name}").answers::<ChannelPutReply>(),
        ApiRoute::delete("/v1/channels/{name}", Write, "Delete channel {name} (its history stays)", channels::delete).query(&[("expected_revision", "delete only if this is still the current revision")]).answers::<ChannelDeletedReply>(),
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
