//! One API call: an endpoint of the `jetcron` service and a JSON body, sent
//! over NATS (to `jetcron.api.<endpoint>`, or to a namespace's door
//! `jetcron.api.ns.<ns>.<endpoint>` for a team's user) or over HTTP (the
//! route of the same operation, with a bearer token). Both answer the same
//! JSON, so commands are written once against [`Api::call`].
//!
//! A refusal keeps the API's own error ([`Refusal`]): its code, message and
//! every field's problem, shown the way the API words them.

use std::fmt;
use std::time::Duration;

use jetcron_core::api::ApiError;
use jetcron_core::subjects;
use serde_json::{Map, Value};

mod http;
pub use http::HttpApi;

/// The operations the client uses; [`Endpoint::name`] is the NATS
/// endpoint's name (`jobs.list`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    JobsList,
    JobsGet,
    JobsPut,
    JobsDelete,
    JobsPause,
    JobsResume,
    JobsTrigger,
    JobsBackfill,
    SchedulesPreview,
    RunsList,
    RunsGet,
    RunsKill,
    ChannelsList,
}

impl Endpoint {
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::JobsList => "jobs.list",
            Endpoint::JobsGet => "jobs.get",
            Endpoint::JobsPut => "jobs.put",
            Endpoint::JobsDelete => "jobs.delete",
            Endpoint::JobsPause => "jobs.pause",
            Endpoint::JobsResume => "jobs.resume",
            Endpoint::JobsTrigger => "jobs.trigger",
            Endpoint::JobsBackfill => "jobs.backfill",
            Endpoint::SchedulesPreview => "schedules.preview",
            Endpoint::RunsList => "runs.list",
            Endpoint::RunsGet => "runs.get",
            Endpoint::RunsKill => "runs.kill",
            Endpoint::ChannelsList => "channels.list",
        }
    }
}

/// Why a call has no answer.
#[derive(Debug)]
pub enum CallError {
    /// The API answered with a refusal.
    Refused(Refusal),
    /// Nothing usable came back (no gateway, a timeout, not JSON).
    Transport(anyhow::Error),
}

/// The API's refusal: its status (HTTP, or NATS' `Nats-Service-Error-Code`)
/// and its error object.
#[derive(Debug)]
pub struct Refusal {
    pub status: u16,
    pub error: ApiError,
}

impl CallError {
    /// The refusal's status, if the API refused.
    pub fn status(&self) -> Option<u16> {
        match self {
            CallError::Refused(refusal) => Some(refusal.status),
            CallError::Transport(_) => None,
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Refused(refusal) => refusal.fmt(f),
            CallError::Transport(e) => write!(f, "{e:#}"),
        }
    }
}

impl std::error::Error for CallError {}

impl fmt::Display for Refusal {
    /// `<status> <code>: <message>`, then one `  <field>: <message>` line
    /// per problem when there are several (one is the message already).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let error = &self.error;
        write!(
            f,
            "{} {}: {}",
            self.status,
            error.code.as_str(),
            error.message
        )?;
        if error.problems.len() > 1 {
            for problem in &error.problems {
                write!(f, "\n  {}: {}", problem.field, problem.message)?;
            }
        }
        Ok(())
    }
}

/// Where calls go.
#[derive(Clone)]
pub enum Api {
    Nats(NatsApi),
    Http(HttpApi),
}

impl Api {
    /// Call `endpoint` with `body` (an object) and return the answer.
    pub async fn call(&self, endpoint: Endpoint, body: Value) -> Result<Value, CallError> {
        match self {
            Api::Nats(nats) => nats.call(endpoint, &body).await,
            Api::Http(http) => http.call(endpoint, body).await,
        }
    }

    /// Where calls go, for messages (`NATS jetcron.api.ns.billing` or the URL).
    pub fn describe(&self) -> String {
        match self {
            Api::Nats(nats) => format!("NATS {}", nats.prefix()),
            Api::Http(http) => http.describe(),
        }
    }
}

/// The NATS API, optionally through one namespace's door.
#[derive(Clone)]
pub struct NatsApi {
    client: async_nats::Client,
    door: Option<String>,
    timeout: Duration,
}

impl NatsApi {
    /// `door`: the namespace whose door to use (a team user's permissions
    /// allow only `jetcron.api.ns.<ns>.>`; its connection must then use
    /// the inbox prefix [`jetcron_core::nats_doors::inbox_prefix`]).
    pub fn new(client: async_nats::Client, door: Option<String>, timeout: Duration) -> Self {
        Self {
            client,
            door,
            timeout,
        }
    }

    fn prefix(&self) -> String {
        match &self.door {
            Some(namespace) => format!("{}.{namespace}", subjects::API_NAMESPACE_PREFIX),
            None => subjects::API_PREFIX.to_string(),
        }
    }

    fn subject(&self, endpoint: Endpoint) -> String {
        match &self.door {
            Some(namespace) => subjects::namespace_api_subject(namespace, endpoint.name()),
            None => subjects::api_subject(endpoint.name()),
        }
    }

    async fn call(&self, endpoint: Endpoint, body: &Value) -> Result<Value, CallError> {
        use async_nats::RequestErrorKind;
        let subject = self.subject(endpoint);
        let request = async_nats::Request::new()
            .payload(body.to_string().into())
            .timeout(Some(self.timeout));
        let reply = self
            .client
            .send_request(subject.clone(), request)
            .await
            .map_err(|e| {
                let why = match e.kind() {
                    RequestErrorKind::NoResponders => format!(
                        "no jetcron gateway answers on {subject}: is one running, and may this user publish there?"
                    ),
                    RequestErrorKind::TimedOut => format!(
                        "no answer on {subject} within {}",
                        humanize(self.timeout)
                    ),
                    _ => format!("request on {subject}: {e}"),
                };
                CallError::Transport(anyhow::anyhow!(why))
            })?;
        let status = reply
            .headers
            .as_ref()
            .and_then(|h| h.get(async_nats::service::NATS_SERVICE_ERROR_CODE))
            .and_then(|code| code.as_str().parse::<u16>().ok());
        let answer: Value = serde_json::from_slice(&reply.payload).map_err(|e| {
            CallError::Transport(anyhow::anyhow!("the answer on {subject} is not JSON: {e}"))
        })?;
        answer_or_refusal(status, answer, &subject)
    }
}

/// A JSON answer, or the refusal it carries (`{"ok":false,"error":{...}}`).
fn answer_or_refusal(status: Option<u16>, answer: Value, from: &str) -> Result<Value, CallError> {
    let refused = status.is_some_and(|s| s >= 400) || answer.get("ok") == Some(&Value::Bool(false));
    if !refused {
        return Ok(answer);
    }
    match answer
        .get("error")
        .cloned()
        .map(serde_json::from_value::<ApiError>)
    {
        Some(Ok(error)) => Err(CallError::Refused(Refusal {
            status: status.unwrap_or_else(|| error.code.http_status()),
            error,
        })),
        _ => Err(CallError::Transport(anyhow::anyhow!(
            "{from} refused without an error object: {answer}"
        ))),
    }
}

/// An object body from pairs whose value is set.
pub fn object(pairs: impl IntoIterator<Item = (&'static str, Option<Value>)>) -> Value {
    let fields: Map<String, Value> = pairs
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
        .collect();
    Value::Object(fields)
}

fn humanize(duration: Duration) -> String {
    format!("{} s", duration.as_secs_f64())
}
