//! The HTTP job writes, mirroring the NATS endpoints: each handler builds
//! the operation's typed request from the path, headers and body and calls
//! the same operation as the NATS service, so both front doors validate and
//! answer alike.
//!
//! - `POST /v1/jobs` (a definition) → 201; `PUT /v1/jobs/{id}` (the path names
//!   the job; `If-Match: <revision>` or a body `expected_revision` makes it a
//!   compare-and-swap, `If-None-Match: *` a create-only);
//! - `DELETE /v1/jobs/{id}[?expected_revision=N]`;
//! - `POST /v1/jobs/{id}/pause | resume | trigger | backfill`;
//! - `POST /v1/jobs:pause | :resume` with a label selector `{"labels":{...}}`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use jetcron_core::api::ApiError;
use jetcron_core::job::validate_id;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::HttpError;
use crate::caller::Caller;
use crate::jobs::requests::{DeleteJob, DeletedReply, PausedReply, SelectJobs};
use crate::jobs::store::{PutJob, PutReply};
use crate::request_body::parse_body;
use crate::runs::manual::{BackfilledReply, TriggeredReply};
use crate::GatewayState;
use crate::{jobs, runs};

/// Largest oversized body read to the end before the 413 is sent.
const DRAIN_OVERSIZED_UP_TO: usize = 8 * 1024 * 1024;
/// Longest time spent reading it.
const DRAIN_OVERSIZED_FOR: std::time::Duration = std::time::Duration::from_secs(5);

/// A request body within the gateway's `--http-body-limit`, refused with a
/// JSON 413 beyond it.
pub struct LimitedBody(pub Bytes);

impl FromRequest<Arc<GatewayState>> for LimitedBody {
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &Arc<GatewayState>) -> Result<Self, HttpError> {
        let limit = state.limits.http_body_limit;
        let declared = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(declared) = declared.filter(|n| *n > limit as u64) {
            // Read (and drop) a body that is not too absurd before answering:
            // a client still writing it would otherwise see its connection
            // closed under it (a broken pipe) instead of the 413.
            if declared <= DRAIN_OVERSIZED_UP_TO as u64 {
                let drain = axum::body::to_bytes(req.into_body(), DRAIN_OVERSIZED_UP_TO);
                let _ = tokio::time::timeout(DRAIN_OVERSIZED_FOR, drain).await;
            }
            return Err(too_large(limit));
        }
        axum::body::to_bytes(req.into_body(), limit)
            .await
            .map(LimitedBody)
            .map_err(|_| too_large(limit))
    }
}

fn too_large(limit: usize) -> HttpError {
    HttpError(ApiError::too_large(format!(
        "request body is larger than {limit} bytes (gateway --http-body-limit)"
    )))
}

type IdPath = Result<Path<String>, axum::extract::rejection::PathRejection>;

/// The job id of the path, checked.
fn path_id(id: IdPath) -> Result<String, HttpError> {
    let Path(id) = id.map_err(super::bad_path)?;
    validate_id(&id).map_err(|p| ApiError::invalid_field("id", p.message))?;
    Ok(id)
}

/// The body as a JSON object (an empty body is `{}`). A key given twice is
/// refused, as the definition parser does: re-encoding would keep one silently.
fn body_object(body: &[u8]) -> Result<Map<String, Value>, HttpError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    let not_json = |message: String| {
        HttpError(ApiError::invalid_request(vec![
            jetcron_core::job::FieldError::new("", "invalid_json", message),
        ]))
    };
    match serde_json::from_slice::<UniqueKeys>(body) {
        Ok(UniqueKeys(Value::Object(map))) => Ok(map),
        Ok(UniqueKeys(other)) => Err(not_json(format!(
            "body must be a JSON object, got {}",
            json_type(&other)
        ))),
        Err(e) => Err(not_json(format!("body is not JSON: {e}"))),
    }
}

/// A JSON value whose objects (at any depth) have no key twice.
struct UniqueKeys(Value);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueKeysVisitor).map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(UniqueKeys(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let UniqueKeys(value) = map.next_value()?;
            if object.insert(key.clone(), value).is_some() {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate field `{key}`"
                )));
            }
        }
        Ok(Value::Object(object))
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Refuse a body that names another job than the path.
fn same_id(object: &Map<String, Value>, id: &str) -> Result<(), HttpError> {
    match object.get("id") {
        None => Ok(()),
        Some(Value::String(body_id)) if body_id == id => Ok(()),
        Some(other) => Err(HttpError(ApiError::invalid_field(
            "id",
            format!("the body names job {other}, the path {id:?}"),
        ))),
    }
}

