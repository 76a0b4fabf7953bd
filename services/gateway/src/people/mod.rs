//! People who sign in to the console, as opposed to tokens: local users
//! (a name and a password, [`local_users`]) and the identity provider's
//! users. A person's roles are the union of the bindings of `user:<name>`
//! and of `group:<g>` for each of their groups ([`bound_roles`]), looked
//! up on every request, so a changed binding holds from their next one.

pub mod bound_roles;
pub mod local_users;
pub mod passwords;
pub mod provider;
pub mod provider_claims;
pub mod provider_http;
pub mod sign_in_limits;

use serde::{Deserialize, Serialize};

/// How a person signed in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case", deny_unknown_fields)]
pub enum Via {
    /// A local user's password, at that revision of their record (a
    /// changed password or a removed user ends the session).
    Password { user_revision: u64 },
    /// The identity provider `issuer` (its groups as it said at sign-in).
    Provider { issuer: String },
}

/// A signed-in person: their name (the `user:` of bindings), their groups
/// (the `group:`s) and how they signed in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Person {
    pub name: String,
    pub groups: Vec<String>,
    pub via: Via,
}

impl Person {
    /// What the audit notes of how they signed in.
    pub fn note(&self) -> String {
        match &self.via {
            Via::Password { .. } => "local user".to_string(),
            Via::Provider { issuer } => format!("signed in by {issuer}"),
        }
    }
}
