//! Role bindings: which person or group holds which role in a namespace.
//!
//! Tokens carry their own grant ([`crate::access`]); people (the console's
//! users, the identity provider's users and groups) get theirs from
//! bindings, kept as data in `jetcron_bindings` like jobs: one value per
//! (namespace, subject), its history the audit of who was given what. A
//! subject is `user:<name>` or `group:<name>`; the name is what the
//! identity provider says (an e-mail address, a group's display name), so
//! the bucket key holds a digest of it and the value holds it whole.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::access::{Role, Scope};
use crate::job::FieldError;

/// Longest subject name.
pub const MAX_SUBJECT_NAME: usize = 256;

/// The key part of namespace `*` (a key cannot hold `*`; no namespace
/// starts with `_`).
const ALL_KEY: &str = "_all";

/// Who a binding names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Subject {
    pub kind: SubjectKind,
    pub name: String,
}

/// A person or a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SubjectKind {
    User,
    Group,
}

impl SubjectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SubjectKind::User => "user",
            SubjectKind::Group => "group",
        }
    }
}

impl Subject {
    /// `user:<name>` or `group:<name>`, or a problem naming `field`.
    pub fn parse(field: &str, text: &str) -> Result<Self, FieldError> {
        let bad = |why: String| FieldError::new(field, "invalid_subject", why);
        let (kind, name) = match text.split_once(':') {
            Some(("user", name)) => (SubjectKind::User, name),
            Some(("group", name)) => (SubjectKind::Group, name),
            _ => return Err(bad(format!("{text:?} is not user:<name> or group:<name>"))),
        };
        if name.trim() != name || name.is_empty() {
            return Err(bad(
                "the name must not be empty or start or end with spaces".into(),
            ));
        }
        if name.chars().count() > MAX_SUBJECT_NAME {
            return Err(bad(format!(
                "the name is at most {MAX_SUBJECT_NAME} characters"
            )));
        }
        if name.chars().any(char::is_control) {
            return Err(bad("the name must not contain control characters".into()));
        }
        Ok(Self {
            kind,
            name: name.to_string(),
        })
    }

    /// `user:<name>` or `group:<name>`.
    pub fn text(&self) -> String {
        format!("{}:{}", self.kind.as_str(), self.name)
    }

    /// Its part of a bucket key: the kind and a digest of the name.
    fn key_part(&self) -> String {
        let digest = Sha256::digest(self.name.as_bytes());
        let hex: String = digest[..20].iter().map(|b| format!("{b:02x}")).collect();
        format!("{}.{hex}", self.kind.as_str())
    }
}

/// The key of the binding of `subject` in `scope`.
pub fn binding_key(scope: &Scope, subject: &Subject) -> String {
    format!("{}.{}", scope_key(scope), subject.key_part())
}

/// The keys of every binding in `scope`, as a subject filter.
pub fn scope_keys(scope: &Scope) -> String {
    format!("{}.>", scope_key(scope))
}

fn scope_key(scope: &Scope) -> &str {
    match scope {
        Scope::All => ALL_KEY,
        Scope::One(namespace) => namespace,
    }
}

/// One binding as stored: the value under [`binding_key`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// The namespace, or `*` for every one.
    pub namespace: String,
    /// `user:<name>` or `group:<name>`.
    pub subject: String,
    pub role: Role,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_read_and_key_apart() {
        let alice = Subject::parse("subject", "user:alice@corp.example").expect("user");
        assert_eq!(alice.kind, SubjectKind::User);
        assert_eq!(alice.text(), "user:alice@corp.example");
        let devs = Subject::parse("subject", "group:Billing Devs").expect("group");
        let billing = Scope::One("billing".into());
        let key = binding_key(&billing, &alice);
        assert!(key.starts_with("billing.user."), "{key}");
        assert_ne!(key, binding_key(&billing, &devs));
        assert!(binding_key(&Scope::All, &alice).starts_with("_all.user."));
        assert_eq!(scope_keys(&billing), "billing.>");
        // Safe as KV keys: letters, digits, dots, underscores.
        assert!(key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_'));
    }

    #[test]
    fn bad_subjects_name_the_field() {
        for bad in ["alice", "robot:x", "user:", "user: alice", "group:a\nb"] {
            let problem = Subject::parse("subject", bad).expect_err(bad);
            assert_eq!(
                (problem.field.as_str(), problem.code.as_str()),
                ("subject", "invalid_subject"),
                "{bad}"
            );
        }
        let long = format!("user:{}", "x".repeat(MAX_SUBJECT_NAME + 1));
        assert!(Subject::parse("subject", &long).is_err());
    }
}
