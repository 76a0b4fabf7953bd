//! The namespaces' target policies ([`jetcron_core::policy`]), followed
//! in memory from `jetcron_policies` by every service that checks a job
//! against its namespace's policy: the gateway at a put, the ticker when a
//! definition arrives, the executor before every call.
//!
//! A check never waits for NATS: the book answers from memory, and a
//! service waits for its first read of the bucket ([`PolicyBook::loaded`])
//! before it checks anything. A value that does not decode (a direct
//! `nats kv put` of something else) is kept as unreadable, and every job of
//! its namespace is refused until it is mended: a policy that cannot be
//! read must not open everything. Older revisions than the one held are
//! ignored, so the writer's own copy ([`PolicyBook::written`]) and the
//! watch's may come in either order.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_nats::jetstream::kv;
use jetcron_core::job::{namespace_of, FieldError, JobSpec};
use jetcron_core::policy::{Policy, POLICY_CODE};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::bucket_follow::{self, BucketView};

/// A namespace's policy as the bucket holds it.
#[derive(Debug, Clone)]
pub enum Held {
    Readable(Arc<Policy>),
    /// The value does not decode; why.
    Unreadable(String),
}

/// Every namespace's policy, by namespace, at its revision (`None`: a
/// removed one, kept so that an older copy does not bring it back).
pub struct PolicyBook {
    held: RwLock<HashMap<String, (u64, Option<Held>)>>,
    loaded: watch::Sender<bool>,
}

impl Default for PolicyBook {
    fn default() -> Self {
        Self {
            held: RwLock::default(),
            loaded: watch::Sender::new(false),
        }
    }
}

impl PolicyBook {
    /// Follow `bucket` (`jetcron_policies`) until `shutdown`.
    pub async fn follow(&self, bucket: &kv::Store, shutdown: &CancellationToken) {
        bucket_follow::follow_keys(bucket, ">", self, "target policy", shutdown).await;
    }

    /// Wait for the first read of the bucket to be complete.
    pub async fn loaded(&self) {
        let mut loaded = self.loaded.subscribe();
        // The sender lives as long as `self`.
        let _ = loaded.wait_for(|loaded| *loaded).await;
    }

    /// The policy of `namespace`, if it has one.
    pub fn of(&self, namespace: &str) -> Option<(u64, Held)> {
        let book = self.read();
        let (revision, held) = book.get(namespace)?;
        held.clone().map(|held| (*revision, held))
    }

    /// Take in a policy this process wrote at `revision` (before the watch
    /// brings it), so that its next check already sees it; `None` for a
    /// removed one.
    pub fn written(&self, namespace: &str, revision: u64, policy: Option<Policy>) {
        self.set(
            namespace,
            revision,
            policy.map(|policy| Held::Readable(Arc::new(policy))),
        );
    }

    /// The most runs of `namespace` calling at once, if its policy sets it.
    pub fn max_concurrent_runs(&self, namespace: &str) -> Option<u32> {
        match self
            .read()
            .get(namespace)
            .and_then(|(_, held)| held.as_ref())
        {
            Some(Held::Readable(policy)) => policy.max_concurrent_runs,
            _ => None,
        }
    }

    /// Every use of `job` its namespace's policy does not allow, each
    /// naming the field; none when the namespace has no policy.
    pub fn refusals(&self, job: &JobSpec) -> Vec<FieldError> {
        let namespace = namespace_of(&job.id);
        match self.read().get(namespace).and_then(|(_, held)| held.as_ref()) {
            None => Vec::new(),
            Some(Held::Readable(policy)) => policy.refusals(namespace, job),
            Some(Held::Unreadable(why)) => vec![FieldError::new(
                "id",
                POLICY_CODE,
                format!(
                    "the policy of namespace {namespace:?} in {} does not decode ({why}): its jobs are refused until it is mended",
                    jetcron_core::subjects::POLICIES_BUCKET
                ),
            )],
        }
    }

    fn set(&self, namespace: &str, revision: u64, held: Option<Held>) {
        let mut book = self.write();
        if book
            .get(namespace)
            .is_some_and(|(known, _)| *known > revision)
        {
            return;
        }
        book.insert(namespace.to_string(), (revision, held));
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, (u64, Option<Held>)>> {
        self.held
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, (u64, Option<Held>)>> {
        self.held
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A bucket value as held: a policy, or why it is not one.
pub fn decode(value: &[u8]) -> Held {
    match Policy::parse(value) {
        Ok(policy) => Held::Readable(Arc::new(policy)),
        Err(problems) => Held::Unreadable(
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        ),
    }
}

impl BucketView for PolicyBook {
    fn apply(&self, entry: &kv::Entry) {
        let held = match entry.operation {
            kv::Operation::Put => Some(decode(&entry.value)),
            kv::Operation::Delete | kv::Operation::Purge => None,
        };
        self.set(&entry.key, entry.revision, held);
    }

    fn synced(&self) {
        self.loaded.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(json: &str) -> JobSpec {
        jetcron_core::job::parse_job(json.as_bytes(), None)
            .expect("job")
            .spec
    }

    #[test]
    fn each_namespace_is_checked_against_its_own_policy() {
        let book = PolicyBook::default();
        let shell = |id: &str| {
            job(&format!(
                r#"{{"id":"{id}","schedule":"@daily","target":{{"type":"shell","command":"true"}}}}"#
            ))
        };
        book.written(
            "billing",
            3,
            Some(Policy {
                shell: Some(false),
                ..Policy::default()
            }),
        );
        assert_eq!(book.refusals(&shell("billing.a"))[0].field, "target.type");
        assert!(book.refusals(&shell("ops.a")).is_empty());
        assert!(book.refusals(&shell("a")).is_empty());
        // An older revision (the watch's copy of an earlier write) changes nothing.
        book.written("billing", 2, None);
        assert_eq!(book.refusals(&shell("billing.a")).len(), 1);
        book.written("billing", 4, None);
        assert!(book.refusals(&shell("billing.a")).is_empty());
    }

    #[test]
    fn an_unreadable_policy_refuses_every_job_of_its_namespace() {
        let book = PolicyBook::default();
        book.set("ops", 1, Some(decode(b"{\"shell\":\"no\"}")));
        let refused = book.refusals(&job(
            r#"{"id":"ops.a","schedule":"@daily","target":{"type":"nats","subject":"x.y"}}"#,
        ));
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].code, POLICY_CODE);
        assert!(
            refused[0].message.contains("does not decode"),
            "{refused:?}"
        );
    }
}
