//! Who may do what: a role in a namespace.
//!
//! Teams share one jetcron, and each is given a role in its namespace
//! ([`crate::job::name`]): `viewer` reads jobs, runs and output; `operator`
//! also triggers, pauses, resumes, backfills and kills; `editor` also puts
//! and deletes jobs; `admin` also manages the namespace's tokens. A
//! [`Grant`] of namespace `*` holds its role in every namespace; an admin
//! of `*` manages everything, including what is not in a namespace (alert
//! channels). A refusal names the namespace and the role it needs, and
//! changes nothing ([`forbidden`]).
//!
//! A caller holds [`Grants`], not one grant: a token holds one, but a
//! person's role bindings ([`crate::binding`]) are a union, their own and
//! their groups', in `*` and in single namespaces (viewer of `*` plus
//! editor of `billing`, say). What they may do is what any one of them
//! allows, and a refusal is the one a single grant gives.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::api::{ApiError, ErrorCode, Refusal};
use crate::job::{validate_namespace, FieldError};

/// What a grant allows, each role everything of the one before.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Jobs, runs, output.
    Viewer,
    /// And trigger, pause, resume, backfill, kill.
    Operator,
    /// And put and delete jobs.
    Editor,
    /// And the namespace's tokens.
    Admin,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Viewer, Role::Operator, Role::Editor, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Editor => "editor",
            Role::Admin => "admin",
        }
    }

    /// `text` as a role, or a problem naming `field`.
    pub fn parse(field: &str, text: &str) -> Result<Self, FieldError> {
        Self::ALL
            .into_iter()
            .find(|role| role.as_str() == text)
            .ok_or_else(|| {
                FieldError::new(
                    field,
                    "invalid_role",
                    format!("{text:?} is not a role; use viewer, operator, editor or admin"),
                )
            })
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The namespace a grant holds in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every namespace (written `*`).
    All,
    /// One namespace.
    One(String),
}

/// How [`Scope::All`] is written.
pub const ALL_NAMESPACES: &str = "*";

impl Scope {
    /// `text` (`*` or a namespace) as a scope, or a problem naming `field`.
    pub fn parse(field: &str, text: &str) -> Result<Self, FieldError> {
        if text == ALL_NAMESPACES {
            return Ok(Scope::All);
        }
        validate_namespace(field, text)?;
        Ok(Scope::One(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        match self {
            Scope::All => ALL_NAMESPACES,
            Scope::One(namespace) => namespace,
        }
    }

    /// Whether it holds in `namespace`.
    pub fn covers(&self, namespace: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::One(own) => own == namespace,
        }
    }
}

/// A role in a scope: what one token (or user) may do.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Grant {
    pub scope: Scope,
    pub role: Role,
}

impl Grant {
    /// The grant of the bootstrap tokens: admin of every namespace.
    pub fn admin_of_all() -> Self {
        Self {
            scope: Scope::All,
            role: Role::Admin,
        }
    }

    /// Whether it allows what needs `role` in `namespace`.
    pub fn allows(&self, role: Role, namespace: &str) -> bool {
        self.role >= role && self.scope.covers(namespace)
    }

    /// Whether it allows what needs `role` everywhere (what is in no
    /// namespace, such as alert channels).
    pub fn allows_everywhere(&self, role: Role) -> bool {
        self.role >= role && self.scope == Scope::All
    }

    /// `Ok` when it allows what needs `role` in `namespace`, else the
    /// refusal ([`forbidden`]).
    pub fn require(&self, role: Role, namespace: &str) -> Result<(), ApiError> {
        match self.allows(role, namespace) {
            true => Ok(()),
            false => Err(forbidden(namespace, role)),
        }
    }

    /// `Ok` when it holds `role` at least in its own scope (a selection
    /// then keeps to the namespaces where it does), else the refusal there.
    pub fn require_somewhere(&self, role: Role) -> Result<(), ApiError> {
        match self.role >= role {
            true => Ok(()),
            false => Err(forbidden(self.scope.as_str(), role)),
        }
    }

