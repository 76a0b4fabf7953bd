//! The role bindings of `jetcron_bindings`, followed in memory, so a
//! signed-in person's grants (the union of their own bindings and their
//! groups') are found on every request without a scan of the bucket.
//!
//! A change must hold from the person's next request, on every gateway:
//! before it answers, the gateway reads the bucket stream's last sequence
//! ([`crate::bindings::BindingStore::last_sequence`]) and
//! [`BoundRoles::grants_after`] waits until the watch has brought that far. A watch
//! that does not catch up in time answers nothing, and the request is
//! treated as signed out: a removed role must not linger.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;

use async_nats::jetstream::kv;
use jetcron_core::access::{Grant, Grants, Scope};
use jetcron_core::binding::{Binding, Subject, SubjectKind};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use jetcron_io::bucket_follow::{self, BucketView};

/// How long a request waits for the watch to bring the bucket's last
/// change.
const CATCH_UP: Duration = Duration::from_secs(2);

/// Every binding by key, the highest stream sequence taken in, and
/// whether the watch has caught up with the bucket.
#[derive(Default)]
struct Held {
    bindings: HashMap<String, (u64, Option<(Subject, Grant)>)>,
    seen: u64,
    synced: bool,
}

impl Held {
    /// The sequence requests may trust: what was seen, once caught up.
    fn trusted(&self) -> Option<u64> {
        self.synced.then_some(self.seen)
    }
}

/// The bindings bucket as a map of who holds what.
pub struct BoundRoles {
    held: RwLock<Held>,
    /// The highest stream sequence applied, once the watch has caught up
    /// with what the bucket held when it opened (0 until then); it stands
    /// still while the watch is broken.
    applied: watch::Sender<u64>,
}

impl Default for BoundRoles {
    fn default() -> Self {
        Self {
            held: RwLock::default(),
            applied: watch::Sender::new(0),
        }
    }
}

/// A binding's subject and grant, if its value reads as one.
fn decode(value: &[u8]) -> Option<(Subject, Grant)> {
    let binding: Binding = serde_json::from_slice(value).ok()?;
    let subject = Subject::parse("subject", &binding.subject).ok()?;
    let scope = Scope::parse("namespace", &binding.namespace).ok()?;
    Some((
        subject,
        Grant {
            scope,
            role: binding.role,
        },
    ))
}

impl BoundRoles {
    /// Follow `bucket` (`jetcron_bindings`) until `shutdown`.
    pub async fn follow(&self, bucket: &kv::Store, shutdown: &CancellationToken) {
        bucket_follow::follow_keys(bucket, ">", self, "role bindings", shutdown).await;
    }

    /// The grants of person `name` in `groups`, once the changes up to
    /// stream sequence `last` have been applied; `None` when they were not
    /// within [`CATCH_UP`].
    pub async fn grants_after(&self, last: u64, name: &str, groups: &[String]) -> Option<Grants> {
        let mut applied = self.applied.subscribe();
        if last < *applied.borrow() {
            // The stream is behind what this gateway followed: the bucket
            // was made again or restored. What is held may grant what the
            // bucket no longer does: nobody is signed in until a restart
            // reads it afresh.
            tracing::error!(
                last,
                applied = *applied.borrow(),
                "the bindings bucket is older than this gateway's copy (made again or restored?): people are signed out until the gateway restarts"
            );
            return None;
        }
        tokio::time::timeout(CATCH_UP, applied.wait_for(|applied| *applied >= last))
            .await
            .ok()?
            .ok()?;
        Some(self.held_grants(name, groups))
    }

    /// The grants held now for `name` in `groups`.
    fn held_grants(&self, name: &str, groups: &[String]) -> Grants {
        let held = self.read();
        Grants::of(
            held.bindings
                .values()
                .filter_map(|(_, bound)| bound.as_ref())
                .filter(|(subject, _)| match subject.kind {
                    SubjectKind::User => subject.name == name,
                    SubjectKind::Group => groups.contains(&subject.name),
                })
                .map(|(_, grant)| grant.clone()),
        )
    }

    /// Take in the value of `key` at stream sequence `revision` (`None`:
    /// removed); an older revision than the one held is ignored.
    fn set(&self, key: &str, revision: u64, bound: Option<(Subject, Grant)>) {
        let mut held = self.write();
        held.seen = held.seen.max(revision);
        let newer = held
            .bindings
            .get(key)
            .is_none_or(|(known, _)| *known <= revision);
        if newer {
            held.bindings.insert(key.to_string(), (revision, bound));
        }
        self.publish(&held);
    }