/// A body of an action on one job (`trigger`, `pause`, …): empty, or an
/// object of the operation's fields, whose `id` (if any) is the path's.
fn action_body<T: serde::de::DeserializeOwned>(body: &[u8], id: &str) -> Result<T, HttpError> {
    let mut object = body_object(body)?;
    same_id(&object, id)?;
    object.insert("id".into(), Value::String(id.into()));
    serde_path_to_error::deserialize(Value::Object(object))
        .map_err(|e| HttpError(ApiError::undecodable(&e)))
}

/// `If-Match: 7` / `If-Match: "7"` → 7; `If-None-Match: *` → 0 (create only).
pub(super) fn precondition(headers: &HeaderMap) -> Result<Option<u64>, HttpError> {
    if let Some(value) = headers.get(axum::http::header::IF_MATCH) {
        let text = value.to_str().unwrap_or_default().trim().trim_matches('"');
        return text.parse::<u64>().map(Some).map_err(|_| {
            HttpError(ApiError::invalid_field(
                "If-Match",
                format!("must be a revision number, got {value:?}"),
            ))
        });
    }
    if let Some(value) = headers.get(axum::http::header::IF_NONE_MATCH) {
        if value.as_bytes() != b"*" {
            return Err(HttpError(ApiError::invalid_field(
                "If-None-Match",
                "only \"*\" (create only) is supported",
            )));
        }
        return Ok(Some(0));
    }
    Ok(None)
}

/// The revision a delete expects: `?expected_revision=` or `If-Match`, not
/// both (jobs and channels alike).
pub(super) fn delete_precondition(
    query: DeleteQuery,
    headers: &HeaderMap,
) -> Result<Option<u64>, HttpError> {
    match (query.expected_revision, precondition(headers)?) {
        (Some(_), Some(_)) => Err(HttpError(ApiError::invalid_field(
            "expected_revision",
            "give the revision either in the query or in If-Match, not both",
        ))),
        (a, b) => Ok(a.or(b)),
    }
}

/// `POST /v1/jobs`: store a new or changed definition (as `jobs.put`).
pub async fn create(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    LimitedBody(body): LimitedBody,
) -> Result<(StatusCode, Json<PutReply>), HttpError> {
    let request = PutJob {
        definition: body.to_vec(),
        ..PutJob::default()
    };
    let stored = state.jobs.put(&caller, request, state.clock.now()).await?;
    tracing::info!(job_id = %stored.job.id, revision = stored.revision, created = stored.created, "job stored over HTTP");
    let status = match stored.created {
        true => StatusCode::CREATED,
        false => StatusCode::OK,
    };
    Ok((status, Json(stored)))
}

