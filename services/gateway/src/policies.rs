//! The policy operations: read, set and remove a namespace's target policy
//! ([`jetcron_core::policy`]) in `jetcron_policies`.
//!
//! A namespace's viewers read its policy; its admins set and remove it,
//! unless it is `locked`: then only an admin of `*` may, and only an admin
//! of `*` locks one. A policy set here is taken into this gateway's
//! [`PolicyBook`] at once, so the next put through this gateway is checked
//! against it; the other services see it within their watch's delay.
//! Setting a policy does not change any job: the answer lists the jobs of
//! the namespace it refuses (each fire of those is refused by the
//! executors until the job or the policy changes).

use std::sync::Arc;

use async_nats::jetstream::kv;
use jetcron_core::access::Role;
use jetcron_core::api::ApiError;
use jetcron_core::job::{validate_namespace, FieldError};
use jetcron_core::policy::Policy;
use jetcron_io::policy_book::{Held, PolicyBook};
use serde::Serialize;

use crate::caller::Caller;
use crate::GatewayState;

/// Jobs named in a put's answer as refused by the new policy, at most.
const REFUSED_LISTED: usize = 100;

/// The policies bucket and this gateway's book of it.
#[derive(Clone)]
pub struct PolicyStore {
    bucket: kv::Store,
    book: Arc<PolicyBook>,
}

/// `GET /v1/namespaces/{namespace}/policy`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PolicyReply {
    pub ok: bool,
    pub namespace: String,
    /// `null`: the namespace has no policy, its jobs may use any target.
    pub policy: Option<Policy>,
    /// The policy's revision in `jetcron_policies` (0 without one).
    pub revision: u64,
    /// Why the stored value is no policy (written past the API): every
    /// job of the namespace is refused until an admin of `*` sets it again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

/// `PUT /v1/namespaces/{namespace}/policy`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PolicySetReply {
    pub ok: bool,
    pub namespace: String,
    pub policy: Policy,
    pub revision: u64,
    /// Jobs of the namespace this policy refuses (the first 100), with
    /// why: their fires are refused until they or the policy change.
    /// `null` when the jobs could not be read (the policy is set).
    pub refused_jobs: Option<Vec<RefusedJob>>,
}

/// A job the policy refuses, and every refusal.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct RefusedJob {
    pub id: String,
    pub refusals: Vec<FieldError>,
}

/// `DELETE /v1/namespaces/{namespace}/policy`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PolicyRemovedReply {
    pub ok: bool,
    pub namespace: String,
    pub removed: bool,
}

fn unavailable(e: impl std::error::Error + Send + Sync + 'static) -> ApiError {
    ApiError::unavailable(e)
}

impl PolicyStore {
    pub fn new(bucket: kv::Store, book: Arc<PolicyBook>) -> Self {
        Self { bucket, book }
    }

    /// The stored policy of `namespace` and its revision.
    async fn current(&self, namespace: &str) -> Result<Option<(u64, Held)>, ApiError> {
        let entry = self.bucket.entry(namespace).await.map_err(unavailable)?;
        Ok(entry
            .filter(|e| e.operation == kv::Operation::Put)
            .map(|e| (e.revision, jetcron_io::policy_book::decode(&e.value))))
    }
}

/// `namespace` checked as a path's namespace.
fn checked_namespace(namespace: &str) -> Result<(), ApiError> {
    validate_namespace("namespace", namespace)
        .map_err(|p| ApiError::invalid_field("namespace", p.message))
}

/// Read `namespace`'s policy (a viewer of it).
pub async fn get(
    state: &GatewayState,
    caller: &Caller,
    namespace: &str,
) -> Result<PolicyReply, ApiError> {
    checked_namespace(namespace)?;
    caller.grants.require(Role::Viewer, namespace)?;
    let (revision, policy, unreadable) = match state.policies.current(namespace).await? {
        None => (0, None, None),
        Some((revision, Held::Readable(policy))) => (revision, Some((*policy).clone()), None),
        Some((revision, Held::Unreadable(why))) => (revision, None, Some(why)),
    };
    Ok(PolicyReply {
        ok: true,
        namespace: namespace.to_string(),
        policy,
        revision,
        unreadable,
    })
}

