//! The `jetcron` NATS micro service (`nats micro ls` finds it).
//!
//! Endpoints, all request/reply with JSON bodies:
//! - `jetcron.api.jobs.put`: a job definition (optionally with a top-level
//!   `expected_revision`) → `{"ok":true,"job":{...},"revision":N}`;
//! - `jetcron.api.jobs.get | list | delete | pause | resume` ([`jobs::requests`]);
//! - `jetcron.api.jobs.trigger`: `{"id"}` → `{"ok":true,"run_id",...}`;
//! - `jetcron.api.jobs.backfill`: `{"id","from","to"}` → `{"ok":true,"emitted":[...],"skipped":[...]}`;
//! - `jetcron.api.runs.kill`: `{"run_id","reason"?}` → `{"ok":true,"run_id","stopped":[...]}`;
//! - `jetcron.api.runs.list`: the filters of `GET /v1/runs` (`job`,
//!   `namespace`, `status`, `pool`, `from`, `to`, `q`, `cursor`, `limit`) →
//!   `{"ok":true,"runs":[...],"next_cursor"}`;
//! - `jetcron.api.runs.get`: `{"run_id"}` → `{"ok":true,"run":{...}}`, with
//!   its events and every attempt's output ([`runs::reads`]);
//! - `jetcron.api.channels.put | get | list | delete`: alert channels
//!   ([`crate::channels::store`]);
//! - `jetcron.api.schedules.preview`: `{"schedule","timezone"?,"count"?,"from"?}`
//!   → `{"ok":true,"fires":[...],"description",...}` ([`jobs::schedule_preview`]).
//!
//! Requests are answered one at a time, in order, except those that read
//! ClickHouse (`backfill`, which looks up the runs a range has already, and
//! the run reads):
//! ClickHouse may take up to `--clickhouse-timeout` to answer or not, and no
//! other request waits for it, so those are answered beside the loop.
//!
//! Failures answer `{"ok":false,"error":{...}}` with `Nats-Service-Error` /
//! `Nats-Service-Error-Code` set. A request without a reply subject
//! (`nats pub`) is applied all the same; a refused put is logged and recorded
//! as a `job.rejected` event ([`jetcron_core::job_events`]).

use std::sync::Arc;

use async_nats::service::{Request, ServiceExt as _, NATS_SERVICE_ERROR, NATS_SERVICE_ERROR_CODE};
use async_nats::HeaderMap;
use futures::StreamExt as _;
use jetcron_core::access::{Grant, Grants, Role, Scope};
use jetcron_core::api::{header_safe, ApiError};
use jetcron_core::job::FieldError;
use jetcron_core::job_events::JobRejected;
use jetcron_core::subjects;
use jetcron_io::job_events;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::caller::Caller;
use crate::channels::requests::PutChannel;
use crate::jobs::store::PutJob;
use crate::request_body::parse_body;
use crate::{jobs, runs, GatewayState};

/// Most requests that read ClickHouse answered at once beside the loop.
const MAX_BESIDE_THE_LOOP: usize = 16;

#[derive(Debug, Clone, Copy)]
enum Endpoint {
    Put,
    Trigger,
    Backfill,
    Get,
    List,
    Delete,
    Pause,
    Resume,
    Kill,
    RunList,
    RunGet,
    Preview,
    ChannelPut,
    ChannelGet,
    ChannelList,
    ChannelDelete,
}

