//! The role binding operations ([`jetcron_core::binding`]): list, set and
//! remove who holds which role in a namespace, in `jetcron_bindings`.
//!
//! A namespace's admins manage its bindings; the bindings of `*` (a role
//! in every namespace) only an admin of `*`. Each write carries its
//! author's headers ([`crate::audited`]), so the bucket's history says who
//! gave whom which role; a listing shows each binding's last author.

use async_nats::jetstream::kv;
use futures::TryStreamExt as _;
use jetcron_core::access::{Role, Scope};
use jetcron_core::api::ApiError;
use jetcron_core::audit::Author;
use jetcron_core::binding::{binding_key, Binding, Subject};
use jetcron_core::time_format::rfc3339_millis;
use serde::{Deserialize, Serialize};

use crate::audited::{AuditedWrites, WriteError};
use crate::caller::Caller;
use crate::GatewayState;

/// The bindings bucket.
#[derive(Clone)]
pub struct BindingStore {
    bucket: kv::Store,
    writes: AuditedWrites,
}

/// `PUT /v1/namespaces/{namespace}/bindings/{subject}`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetBinding {
    /// `viewer`, `operator`, `editor` or `admin`.
    #[schemars(extend("enum" = ["viewer", "operator", "editor", "admin"]))]
    pub role: String,
}

/// A binding as listed: what it gives, when, and who gave it.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ListedBinding {
    #[serde(flatten)]
    pub binding: Binding,
    pub revision: u64,
    pub updated_at: String,
    /// Who wrote this revision (`kv`: straight into the bucket).
    pub author: Option<Author>,
}

/// `GET /v1/namespaces/{namespace}/bindings`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct BindingsReply {
    pub ok: bool,
    pub namespace: String,
    pub bindings: Vec<ListedBinding>,
}

/// `PUT …/bindings/{subject}`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct BindingSetReply {
    pub ok: bool,
    pub binding: Binding,
    pub revision: u64,
}

/// `DELETE …/bindings/{subject}`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct BindingRemovedReply {
    pub ok: bool,
    pub namespace: String,
    pub subject: String,
    pub removed: bool,
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::unavailable(format!(
        "cannot use {}: {e}",
        jetcron_core::subjects::BINDINGS_BUCKET
    ))
}

impl BindingStore {
    pub fn new(bucket: kv::Store, js: async_nats::jetstream::Context) -> Self {
        Self {
            writes: AuditedWrites::new(bucket.clone(), js),
            bucket,
        }
    }

    /// The sequence of the bucket stream's last message: every binding
    /// change made so far is at or below it.
    pub async fn last_sequence(&self) -> Result<u64, ApiError> {
        let info = self.bucket.stream.get_info().await.map_err(unavailable)?;
        Ok(info.state.last_sequence)
    }

    /// Every binding of `scope`, by subject, with its revision's author.
    async fn list(&self, scope: &Scope) -> Result<Vec<ListedBinding>, ApiError> {
        let prefix = jetcron_core::binding::scope_keys(scope);
        let prefix = prefix.trim_end_matches('>');
        let keys: Vec<String> = match self.bucket.keys().await {
            Ok(keys) => keys.try_collect().await.map_err(unavailable)?,
            Err(e) => return Err(unavailable(e)),
        };
        let mut listed = Vec::new();
        for key in keys.iter().filter(|k| k.starts_with(prefix)) {
            // One read: the key's last message holds the value, its
            // revision and time, and the author's headers. A removed
            // binding, or a value written by hand that is no binding, is
            // left out.
            let Some(message) = jetcron_io::kv_entry::last_value(&self.bucket, key)
                .await
                .map_err(unavailable)?
            else {
                continue;
            };
            let Ok(binding) = serde_json::from_slice::<Binding>(&message.payload) else {
                continue;
            };
            listed.push(ListedBinding {
                binding,
                revision: message.sequence,
                updated_at: rfc3339_millis(message.time.with_timezone(&chrono::Utc)),
                author: Some(jetcron_io::authors::author_in(Some(&message.headers))),
            });
        }
        listed.sort_by(|a, b| a.binding.subject.cmp(&b.binding.subject));
        Ok(listed)
    }
}

