//! The job operations beyond `put` (`jetcron.api.jobs.get | list | delete |
//! pause | resume`, and their HTTP routes): each is one function from a typed
//! request to a typed answer or an [`ApiError`]. The NATS service decodes a
//! request body into the request type, the HTTP handlers build it from the
//! path, query and body; both encode the same answer. `pause` and `resume`
//! take one id or a label selector and answer with the ids they changed.

use std::collections::BTreeMap;

use jetcron_core::access::Role;
use jetcron_core::api::{ApiError, ErrorCode};
use jetcron_core::job::{namespace_of, validate_id, validate_labels};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::caller::Caller;
use crate::jobs::stored::StoredJob;
use crate::GatewayState;

/// `get` `{"id"}`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetJob {
    pub id: String,
}

/// `list` `{}` or `{"labels":{...}}`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListJobs {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Only this namespace's jobs (`default`: names without a dot).
    #[serde(default)]
    pub namespace: Option<String>,
    /// At most this many jobs (1 to 1000), and `next_after` to go on;
    /// without it, every job in one answer.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    /// Only jobs whose id sorts after this one: the `next_after` of the
    /// page before.
    #[serde(default)]
    pub after: Option<String>,
}

/// The most jobs one page of `list` holds.
pub const MAX_PAGE: usize = 1000;

/// The most bytes of definitions one page holds: under NATS' default 1 MB
/// `max_payload` with room for the envelope, whatever `limit` says (a
/// definition may be 64 KiB, so 1000 of them would not fit).
pub const PAGE_BYTES: usize = 768 * 1024;

/// `delete` `{"id","expected_revision"?}`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteJob {
    pub id: String,
    pub expected_revision: Option<u64>,
}

/// One job by id, or every job whose labels include the selector.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SelectJobs {
    pub id: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
}

/// The answer of `get`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct JobReply {
    pub ok: bool,
    pub job: StoredJob,
}

/// The answer of `list`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct JobsReply {
    pub ok: bool,
    pub jobs: Vec<StoredJob>,
    /// When a `limit` cut the list short: the `after` of the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

impl JobsReply {
    /// This answer with every definition's secrets hidden.
    pub fn redacted(mut self) -> Self {
        self.jobs = self.jobs.into_iter().map(StoredJob::redacted).collect();
        self
    }
}

/// The answer of `delete`: the revision deleted and the delete marker's.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct DeletedReply {
    pub ok: bool,
    pub id: String,
    pub deleted_revision: u64,
    pub revision: Option<u64>,
}

/// A job whose pause state changed, at its new revision.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Changed {
    pub id: String,
    pub revision: u64,
}

/// A job that could not be changed, and why.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Failed {
    pub id: String,
    pub error: FailedError,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct FailedError {
    pub code: &'static str,
    pub message: String,
}

/// The answer of `pause` / `resume`. `failed` and `not_tried` are there for
/// a selector only.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PausedReply {
    /// False when some job failed.
    pub ok: bool,
    pub paused: bool,
    pub changed: Vec<Changed>,
    pub unchanged: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<Vec<Failed>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_tried: Option<Vec<String>>,
}

fn checked_id(id: &str) -> Result<(), ApiError> {
    validate_id(id).map_err(|p| ApiError::invalid_field("id", p.message))
}

fn checked_selector(labels: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let problems = validate_labels("labels", labels);
    match problems.first() {
        None => Ok(()),
        Some(p) => Err(ApiError::invalid_field(p.field.clone(), p.message.clone())),
    }
}

/// `get`: one stored definition.
pub async fn get(
    state: &GatewayState,
    caller: &Caller,
    request: GetJob,
) -> Result<JobReply, ApiError> {
    checked_id(&request.id)?;
    caller
        .grants
        .require(Role::Viewer, namespace_of(&request.id))?;
    let (stored, _) = state
        .jobs
        .get(&request.id)
        .await
        .map_err(ApiError::unavailable)?
        .ok_or_else(|| ApiError::not_found("id", format!("no job {:?}", request.id)))?;
    Ok(JobReply {
        ok: true,
        job: stored,
    })
}

/// Whether a stored definition carries every label of `selector`.
fn matches(job: &Value, selector: &BTreeMap<String, String>) -> bool {
    selector
        .iter()
        .all(|(k, v)| job["labels"][k].as_str() == Some(v.as_str()))
}

