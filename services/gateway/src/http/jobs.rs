//! HTTP adapters of the job reads: `GET /v1/jobs`, `/v1/jobs/{id}`,
//! `/v1/jobs/{id}/history` and `/v1/rejections`. Each builds the typed
//! request of [`crate::jobs::requests`], [`crate::jobs::reads`] or
//! [`crate::jobs::rejections`] from the path and query and encodes the
//! answer, secrets hidden ([`shown`]).
//!
//! Why hidden: target and notification headers (`Authorization: Bearer …`)
//! and shell environment values are where definitions carry credentials,
//! and HTTP reads are open unless the gateway runs with `--protect-reads`;
//! so their answers show those values as `"<redacted>"` (the names stay).
//! With protected reads the caller holds an API token, which already allows
//! writing the job, and sees everything; so does the NATS API, which NATS
//! permissions guard.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Extension, Path, State};
use jetcron_core::api::ApiError;
use jetcron_core::job::patterns::{
    LABEL_SELECTOR_FORMAT, LABEL_SELECTOR_PATTERN, NAMESPACE_PATTERN,
};

use super::{query, HttpError, PathResult, QueryResult, SortedJson};
use crate::caller::Caller;
use crate::jobs::reads::{self, GetJobDetail, JobDetail, JobHistory};
use crate::jobs::rejections::{self, ListRejections, RejectionsReply};
use crate::jobs::requests::JobsReply;
use crate::GatewayState;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// A label selector, `key=value` pairs separated by commas.
    #[schemars(regex(pattern = LABEL_SELECTOR_PATTERN), extend("format" = LABEL_SELECTOR_FORMAT))]
    labels: Option<String>,
    /// Only this namespace's jobs (`default`: names without a dot).
    #[schemars(regex(pattern = NAMESPACE_PATTERN))]
    namespace: Option<String>,
    /// At most this many jobs (1 to 1000); the answer's `next_after` goes on.
    #[schemars(range(min = 1, max = crate::jobs::requests::MAX_PAGE))]
    limit: Option<usize>,
    /// Only jobs whose id sorts after this one (the `next_after` of the page before).
    after: Option<String>,
}

/// `GET /v1/jobs[?labels=team=billing,env=prod][&namespace=billing][&limit=N&after=ID]`
/// (as `jobs.list`).
pub async fn list(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    q: QueryResult<ListQuery>,
) -> Result<SortedJson<JobsReply>, HttpError> {
    let q = query(q)?;
    let request = crate::jobs::requests::ListJobs {
        namespace: q.namespace,
        limit: q.limit,
        after: q.after,
        labels: label_selector(q.labels.as_deref())?,
    };
    let reply = crate::jobs::requests::list(&state, &caller, request).await?;
    Ok(shown(&state, &caller, reply, JobsReply::redacted))
}

/// The `labels` of a query, `key=value` pairs separated by commas (empty
/// pairs skipped; the operation checks keys and values).
pub(super) fn label_selector(text: Option<&str>) -> Result<BTreeMap<String, String>, ApiError> {
    let mut labels = BTreeMap::new();
    for pair in text
        .iter()
        .flat_map(|l| l.split(','))
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').ok_or_else(|| {
            ApiError::invalid_field("labels", format!("{pair:?} is not key=value"))
        })?;
        labels.insert(key.to_string(), value.to_string());
    }
    Ok(labels)
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetQuery {
    /// How many next fires to list, 1 to 1000 (default 5).
    #[schemars(range(min = 1, max = jetcron_core::schedule_preview::MAX_COUNT))]
    next: Option<usize>,
}

/// `GET /v1/jobs/{id}[?next=N]` ([`reads::job_detail`]).
pub async fn get_one(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    id: PathResult<String>,
    q: QueryResult<GetQuery>,
) -> Result<SortedJson<JobDetail>, HttpError> {
    let Path(id) = id.map_err(super::bad_path)?;
    super::may_view(&caller, &id)?;
    let q = query(q)?;
    let request = GetJobDetail { id, next: q.next };
    let reply = reads::job_detail(&state, request).await?;
    Ok(shown(&state, &caller, reply, JobDetail::redacted))
}

/// `GET /v1/jobs/{id}/history` ([`reads::job_history`]).
pub async fn history(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    id: PathResult<String>,
) -> Result<SortedJson<JobHistory>, HttpError> {
    let Path(id) = id.map_err(super::bad_path)?;
    super::may_view(&caller, &id)?;
    let reply = reads::job_history(&state, id).await?;
    Ok(shown(&state, &caller, reply, JobHistory::redacted))
}

/// `GET /v1/rejections[?job=&limit=]` ([`rejections::rejections`]).
pub async fn rejections(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    q: QueryResult<ListRejections>,
) -> Result<SortedJson<RejectionsReply>, HttpError> {
    let request = query(q)?;
    if let Some(job) = &request.job {
        super::may_view(&caller, job)?;
    }
    let mut reply = rejections::rejections(&state, request).await?;
    reply
        .rejections
        .retain(|r| caller.sees(jetcron_core::job::namespace_of(&r.job_id)));
    Ok(SortedJson(reply))
}

/// `answer` as an HTTP read may show it to `caller`: `redacted` (its
/// secrets hidden) unless reads need a token and the caller may edit the
/// jobs it sees (who may write a credential may read it back). That is an
/// editor somewhere for a caller of one grant (a token, as every HTTP
/// caller is); one of several grants would need it per job's namespace.
fn shown<T>(
    state: &GatewayState,
    caller: &Caller,
    answer: T,
    redacted: fn(T) -> T,
) -> SortedJson<T> {
    let editor = caller
        .grants
        .highest()
        .is_some_and(|role| role >= jetcron_core::access::Role::Editor);
    match state.http_auth.reads_protected() && editor {
        true => SortedJson(answer),
        false => SortedJson(redacted(answer)),
    }
}