/// Serve the API until `shutdown`.
pub async fn serve(
    client: async_nats::Client,
    state: Arc<GatewayState>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let service = client
        .service_builder()
        .description("jetcron job scheduler API")
        .start(subjects::API_SERVICE, env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| anyhow::anyhow!("start NATS service {}: {e}", subjects::API_SERVICE))?;
    let mut endpoints = Vec::new();
    for (prefix, name, endpoint) in [
        (subjects::API_JOBS_GROUP, "put", Endpoint::Put),
        (subjects::API_JOBS_GROUP, "trigger", Endpoint::Trigger),
        (subjects::API_JOBS_GROUP, "backfill", Endpoint::Backfill),
        (subjects::API_JOBS_GROUP, "get", Endpoint::Get),
        (subjects::API_JOBS_GROUP, "list", Endpoint::List),
        (subjects::API_JOBS_GROUP, "delete", Endpoint::Delete),
        (subjects::API_JOBS_GROUP, "pause", Endpoint::Pause),
        (subjects::API_JOBS_GROUP, "resume", Endpoint::Resume),
        (subjects::API_RUNS_GROUP, "kill", Endpoint::Kill),
        (subjects::API_RUNS_GROUP, "list", Endpoint::RunList),
        (subjects::API_RUNS_GROUP, "get", Endpoint::RunGet),
        (subjects::API_SCHEDULES_GROUP, "preview", Endpoint::Preview),
        (subjects::API_CHANNELS_GROUP, "put", Endpoint::ChannelPut),
        (subjects::API_CHANNELS_GROUP, "get", Endpoint::ChannelGet),
        (subjects::API_CHANNELS_GROUP, "list", Endpoint::ChannelList),
        (
            subjects::API_CHANNELS_GROUP,
            "delete",
            Endpoint::ChannelDelete,
        ),
    ] {
        let stream = service
            .group(prefix)
            .endpoint(name)
            .await
            .map_err(|e| anyhow::anyhow!("add endpoint {prefix}.{name}: {e}"))?;
        endpoints.push(stream.map(move |request| (endpoint, request)).boxed());
        // The same endpoint on every namespace's door.
        let door = subjects::namespace_api_subject("*", endpoint.name());
        let stream = service
            .endpoint_builder()
            .name(format!("ns-{}", endpoint.name().replace('.', "-")))
            .add(&door)
            .await
            .map_err(|e| anyhow::anyhow!("add endpoint {door}: {e}"))?;
        endpoints.push(stream.map(move |request| (endpoint, request)).boxed());
    }
    let mut requests = futures::stream::select_all(endpoints);
    info!(
        "NATS API serving on jetcron.api.jobs.*, .runs.*, .schedules.* and .channels.*, and on every namespace's door, jetcron.api.ns.<namespace>.>"
    );
    let mut beside_the_loop = tokio::task::JoinSet::new();
    let history_reads = Arc::new(tokio::sync::Semaphore::new(MAX_BESIDE_THE_LOOP));
    loop {
        let (endpoint, request) = tokio::select! {
            _ = shutdown.cancelled() => break,
            next = requests.next() => match next {
                Some(next) => next,
                None => break,
            },
        };
        while beside_the_loop.try_join_next().is_some() {}
        if endpoint.reads_clickhouse() {
            // At most MAX_BESIDE_THE_LOOP at once: any viewer's door may send
            // these, and each may hold a ClickHouse query until its timeout.
            let Ok(permit) = history_reads.clone().try_acquire_owned() else {
                respond(
                    &request,
                    Err(ApiError::unavailable(format!(
                    "{MAX_BESIDE_THE_LOOP} history reads are running already: try again in a moment"
                ))),
                )
                .await;
                continue;
            };
            let state = state.clone();
            beside_the_loop.spawn(async move {
                answer(&state, endpoint, request).await;
                drop(permit);
            });
        } else {
            answer(&state, endpoint, request).await;
        }
    }
    // Those answer within --clickhouse-timeout.
    while beside_the_loop.join_next().await.is_some() {}
    if let Err(e) = service.stop().await {
        warn!(error = %e, "cannot stop NATS service cleanly");
    }
    Ok(())
}

/// Run one request and send its reply, counted and logged.
async fn answer(state: &GatewayState, endpoint: Endpoint, request: Request) {
    let reply = match caller_of(&request.message.subject) {
        Ok(caller) => handle(state, &caller, endpoint, &request.message.payload).await,
        Err(e) => Err(e),
    };
    let result = match &reply {
        Ok(_) => "ok",
        Err(e) => e.code.as_str(),
    };
    metrics::counter!("jetcron_api_requests_total", "endpoint" => endpoint.name(), "result" => result)
        .increment(1);
    if let Err(error) = &reply {
        let answered = request.message.reply.is_some();
        warn!(?endpoint, error = %error, reply = answered, "API request refused");
        if !answered && matches!(endpoint, Endpoint::Put) {
            record_rejection(state, &request.message.payload, error).await;
        }
    }
    respond(&request, reply).await;
}

impl Endpoint {
    /// Whether answering may wait for ClickHouse.
    fn reads_clickhouse(self) -> bool {
        matches!(
            self,
            Endpoint::Backfill | Endpoint::RunList | Endpoint::RunGet
        )
    }

    fn name(self) -> &'static str {
        match self {
            Endpoint::Put => "jobs.put",
            Endpoint::Trigger => "jobs.trigger",
            Endpoint::Backfill => "jobs.backfill",
            Endpoint::Get => "jobs.get",
            Endpoint::List => "jobs.list",
            Endpoint::Delete => "jobs.delete",
            Endpoint::Pause => "jobs.pause",
            Endpoint::Resume => "jobs.resume",
            Endpoint::Kill => "runs.kill",
            Endpoint::RunList => "runs.list",
            Endpoint::RunGet => "runs.get",
            Endpoint::Preview => "schedules.preview",
            Endpoint::ChannelPut => "channels.put",
            Endpoint::ChannelGet => "channels.get",
            Endpoint::ChannelList => "channels.list",
            Endpoint::ChannelDelete => "channels.delete",
        }
    }
}

/// Who a request on `subject` acts as: on `jetcron.api.<endpoint>`, admin
/// of every namespace (nats-server's permissions decide who sends there);
/// on a namespace's door, admin of that namespace only (the permissions of
/// `jetcron nats-permissions` decide which of its endpoints a team's role
/// may call).
fn caller_of(subject: &str) -> Result<Caller, ApiError> {
    let Some(namespace) = subjects::namespace_of_api_subject(subject) else {
        return Ok(Caller::nats());
    };
    let scope = Scope::parse("namespace", namespace)
        .map_err(|p| ApiError::invalid_field("namespace", p.message))?;
    if scope == Scope::All {
        return Err(ApiError::invalid_field(
            "namespace",
            "\"*\" is no namespace: send to jetcron.api.<endpoint> for every namespace",
        ));
    }
    Ok(Caller {
        actor: format!("nats:{namespace}"),
        door: jetcron_core::audit::Door::Nats,
        note: None,
        grants: Grants::one(Grant {
            scope,
            role: Role::Admin,
        }),
    })
}