    /// `Ok` when it allows what needs `role` everywhere, else the refusal.
    pub fn require_everywhere(&self, role: Role) -> Result<(), ApiError> {
        match self.allows_everywhere(role) {
            true => Ok(()),
            false => Err(forbidden(ALL_NAMESPACES, role)),
        }
    }
}

/// The grants a caller holds together, a union: each check passes when
/// any one of them allows it. One grant for a token or a door, several for
/// a person bound through their own and their groups' bindings, none for
/// one signed in but bound to nothing (who may do nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grants(Vec<Grant>);

impl Grants {
    /// Just `grant`.
    pub fn one(grant: Grant) -> Self {
        Self(vec![grant])
    }

    /// No grant at all: signed in but bound to nothing, allowed nothing.
    pub fn none() -> Self {
        Self(Vec::new())
    }

    /// All of `grants`.
    pub fn of(grants: impl IntoIterator<Item = Grant>) -> Self {
        Self(grants.into_iter().collect())
    }

    /// Each grant.
    pub fn grants(&self) -> &[Grant] {
        &self.0
    }

    /// Whether one of them allows what needs `role` in `namespace`.
    pub fn allows(&self, role: Role, namespace: &str) -> bool {
        self.0.iter().any(|grant| grant.allows(role, namespace))
    }

    /// Whether one of them allows what needs `role` everywhere (a grant of
    /// `*`).
    pub fn allows_everywhere(&self, role: Role) -> bool {
        self.0.iter().any(|grant| grant.allows_everywhere(role))
    }

    /// `Ok` when one of them allows what needs `role` in `namespace`, else
    /// the refusal ([`forbidden`]).
    pub fn require(&self, role: Role, namespace: &str) -> Result<(), ApiError> {
        match self.allows(role, namespace) {
            true => Ok(()),
            false => Err(forbidden(namespace, role)),
        }
    }

    /// `Ok` when one of them holds `role` at least in its own scope (a
    /// selection then keeps to the namespaces where one does), else the
    /// refusal in the first one's scope (`*` when there is none), as
    /// [`Grant::require_somewhere`] refuses.
    pub fn require_somewhere(&self, role: Role) -> Result<(), ApiError> {
        if self.0.iter().any(|grant| grant.role >= role) {
            return Ok(());
        }
        let scope = self
            .0
            .first()
            .map_or(ALL_NAMESPACES, |grant| grant.scope.as_str());
        Err(forbidden(scope, role))
    }

    /// `Ok` when one of them allows what needs `role` everywhere, else the
    /// refusal.
    pub fn require_everywhere(&self, role: Role) -> Result<(), ApiError> {
        match self.allows_everywhere(role) {
            true => Ok(()),
            false => Err(forbidden(ALL_NAMESPACES, role)),
        }
    }

    /// The highest role they hold anywhere (`None`: no grant).
    pub fn highest(&self) -> Option<Role> {
        self.0.iter().map(|grant| grant.role).max()
    }

    /// The highest role they hold in `namespace` (`None`: none there).
    pub fn role_in(&self, namespace: &str) -> Option<Role> {
        self.0
            .iter()
            .filter(|grant| grant.scope.covers(namespace))
            .map(|grant| grant.role)
            .max()
    }

    /// What they hold in `namespace` only: each grant that covers it, as a
    /// grant of its role there (a selection across namespaces then stays
    /// within this one).
    pub fn within(&self, namespace: &str) -> Self {
        Self(
            self.0
                .iter()
                .filter(|grant| grant.scope.covers(namespace))
                .map(|grant| Grant {
                    scope: Scope::One(namespace.to_string()),
                    role: grant.role,
                })
                .collect(),
        )
    }

    /// The namespaces where they hold some role: `None` when one of them
    /// covers `*` (every namespace), else the set (empty: no grant).
    pub fn namespaces(&self) -> Option<BTreeSet<String>> {
        self.namespaces_with(Role::Viewer)
    }