/// `namespace` (or `*`) and `subject` of a request, checked, and the
/// caller an admin there.
fn checked(caller: &Caller, namespace: &str, subject: &str) -> Result<(Scope, Subject), ApiError> {
    let scope = Scope::parse("namespace", namespace)
        .map_err(|p| ApiError::invalid_field("namespace", p.message))?;
    administer(caller, &scope)?;
    let subject = Subject::parse("subject", subject)
        .map_err(|p| ApiError::invalid_field("subject", p.message))?;
    Ok((scope, subject))
}

/// `Ok` when `caller` manages the bindings of `scope`.
fn administer(caller: &Caller, scope: &Scope) -> Result<(), ApiError> {
    match scope {
        Scope::All => caller.grants.require_everywhere(Role::Admin),
        Scope::One(namespace) => caller.grants.require(Role::Admin, namespace),
    }
}

/// The bindings of `namespace` (`*`: those of every namespace at once).
pub async fn list(
    state: &GatewayState,
    caller: &Caller,
    namespace: &str,
) -> Result<BindingsReply, ApiError> {
    let scope = Scope::parse("namespace", namespace)
        .map_err(|p| ApiError::invalid_field("namespace", p.message))?;
    administer(caller, &scope)?;
    Ok(BindingsReply {
        ok: true,
        namespace: scope.as_str().to_string(),
        bindings: state.bindings.list(&scope).await?,
    })
}

/// Give `subject` the role of `request` in `namespace`.
pub async fn set(
    state: &GatewayState,
    caller: &Caller,
    namespace: &str,
    subject: &str,
    request: SetBinding,
) -> Result<BindingSetReply, ApiError> {
    let (scope, subject) = checked(caller, namespace, subject)?;
    let role = Role::parse("role", &request.role)
        .map_err(|p| ApiError::invalid_field("role", p.message))?;
    let binding = Binding {
        namespace: scope.as_str().to_string(),
        subject: subject.text(),
        role,
    };
    let value =
        serde_json::to_vec(&binding).map_err(|e| ApiError::internal("encode the binding", e))?;
    let key = binding_key(&scope, &subject);
    let revision = state
        .bindings
        .writes
        .put(&key, value.into(), &caller.author())
        .await
        .map_err(|e| match e {
            WriteError::Unavailable(e) => unavailable(format!("{e:#}")),
            WriteError::Exists | WriteError::WrongRevision => unavailable("the write was refused"),
        })?;
    tracing::info!(namespace = %binding.namespace, subject = %binding.subject, %role, by = %caller.actor, "role bound");
    Ok(BindingSetReply {
        ok: true,
        binding,
        revision,
    })
}

/// Remove the binding of `subject` in `namespace`.
pub async fn remove(
    state: &GatewayState,
    caller: &Caller,
    namespace: &str,
    subject: &str,
) -> Result<BindingRemovedReply, ApiError> {
    let (scope, subject) = checked(caller, namespace, subject)?;
    let key = binding_key(&scope, &subject);
    let current = state
        .bindings
        .bucket
        .entry(&key)
        .await
        .map_err(unavailable)?
        .filter(|e| e.operation == kv::Operation::Put);
    let removed = match current {
        None => false,
        Some(entry) => {
            state
                .bindings
                .writes
                .delete(&key, entry.revision, &caller.author())
                .await
                .map_err(|e| match e {
                    WriteError::Unavailable(e) => unavailable(format!("{e:#}")),
                    WriteError::Exists | WriteError::WrongRevision => ApiError::conflict(
                        "subject",
                        "the binding changed meanwhile; read it and try again",
                    ),
                })?;
            true
        }
    };
    Ok(BindingRemovedReply {
        ok: true,
        namespace: scope.as_str().to_string(),
        subject: subject.text(),
        removed,
    })
}