/// `list`: every stored definition, or those the selector matches, in id
/// order; with `limit`, one page of them (at most `limit` jobs and about
/// [`PAGE_BYTES`]) and where the next one starts.
/// Ids are filtered before any definition is read, so a page costs reads of
/// what it shows (plus those a label selector passes over).
pub async fn list(
    state: &GatewayState,
    caller: &Caller,
    request: ListJobs,
) -> Result<JobsReply, ApiError> {
    checked_selector(&request.labels)?;
    let namespace = crate::read_params::namespace_param(request.namespace)?;
    if let Some(namespace) = &namespace {
        caller.grants.require(Role::Viewer, namespace)?;
    }
    let limit = match request.limit {
        Some(n) if !(1..=MAX_PAGE).contains(&n) => {
            return Err(ApiError::invalid_request(vec![
                jetcron_core::job::FieldError::new(
                    "limit",
                    "out_of_range",
                    format!("is {n}: a page holds 1 to {MAX_PAGE} jobs"),
                ),
            ]));
        }
        Some(n) => n,
        None => usize::MAX,
    };
    let mut keys = state
        .jobs
        .sorted_keys()
        .await
        .map_err(ApiError::unavailable)?
        .into_iter()
        .filter(|id| {
            request
                .after
                .as_deref()
                .is_none_or(|after| id.as_str() > after)
        })
        .filter(|id| {
            let of = namespace_of(id);
            caller.sees(of) && namespace.as_deref().is_none_or(|ns| of == ns)
        })
        .peekable();
    let mut jobs = Vec::new();
    let mut bytes = 0;
    // Set when the page ends by size before the ids do.
    let mut cut = false;
    while jobs.len() < limit {
        let Some(key) = keys.next() else {
            break;
        };
        let Some(job) = state.jobs.read(&key).await else {
            continue;
        };
        let selected = request.labels.is_empty()
            || job
                .job
                .as_ref()
                .is_some_and(|d| matches(d, &request.labels));
        if !selected {
            continue;
        }
        // A page must fit one NATS message: it ends before the job that
        // would take it past PAGE_BYTES (a page holds at least one job),
        // and the next page starts with that job again.
        let size = serde_json::to_vec(&job).map_or(0, |b| b.len());
        if request.limit.is_some() && !jobs.is_empty() && bytes + size > PAGE_BYTES {
            cut = true;
            break;
        }
        bytes += size;
        jobs.push(job);
    }
    let next_after = match cut || keys.peek().is_some() {
        true => jobs.last().map(|j| j.id.clone()),
        false => None,
    };
    Ok(JobsReply {
        ok: true,
        jobs,
        next_after,
    })
}

/// `delete`: a delete marker (the history stays), optionally only if the
/// job is still at `expected_revision`.
pub async fn delete(
    state: &GatewayState,
    caller: &Caller,
    request: DeleteJob,
) -> Result<DeletedReply, ApiError> {
    checked_id(&request.id)?;
    caller
        .grants
        .require(Role::Editor, namespace_of(&request.id))?;
    let (deleted_revision, revision) = state
        .jobs
        .delete(caller, &request.id, request.expected_revision)
        .await?;
    Ok(DeletedReply {
        ok: true,
        id: request.id,
        deleted_revision,
        revision,
    })
}

/// `pause` / `resume`: one job, or every valid job the selector matches in
/// the namespaces where the caller operates.
pub async fn set_paused(
    state: &GatewayState,
    caller: &Caller,
    request: SelectJobs,
    paused: bool,
) -> Result<PausedReply, ApiError> {
    let ids: Vec<String> = match (request.id, request.labels) {
        (Some(id), None) => {
            checked_id(&id)?;
            caller.grants.require(Role::Operator, namespace_of(&id))?;
            let revision = state
                .jobs
                .set_paused(caller, &id, paused, state.clock.now())
                .await?;
            let (changed, unchanged) = match revision {
                Some(revision) => (vec![Changed { id, revision }], vec![]),
                None => (vec![], vec![id]),
            };
            return Ok(PausedReply {
                ok: true,
                paused,
                changed,
                unchanged,
                failed: None,
                not_tried: None,
            });
        }
        (None, Some(labels)) if !labels.is_empty() => {
            checked_selector(&labels)?;
            caller.grants.require_somewhere(Role::Operator)?;
            state
                .jobs
                .list()
                .await
                .map_err(ApiError::unavailable)?
                .into_iter()
                .filter(|j| caller.grants.allows(Role::Operator, namespace_of(&j.id)))
                .filter(|j| j.valid && j.job.as_ref().is_some_and(|d| matches(d, &labels)))
                .map(|j| j.id)
                .collect()
        }
        _ => {
            return Err(ApiError::malformed(
                "give either \"id\" or a non-empty \"labels\" selector, not both",
            ));
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
        match state
            .jobs
            .set_paused(caller, &id, paused, state.clock.now())
            .await
        {
            Ok(Some(revision)) => changed.push(Changed { id, revision }),
            Ok(None) => unchanged.push(id),
            // NATS trouble would fail every other job too, one timeout at
            // a time: stop, and say what was done so far.
            Err(error) if error.code == ErrorCode::Unavailable && changed.is_empty() => {
                return Err(error);
            }
            Err(error) => {
                let stop = error.code == ErrorCode::Unavailable;
                failed.push(Failed {
                    id,
                    error: FailedError {
                        code: error.code.as_str(),
                        message: error.message,
                    },
                });
                if stop {
                    break;
                }
            }
        }
    }
    // Left untried after NATS failed: the caller may simply send it again.
    let not_tried: Vec<String> = ids.collect();
    Ok(PausedReply {
        ok: failed.is_empty(),
        paused,
        changed,
        unchanged,
        failed: Some(failed),
        not_tried: Some(not_tried),
    })
}