    /// Tell waiting requests how far the copy can be trusted.
    fn publish(&self, held: &Held) {
        if let Some(trusted) = held.trusted() {
            self.applied.send_if_modified(|applied| {
                let newer = trusted > *applied;
                *applied = (*applied).max(trusted);
                newer
            });
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Held> {
        self.held
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Held> {
        self.held
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl BucketView for BoundRoles {
    fn apply(&self, entry: &kv::Entry) {
        let bound = match entry.operation {
            kv::Operation::Put => {
                let bound = decode(&entry.value);
                if bound.is_none() {
                    tracing::warn!(key = %entry.key, "a value of the bindings bucket is no binding; it grants nothing");
                }
                bound
            }
            kv::Operation::Delete | kv::Operation::Purge => None,
        };
        self.set(&entry.key, entry.revision, bound);
    }

    fn synced(&self) {
        let mut held = self.write();
        held.synced = true;
        self.publish(&held);
    }

    fn unsynced(&self) {
        // Until the reopened watch catches up, requests wait (and fail
        // closed) rather than trust a map that may miss a removal.
        self.write().synced = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetcron_core::access::Role;

    fn binding(namespace: &str, subject: &str, role: Role) -> Option<(Subject, Grant)> {
        let value = serde_json::to_vec(&Binding {
            namespace: namespace.into(),
            subject: subject.into(),
            role,
        })
        .expect("encode");
        decode(&value)
    }

    #[test]
    fn a_person_holds_their_own_and_their_groups_bindings() {
        let roles = BoundRoles::default();
        roles.set(
            "billing.user.a",
            1,
            binding("billing", "user:alice", Role::Editor),
        );
        roles.set("ops.group.b", 2, binding("ops", "group:sre", Role::Viewer));
        roles.set(
            "_all.group.c",
            3,
            binding("*", "group:auditors", Role::Viewer),
        );
        roles.set("ops.user.d", 4, binding("ops", "user:bob", Role::Admin));
        let alice = roles.held_grants("alice", &["sre".into()]);
        assert!(alice.allows(Role::Editor, "billing"));
        assert!(alice.allows(Role::Viewer, "ops"));
        assert!(!alice.allows(Role::Operator, "ops"));
        assert!(!alice.allows(Role::Viewer, "default"));
        let auditor = roles.held_grants("carol", &["auditors".into()]);
        assert!(auditor.allows_everywhere(Role::Viewer));
        assert!(roles.held_grants("dave", &[]).grants().is_empty());
        // A group named like a user is not the user, nor the other way round.
        assert!(roles.held_grants("sre", &[]).grants().is_empty());
        assert!(roles
            .held_grants("x", &["alice".into()])
            .grants()
            .is_empty());
    }

    #[test]
    fn a_removal_or_a_newer_value_wins_and_an_older_one_does_not() {
        let roles = BoundRoles::default();
        roles.set(
            "billing.user.a",
            5,
            binding("billing", "user:alice", Role::Editor),
        );
        roles.set(
            "billing.user.a",
            4,
            binding("billing", "user:alice", Role::Admin),
        );
        assert_eq!(
            roles.held_grants("alice", &[]).role_in("billing"),
            Some(Role::Editor)
        );
        roles.set("billing.user.a", 6, None);
        assert!(roles.held_grants("alice", &[]).grants().is_empty());
        assert!(decode(b"{\"namespace\":\"billing\"}").is_none());
    }

    #[tokio::test]
    async fn a_stream_behind_the_copy_signs_nobody_in() {
        let roles = BoundRoles::default();
        roles.set(
            "billing.user.a",
            9,
            binding("billing", "user:alice", Role::Admin),
        );
        roles.set("ops.user.b", 9, None);
        roles.synced();
        assert!(roles.grants_after(9, "alice", &[]).await.is_some());
        assert!(roles.grants_after(3, "alice", &[]).await.is_none());
    }

    #[tokio::test]
    async fn requests_wait_for_the_first_catch_up() {
        let roles = BoundRoles::default();
        roles.set("ops.user.b", 7, None);
        assert_eq!(*roles.applied.borrow(), 0, "not caught up yet");
        roles.synced();
        assert_eq!(*roles.applied.borrow(), 7);
        roles.set("ops.user.b", 9, None);
        assert_eq!(*roles.applied.borrow(), 9);
        roles.unsynced();
        roles.set("ops.user.b", 11, None);
        assert_eq!(*roles.applied.borrow(), 9, "a broken watch holds back");
    }
}