/// `PUT /v1/jobs/{id}`.
pub async fn replace(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    id: IdPath,
    headers: HeaderMap,
    LimitedBody(body): LimitedBody,
) -> Result<Json<PutReply>, HttpError> {
    let id = path_id(id)?;
    let object = body_object(&body)?;
    same_id(&object, &id)?;
    let expected_revision = precondition(&headers)?;
    if expected_revision.is_some() && object.contains_key("expected_revision") {
        return Err(HttpError(ApiError::invalid_field(
            "expected_revision",
            "give the revision either in the body or in If-Match / If-None-Match, not both",
        )));
    }
    // An empty body is an empty definition of the path's job (its problems
    // are the missing fields, as for `{}`).
    let definition = match body.iter().all(u8::is_ascii_whitespace) {
        true => b"{}".to_vec(),
        false => body.to_vec(),
    };
    let request = PutJob {
        definition,
        key: Some(id),
        expected_revision,
    };
    let stored = state.jobs.put(&caller, request, state.clock.now()).await?;
    tracing::info!(job_id = %stored.job.id, revision = stored.revision, created = stored.created, "job stored over HTTP");
    Ok(Json(stored))
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteQuery {
    /// Delete only if this is still the current revision (not with `If-Match`).
    expected_revision: Option<u64>,
}

/// `DELETE /v1/jobs/{id}`.
pub async fn delete(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    id: IdPath,
    headers: HeaderMap,
    query: Result<Query<DeleteQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DeletedReply>, HttpError> {
    let id = path_id(id)?;
    let expected = delete_precondition(super::query(query)?, &headers)?;
    let request = DeleteJob {
        id: id.clone(),
        expected_revision: expected,
    };
    let reply = jobs::requests::delete(&state, &caller, request).await?;
    tracing::info!(job_id = %id, "job deleted over HTTP");
    Ok(Json(reply))
}

/// `POST /v1/jobs/{id}/pause`.
pub async fn pause(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    id: IdPath,
    LimitedBody(body): LimitedBody,
) -> Result<Json<PausedReply>, HttpError> {
    set_paused(&state, &caller, id, &body, true).await
}

/// `POST /v1/jobs/{id}/resume`.
pub async fn resume(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    id: IdPath,
    LimitedBody(body): LimitedBody,
) -> Result<Json<PausedReply>, HttpError> {
    set_paused(&state, &caller, id, &body, false).await
}

async fn set_paused(
    state: &GatewayState,
    caller: &Caller,
    id: IdPath,
    body: &[u8],
    paused: bool,
) -> Result<Json<PausedReply>, HttpError> {
    let id = path_id(id)?;
    let request: SelectJobs = action_body(body, &id)?;
    Ok(Json(
        jobs::requests::set_paused(state, caller, request, paused).await?,
    ))
}

/// `POST /v1/jobs:pause` with `{"labels":{...}}`.
pub async fn pause_selected(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    LimitedBody(body): LimitedBody,
) -> Result<Json<PausedReply>, HttpError> {
    Ok(Json(
        jobs::requests::set_paused(&state, &caller, parse_body(&body)?, true).await?,
    ))
}

/// `POST /v1/jobs:resume` with `{"labels":{...}}`.
pub async fn resume_selected(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    LimitedBody(body): LimitedBody,
) -> Result<Json<PausedReply>, HttpError> {
    Ok(Json(
        jobs::requests::set_paused(&state, &caller, parse_body(&body)?, false).await?,
    ))
}

/// `POST /v1/jobs/{id}/trigger`: a manual run now.
pub async fn trigger(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    id: IdPath,
    LimitedBody(body): LimitedBody,
) -> Result<(StatusCode, Json<TriggeredReply>), HttpError> {
    let id = path_id(id)?;
    let reply = runs::manual::trigger(&state, &caller, action_body(&body, &id)?).await?;
    Ok((StatusCode::ACCEPTED, Json(reply)))
}

/// `POST /v1/jobs/{id}/backfill` with `{"from","to"}`.
pub async fn backfill(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    id: IdPath,
    LimitedBody(body): LimitedBody,
) -> Result<(StatusCode, Json<BackfilledReply>), HttpError> {
    let id = path_id(id)?;
    let reply = runs::manual::backfill(&state, &caller, action_body(&body, &id)?).await?;
    Ok((StatusCode::ACCEPTED, Json(reply)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_names_the_job_and_a_body_naming_another_is_refused() {
        let trigger: crate::runs::manual::TriggerJob = action_body(b"", "a").expect("empty body");
        assert_eq!(trigger.id, "a");
        let select: SelectJobs = action_body(b"{\"id\":\"a\"}", "a").expect("same id");
        assert_eq!(select.id.as_deref(), Some("a"));
        let err =
            same_id(&body_object(b"{\"id\":\"b\"}").expect("object"), "a").expect_err("mismatch");
        assert_eq!(err.0.field.as_deref(), Some("id"));
        let err = action_body::<crate::runs::manual::TriggerJob>(b"{\"colour\":1}", "a")
            .expect_err("unknown field");
        assert!(err.0.message.contains("unknown field"), "{}", err.0.message);
        assert!(body_object(b"[1]").is_err());
        let err = body_object(br#"{"schedule":"a","target":{},"schedule":"b"}"#).expect_err("dup");
        assert!(
            err.0.message.contains("duplicate field `schedule`"),
            "{}",
            err.0.message
        );
        assert!(body_object(br#"{"target":{"headers":{"A":"1","A":"2"}}}"#).is_err());
        assert!(body_object(b"{").is_err());
        assert!(body_object(b"  ").expect("empty").is_empty());
    }

    #[test]
    fn preconditions_read_revisions_and_create_only() {
        let mut headers = HeaderMap::new();
        assert_eq!(precondition(&headers).expect("none"), None);
        headers.insert(
            axum::http::header::IF_MATCH,
            "\"12\"".parse().expect("value"),
        );
        assert_eq!(precondition(&headers).expect("if-match"), Some(12));
        headers.insert(axum::http::header::IF_MATCH, "abc".parse().expect("value"));
        assert!(precondition(&headers).is_err());
        let mut headers = HeaderMap::new();
        headers.insert(
            axum::http::header::IF_NONE_MATCH,
            "*".parse().expect("value"),
        );
        assert_eq!(precondition(&headers).expect("create only"), Some(0));
    }
}