    /// The namespaces where they hold `role` at least: `None` when one
    /// such grant covers `*`, else the set (empty: none).
    pub fn namespaces_with(&self, role: Role) -> Option<BTreeSet<String>> {
        self.0
            .iter()
            .filter(|grant| grant.role >= role)
            .map(|grant| match &grant.scope {
                Scope::All => None,
                Scope::One(namespace) => Some(namespace.clone()),
            })
            .collect()
    }
}

/// The refusal of what needs `role` in `namespace`: 403,
/// `{"code":"forbidden","namespace":…,"needs":"<role>"}`.
pub fn forbidden(namespace: &str, role: Role) -> ApiError {
    let mut error = ApiError::new(
        ErrorCode::Forbidden,
        format!("this needs the role {role} in namespace {namespace:?}"),
    );
    error.refused = Some(Box::new(Refusal {
        namespace: namespace.to_string(),
        needs: role.as_str().to_string(),
    }));
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(scope: &str, role: Role) -> Grant {
        Grant {
            scope: Scope::parse("namespace", scope).expect("scope"),
            role,
        }
    }

    #[test]
    fn a_role_holds_what_the_roles_below_it_hold_in_its_namespace_only() {
        let operator = grant("billing", Role::Operator);
        assert!(operator.allows(Role::Viewer, "billing"));
        assert!(operator.allows(Role::Operator, "billing"));
        assert!(!operator.allows(Role::Editor, "billing"));
        assert!(!operator.allows(Role::Viewer, "ops"));
        assert!(!operator.allows(Role::Viewer, "default"));
        assert!(!operator.allows_everywhere(Role::Viewer));
        let admin = Grant::admin_of_all();
        for role in Role::ALL {
            assert!(admin.allows(role, "anything"));
            assert!(admin.allows_everywhere(role));
        }
        assert!(grant("*", Role::Viewer).allows(Role::Viewer, "ops"));
        assert!(!grant("*", Role::Viewer).allows(Role::Operator, "ops"));
    }

    #[test]
    fn a_refusal_names_the_namespace_and_the_role_it_needs() {
        let error = grant("billing", Role::Viewer)
            .require(Role::Editor, "ops")
            .expect_err("refused");
        assert_eq!(error.code, ErrorCode::Forbidden);
        assert_eq!(error.code.http_status(), 403);
        let reply = error.to_reply();
        assert_eq!(reply["error"]["code"], "forbidden");
        assert_eq!(reply["error"]["namespace"], "ops");
        assert_eq!(reply["error"]["needs"], "editor");
    }

    #[test]
    fn grants_allow_what_any_one_of_them_allows() {
        let grants = Grants::of([grant("*", Role::Viewer), grant("billing", Role::Editor)]);
        assert!(grants.allows(Role::Editor, "billing"));
        assert!(grants.allows(Role::Viewer, "ops"));
        assert!(!grants.allows(Role::Editor, "ops"));
        assert!(!grants.allows(Role::Admin, "billing"));
        assert!(grants.allows_everywhere(Role::Viewer));
        assert!(!grants.allows_everywhere(Role::Editor));
        assert!(grants.require(Role::Editor, "billing").is_ok());
        assert!(grants.require_somewhere(Role::Editor).is_ok());
        assert!(grants.require_everywhere(Role::Viewer).is_ok());

        let refused = |error: ApiError| {
            assert_eq!(error.code, ErrorCode::Forbidden);
            let reply = error.to_reply();
            (
                reply["error"]["namespace"].as_str().map(str::to_string),
                reply["error"]["needs"].as_str().map(str::to_string),
            )
        };
        let named =
            |namespace: &str, role: &str| (Some(namespace.to_string()), Some(role.to_string()));
        assert_eq!(
            refused(grants.require(Role::Editor, "ops").expect_err("refused")),
            named("ops", "editor")
        );
        assert_eq!(
            refused(
                grants
                    .require_everywhere(Role::Editor)
                    .expect_err("refused")
            ),
            named("*", "editor")
        );
        assert_eq!(
            refused(grants.require_somewhere(Role::Admin).expect_err("refused")),
            named("*", "admin")
        );
    }

    #[test]
    fn one_grant_refuses_as_the_grant_does() {
        let operator = grant("billing", Role::Operator);
        let grants = Grants::one(operator.clone());
        assert_eq!(grants.grants(), [operator.clone()].as_slice());
        for role in Role::ALL {
            for namespace in ["billing", "ops"] {
                assert_eq!(
                    grants.require(role, namespace),
                    operator.require(role, namespace)
                );
            }
            assert_eq!(
                grants.require_somewhere(role),
                operator.require_somewhere(role)
            );
            assert_eq!(
                grants.require_everywhere(role),
                operator.require_everywhere(role)
            );
        }
    }

    #[test]
    fn no_grant_allows_nothing() {
        let none = Grants::none();
        for role in Role::ALL {
            assert!(!none.allows(role, "billing"));
            assert!(!none.allows_everywhere(role));
            assert!(none.require(role, "billing").is_err());
            assert!(none.require_somewhere(role).is_err());
            assert!(none.require_everywhere(role).is_err());
        }
        assert_eq!(none.highest(), None);
        assert_eq!(none.role_in("billing"), None);
        assert_eq!(none.namespaces(), Some(BTreeSet::new()));
    }

    #[test]
    fn grants_name_their_namespaces_and_highest_roles() {
        let grants = Grants::of([
            grant("billing", Role::Editor),
            grant("ops", Role::Viewer),
            grant("billing", Role::Operator),
        ]);
        assert_eq!(
            grants.namespaces(),
            Some(BTreeSet::from(["billing".to_string(), "ops".to_string()]))
        );
        assert_eq!(grants.highest(), Some(Role::Editor));
        assert_eq!(grants.role_in("billing"), Some(Role::Editor));
        assert_eq!(grants.role_in("ops"), Some(Role::Viewer));
        assert_eq!(grants.role_in("default"), None);

        let union = Grants::of([grant("*", Role::Viewer), grant("billing", Role::Editor)]);
        assert_eq!(union.namespaces(), None);
        let ops = union.within("ops");
        assert!(ops.allows(Role::Viewer, "ops") && !ops.allows(Role::Viewer, "billing"));
        assert!(!ops.allows_everywhere(Role::Viewer));
        assert_eq!(
            union.within("billing").role_in("billing"),
            Some(Role::Editor)
        );
        assert!(Grants::none().within("ops").grants().is_empty());
        assert_eq!(
            union.namespaces_with(Role::Editor),
            Some(BTreeSet::from(["billing".to_string()]))
        );
        assert_eq!(union.namespaces_with(Role::Admin), Some(BTreeSet::new()));
        assert_eq!(
            grants.namespaces_with(Role::Operator),
            Some(BTreeSet::from(["billing".to_string()]))
        );
        assert_eq!(union.highest(), Some(Role::Editor));
        assert_eq!(union.role_in("billing"), Some(Role::Editor));
        assert_eq!(union.role_in("ops"), Some(Role::Viewer));
        assert_eq!(Grants::one(Grant::admin_of_all()).namespaces(), None);
    }

    #[test]
    fn scopes_and_roles_read_back_what_they_write() {
        for role in Role::ALL {
            assert_eq!(Role::parse("role", role.as_str()), Ok(role));
        }
        assert_eq!(
            Role::parse("role", "root").expect_err("no").code,
            "invalid_role"
        );
        assert_eq!(Scope::parse("namespace", "*"), Ok(Scope::All));
        assert_eq!(
            Scope::parse("namespace", "billing").map(|s| s.as_str().to_string()),
            Ok("billing".to_string())
        );
        assert!(Scope::parse("namespace", "a.b").is_err());
        assert!(Scope::parse("namespace", "deliver").is_err());
        assert_eq!(
            Scope::parse("namespace", "default"),
            Ok(Scope::One("default".into()))
        );
    }
}