/// Whether `caller` may change `namespace`'s policy from `current` to one
/// `locked` or not: an admin of the namespace, an admin of `*` where
/// either is locked.
fn may_change(
    caller: &Caller,
    namespace: &str,
    current: Option<&Held>,
    locking: bool,
) -> Result<(), ApiError> {
    let locked = match current {
        Some(Held::Readable(policy)) => policy.locked,
        // Nobody knows whether an unreadable one was locked.
        Some(Held::Unreadable(_)) => true,
        None => false,
    };
    match locked || locking {
        true => caller.grants.require_everywhere(Role::Admin).map(|_| ()),
        false => caller.grants.require(Role::Admin, namespace),
    }
}

/// Set `namespace`'s policy to the one in `body`.
pub async fn put(
    state: &GatewayState,
    caller: &Caller,
    namespace: &str,
    body: &[u8],
) -> Result<PolicySetReply, ApiError> {
    checked_namespace(namespace)?;
    // A refusal for the role comes before what the body says.
    caller.grants.require(Role::Admin, namespace)?;
    let policy = Policy::parse(body).map_err(ApiError::invalid_request)?;
    let current = state.policies.current(namespace).await?;
    may_change(
        caller,
        namespace,
        current.as_ref().map(|(_, held)| held),
        policy.locked,
    )?;
    let value =
        serde_json::to_vec(&policy).map_err(|e| ApiError::internal("encode the policy", e))?;
    let revision = state
        .policies
        .bucket
        .put(namespace, value.into())
        .await
        .map_err(unavailable)?;
    state
        .policies
        .book
        .written(namespace, revision, Some(policy.clone()));
    tracing::info!(%namespace, revision, by = %caller.actor, "target policy set");
    Ok(PolicySetReply {
        ok: true,
        namespace: namespace.to_string(),
        refused_jobs: refused_jobs(state, namespace, &policy).await,
        policy,
        revision,
    })
}

/// Remove `namespace`'s policy: its jobs may use any target again.
pub async fn delete(
    state: &GatewayState,
    caller: &Caller,
    namespace: &str,
) -> Result<PolicyRemovedReply, ApiError> {
    checked_namespace(namespace)?;
    caller.grants.require(Role::Admin, namespace)?;
    let Some((revision, held)) = state.policies.current(namespace).await? else {
        return Ok(PolicyRemovedReply {
            ok: true,
            namespace: namespace.to_string(),
            removed: false,
        });
    };
    may_change(caller, namespace, Some(&held), false)?;
    state
        .policies
        .bucket
        .delete(namespace)
        .await
        .map_err(unavailable)?;
    // The marker's revision is past the policy's, so no copy of the
    // removed policy is newer than this.
    state.policies.book.written(namespace, revision + 1, None);
    tracing::info!(%namespace, by = %caller.actor, "target policy removed");
    Ok(PolicyRemovedReply {
        ok: true,
        namespace: namespace.to_string(),
        removed: true,
    })
}

/// The jobs of `namespace` that `policy` refuses, the first
/// [`REFUSED_LISTED`]; `None` when they cannot be read.
async fn refused_jobs(
    state: &GatewayState,
    namespace: &str,
    policy: &Policy,
) -> Option<Vec<RefusedJob>> {
    let jobs = match state.jobs.valid_in(namespace).await {
        Ok(jobs) => jobs,
        Err(e) => {
            tracing::warn!(%namespace, error = %format!("{e:#}"), "policy set; its namespace's jobs could not be read to list those it refuses");
            return None;
        }
    };
    let refused = jobs
        .into_iter()
        .filter_map(|job| {
            let refusals = policy.refusals(namespace, &job.spec);
            (!refusals.is_empty()).then(|| RefusedJob {
                id: job.spec.id.clone(),
                refusals,
            })
        })
        .take(REFUSED_LISTED)
        .collect();
    Some(refused)
}