/// Decode the body into the endpoint's request type, run the operation,
/// encode its answer: the operations themselves are shared with HTTP.
async fn handle(
    state: &GatewayState,
    caller: &Caller,
    endpoint: Endpoint,
    body: &[u8],
) -> Result<Value, ApiError> {
    let now = state.clock.now();
    match endpoint {
        Endpoint::Put => {
            let request = PutJob {
                definition: body.to_vec(),
                ..PutJob::default()
            };
            let stored = state.jobs.put(caller, request, now).await?;
            info!(job_id = %stored.job.id, revision = stored.revision, "job stored");
            encode(stored)
        }
        Endpoint::Trigger => {
            let reply = runs::manual::trigger(state, caller, parse_body(body)?).await?;
            info!(job_id = %reply.job_id, run_id = %reply.run_id.as_str(), "manual run triggered");
            encode(reply)
        }
        Endpoint::Backfill => {
            encode(runs::manual::backfill(state, caller, parse_body(body)?).await?)
        }
        Endpoint::Get => encode(jobs::requests::get(state, caller, parse_body(body)?).await?),
        Endpoint::List => encode(
            jobs::requests::list(state, caller, parse_body(body_or_empty_object(body))?).await?,
        ),
        Endpoint::Delete => {
            let reply = jobs::requests::delete(state, caller, parse_body(body)?).await?;
            info!(job_id = %reply.id, "job deleted");
            encode(reply)
        }
        Endpoint::Pause => {
            encode(jobs::requests::set_paused(state, caller, parse_body(body)?, true).await?)
        }
        Endpoint::Resume => {
            encode(jobs::requests::set_paused(state, caller, parse_body(body)?, false).await?)
        }
        Endpoint::Kill => encode(runs::control::kill(state, caller, parse_body(body)?).await?),
        Endpoint::RunList => encode(
            runs::reads::runs_seen_by(state, caller, parse_body(body_or_empty_object(body))?)
                .await?,
        ),
        Endpoint::RunGet => {
            encode(runs::reads::run_seen_by(state, caller, parse_body(body)?).await?)
        }
        Endpoint::Preview => encode(jobs::schedule_preview::preview(
            &parse_body::<jetcron_core::schedule_preview::PreviewRequest>(body)?,
            now,
        )?),
        Endpoint::ChannelPut => {
            caller.grants.require_everywhere(Role::Admin)?;
            let request = PutChannel {
                definition: body.to_vec(),
                ..PutChannel::default()
            };
            let stored = state.channels.put(request).await?;
            info!(channel = %stored.channel.name(), revision = stored.revision, "channel stored");
            encode(stored)
        }
        // Reads never show credentials here (`nats kv get jetcron_channels`
        // does, to whoever may read the bucket).
        Endpoint::ChannelGet => {
            let mut reply = state.channels.get(parse_body(body)?).await?;
            reply.channel = reply.channel.redacted();
            encode(reply)
        }
        Endpoint::ChannelList => {
            let mut reply = state
                .channels
                .list(parse_body(body_or_empty_object(body))?)
                .await?;
            reply.channels = reply.channels.into_iter().map(|c| c.redacted()).collect();
            encode(reply)
        }
        Endpoint::ChannelDelete => {
            caller.grants.require_everywhere(Role::Admin)?;
            let reply = state.channels.delete(parse_body(body)?).await?;
            info!(channel = %reply.name, "channel deleted");
            encode(reply)
        }
    }
}

/// An answer as the JSON body of the reply.
fn encode(answer: impl serde::Serialize) -> Result<Value, ApiError> {
    serde_json::to_value(answer).map_err(|e| ApiError::internal("encode the answer", e))
}

/// An empty body means "no arguments" (for `list`).
fn body_or_empty_object(body: &[u8]) -> &[u8] {
    if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    }
}

/// A put sent with `nats pub` has nobody to tell: record it as `job.rejected`.
async fn record_rejection(state: &GatewayState, body: &[u8], error: &ApiError) {
    let problems = if error.problems.is_empty() {
        vec![FieldError::new(
            error.field.clone().unwrap_or_default(),
            error.code.as_str(),
            error.message.clone(),
        )]
    } else {
        error.problems.clone()
    };
    let event = JobRejected::from_api(body, problems, state.clock.now());
    if let Err(e) = job_events::publish(&state.js, &event).await {
        warn!(error = %format!("{e:#}"), "cannot record job.rejected of a put without reply");
    }
}

async fn respond(request: &Request, reply: Result<Value, ApiError>) {
    if request.message.reply.is_none() {
        return;
    }
    let (body, headers) = match reply {
        Ok(body) => (body, HeaderMap::new()),
        Err(error) => {
            let mut headers = HeaderMap::new();
            headers.insert(NATS_SERVICE_ERROR, header_safe(&error.message).as_str());
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
