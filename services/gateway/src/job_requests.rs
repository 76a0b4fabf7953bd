//! The job endpoints beyond `put`: `jetcron.api.jobs.get | list | delete |
//! pause | resume`. `pause` and `resume` take one id or a label selector and
//! answer with the ids they changed.

use std::collections::BTreeMap;

use jetcron_core::api::{ApiError, ErrorCode};
use jetcron_core::job::{validate_id, validate_labels};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::manual_runs::parse_body;
use crate::GatewayState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IdRequest {
    id: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListRequest {
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteRequest {
    id: String,
    expected_revision: Option<u64>,
}

/// One job by id, or every job whose labels include the selector.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SelectRequest {
    id: Option<String>,
    labels: Option<BTreeMap<String, String>>,
}

fn checked_id(id: &str) -> Result<(), ApiError> {
    validate_id(id).map_err(|p| ApiError {
        field: Some("id".into()),
        ..ApiError::new(ErrorCode::InvalidRequest, p.message)
    })
}

fn checked_selector(labels: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let problems = validate_labels("labels", labels);
    match problems.first() {
        None => Ok(()),
        Some(p) => Err(ApiError {
            field: Some(p.field.clone()),
            ..ApiError::new(ErrorCode::InvalidRequest, p.message.clone())
        }),
    }
}

/// An empty body means "no arguments" for list.
fn body_or_empty_object(body: &[u8]) -> &[u8] {
    if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    }
}

fn unavailable(e: anyhow::Error) -> ApiError {
    ApiError::new(ErrorCode::Unavailable, format!("{e:#}"))
}

/// `get` `{"id"}`.
pub async fn get(state: &GatewayState, body: &[u8]) -> Result<Value, ApiError> {
    let request: IdRequest = parse_body(body)?;
    checked_id(&request.id)?;
    let (stored, _) = state
        .jobs
        .get(&request.id)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| ApiError {
            field: Some("id".into()),
            ..ApiError::new(ErrorCode::NotFound, format!("no job {:?}", request.id))
        })?;
    Ok(json!({ "ok": true, "job": stored }))
}

/// Whether a stored definition carries every label of `selector`.
fn matches(job: &Value, selector: &BTreeMap<String, String>) -> bool {
    selector
        .iter()
        .all(|(k, v)| job["labels"][k].as_str() == Some(v.as_str()))
}

/// `list` `{}` or `{"labels":{...}}`.
pub async fn list(state: &GatewayState, body: &[u8]) -> Result<Value, ApiError> {
    let request: ListRequest = parse_body(body_or_empty_object(body))?;
    checked_selector(&request.labels)?;
    let jobs: Vec<_> = state
        .jobs
        .list()
        .await
        .map_err(unavailable)?
        .into_iter()
        .filter(|j| {
            request.labels.is_empty() || j.job.as_ref().is_some_and(|d| matches(d, &request.labels))
        })
        .collect();
    Ok(json!({ "ok": true, "jobs": jobs }))
}

/// `delete` `{"id","expected_revision"?}`.
pub async fn delete(state: &GatewayState, body: &[u8]) -> Result<Value, ApiError> {
    let request: DeleteRequest = parse_body(body)?;
    checked_id(&request.id)?;
    let (deleted_revision, revision) = state
        .jobs
        .delete(&request.id, request.expected_revision)
        .await?;
    Ok(json!({
        "ok": true,
        "id": request.id,
        "deleted_revision": deleted_revision,
        "revision": revision,
    }))
}

/// `pause` / `resume` `{"id"}` or `{"labels":{...}}`.
pub async fn set_paused(
    state: &GatewayState,
    body: &[u8],
    paused: bool,
) -> Result<Value, ApiError> {
    let request: SelectRequest = parse_body(body)?;
    let ids: Vec<String> = match (request.id, request.labels) {
        (Some(id), None) => {
            checked_id(&id)?;
            let revision = state.jobs.set_paused(&id, paused).await?;
            let (changed, unchanged) = match revision {
                Some(revision) => (vec![json!({ "id": id, "revision": revision })], vec![]),
                None => (vec![], vec![id]),
            };
            return Ok(json!({
                "ok": true, "paused": paused, "changed": changed, "unchanged": unchanged,
            }));
        }
        (None, Some(labels)) if !labels.is_empty() => {
            checked_selector(&labels)?;
            state
                .jobs
                .list()
                .await
                .map_err(unavailable)?
                .into_iter()
                .filter(|j| j.valid && j.job.as_ref().is_some_and(|d| matches(d, &labels)))
                .map(|j| j.id)
                .collect()
        }
        _ => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "give either \"id\" or a non-empty \"labels\" selector, not both",
            ))
        }
    };
    // One job that cannot be changed (deleted meanwhile, edited too often,
    // NATS trouble) does not hide what was done to the others: it is listed
    // under `failed` with its error, and the rest go on.
    let mut changed = Vec::new();
    let mut unchanged = Vec::new();
    let mut failed = Vec::new();
    let mut ids = ids.into_iter();
    for id in ids.by_ref() {
        match state.jobs.set_paused(&id, paused).await {
            Ok(Some(revision)) => changed.push(json!({ "id": id, "revision": revision })),
            Ok(None) => unchanged.push(id),
            // NATS trouble would fail every other job too, one timeout at
            // a time: stop, and say what was done so far.
            Err(error) if error.code == ErrorCode::Unavailable && changed.is_empty() => {
                return Err(error)
            }
            Err(error) => {
                let stop = error.code == ErrorCode::Unavailable;
                failed.push(json!({
                    "id": id,
                    "error": { "code": error.code.as_str(), "message": error.message },
                }));
                if stop {
                    break;
                }
            }
        }
    }
    // Left untried after NATS failed: the caller may simply send it again.
    let not_tried: Vec<String> = ids.collect();
    Ok(json!({
        "ok": failed.is_empty(),
        "paused": paused,
        "changed": changed,
        "unchanged": unchanged,
        "failed": failed,
        "not_tried": not_tried,
    }))
}
