//! Who is calling, and what they may do: an actor (for the audit) and
//! grants (roles in namespaces, a union, [`jetcron_core::access`]).
//!
//! Every door makes one. Where the grants are checked: in the operation
//! itself when more than one door calls it (every write, and the job reads
//! the NATS API serves: `jobs::requests::{get, list}`), in the HTTP adapter
//! for the reads only HTTP serves (a job's detail, history and runs, the
//! run listing, statistics, rejections, channels), always before anything
//! is changed or shown. The doors:
//! - HTTP: the bearer token's ([`crate::http::auth`]): a scoped token's
//!   grant and `token:<id>`, a bootstrap token (`--api-token`) admin of
//!   every namespace, and where reads are open a read without a token is
//!   an anonymous viewer of every namespace;
//! - NATS, `jetcron.api.<endpoint>`: admin of every namespace (nats-server's
//!   permissions decide who may send there, [`crate::nats_api`]);
//! - the console: a session's token's, or a person's union of their own and
//!   their groups' bindings ([`crate::people`]), `user:<name>`.

use jetcron_core::access::{Grant, Grants, Role, Scope};
use jetcron_core::audit::{Author, Door};

/// A request's caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Who, as the audit names them (`token:<id>`, `admin-token`,
    /// `anonymous`, `nats`).
    pub actor: String,
    /// What they may do: what any one of these allows.
    pub grants: Grants,
    /// The door they came through (for the audit).
    pub door: Door,
    /// What the actor is, where there is more to say (a token's description).
    pub note: Option<String>,
}

impl Caller {
    /// A bootstrap token of `--api-token` / `--api-token-file`.
    pub fn admin_token() -> Self {
        Self {
            actor: "admin-token".into(),
            door: Door::Http,
            note: None,
            grants: Grants::one(Grant::admin_of_all()),
        }
    }

    /// The console's signed-in user: sessions are signed with a bootstrap
    /// token, so admin of every namespace.
    pub fn console() -> Self {
        Self {
            actor: "console".into(),
            door: Door::Console,
            note: None,
            grants: Grants::one(Grant::admin_of_all()),
        }
    }

    /// A person signed in to the console, with the union of their
    /// bindings' and their groups' grants; the audit names them
    /// `user:<name>`.
    pub fn person(person: &crate::people::Person, grants: Grants) -> Self {
        Self {
            actor: format!("user:{}", person.name),
            door: Door::Console,
            note: Some(person.note()),
            grants,
        }
    }

    /// The person's name, when the caller is one.
    pub fn person_name(&self) -> Option<&str> {
        self.actor.strip_prefix("user:")
    }

    /// A read without a token where reads are open.
    pub fn anonymous_reader() -> Self {
        Self {
            actor: "anonymous".into(),
            door: Door::Http,
            note: None,
            grants: Grants::one(Grant {
                scope: Scope::All,
                role: Role::Viewer,
            }),
        }
    }

    /// A request on the NATS API's subjects, which nats-server guards.
    pub fn nats() -> Self {
        Self {
            actor: "nats".into(),
            door: Door::Nats,
            note: None,
            grants: Grants::one(Grant::admin_of_all()),
        }
    }

    /// The author of what it writes.
    pub fn author(&self) -> Author {
        Author {
            actor: self.actor.clone(),
            door: self.door,
            note: self.note.clone(),
        }
    }

    /// Whether it sees `namespace`'s jobs and runs.
    pub fn sees(&self, namespace: &str) -> bool {
        self.grants.allows(Role::Viewer, namespace)
    }

    /// `Ok` when it may read job `id` (a viewer of its namespace). An id
    /// that is no job name passes: the operation refuses it with its field.
    pub fn may_view(&self, id: &str) -> Result<(), jetcron_core::api::ApiError> {
        if jetcron_core::job::validate_id(id).is_err() {
            return Ok(());
        }
        self.grants
            .require(Role::Viewer, jetcron_core::job::namespace_of(id))
    }

    /// The one namespace it is limited to, if it is: every grant is in
    /// that one namespace. A person bound in several namespaces (or in
    /// none) gets `None`, as an admin of `*` does, and the pages then need
    /// a picker of their namespaces (issue 42's later step).
    pub fn only_namespace(&self) -> Option<&str> {
        let mut scopes = self.grants.grants().iter().map(|grant| &grant.scope);
        match scopes.next()? {
            Scope::All => None,
            Scope::One(namespace) => scopes
                .all(|scope| matches!(scope, Scope::One(other) if other == namespace))
                .then_some(namespace.as_str()),
        }
    }
}
