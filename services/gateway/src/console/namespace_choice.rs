//! Which namespace a page is about, and which it offers to pick, for a
//! viewer's grants.
//!
//! A grant of `*` sees every namespace: the page shows the one asked for,
//! or all of them. A token, or a person bound in some namespaces, sees
//! those: the page shows the one asked for among them, else the first, and
//! offers the others; anything else asked for is not shown (the page stays
//! in the viewer's own). A person bound nowhere is told so, not shown an
//! empty page that looks like a namespace without jobs.

use jetcron_core::access::{Grants, Role};
use jetcron_core::api::{ApiError, ErrorCode};

/// What a page shows of the namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chosen {
    /// A grant of `*`: the namespace asked for (`None`: none asked).
    Any(Option<String>),
    /// Some namespaces: the one shown and every one offered (sorted).
    Among { shown: String, offered: Vec<String> },
}

impl Chosen {
    /// The namespace shown (`None`: every one).
    pub fn shown(&self) -> Option<&str> {
        match self {
            Chosen::Any(asked) => asked.as_deref(),
            Chosen::Among { shown, .. } => Some(shown),
        }
    }

    /// Whether the page offers a choice.
    pub fn picks(&self) -> bool {
        match self {
            Chosen::Any(_) => true,
            Chosen::Among { offered, .. } => offered.len() > 1,
        }
    }

    /// The choices a picker offers: `all` for a grant of `*` (the
    /// namespaces held), else the viewer's.
    pub fn offered(&self, all: impl FnOnce() -> Vec<String>) -> Vec<String> {
        match self {
            Chosen::Any(_) => all(),
            Chosen::Among { offered, .. } => offered.clone(),
        }
    }
}

/// The namespace a page needing `role` shows for `grants` when `asked`
/// (a query's namespace, maybe empty) is asked for; refused when they hold
/// `role` nowhere.
pub fn choose(grants: &Grants, role: Role, asked: &str) -> Result<Chosen, ApiError> {
    let asked = asked.trim();
    let Some(namespaces) = grants.namespaces_with(role) else {
        return Ok(Chosen::Any((!asked.is_empty()).then(|| asked.to_string())));
    };
    let offered: Vec<String> = namespaces.into_iter().collect();
    let shown = match offered.iter().find(|n| *n == asked) {
        Some(asked) => asked.clone(),
        None => offered
            .first()
            .cloned()
            .ok_or_else(|| bound_nowhere(role))?,
    };
    Ok(Chosen::Among { shown, offered })
}

/// The refusal of one who holds `role` in no namespace.
fn bound_nowhere(role: Role) -> ApiError {
    let text = match role {
        Role::Viewer => "you hold no role in any namespace yet: an admin gives you one on the Access page, bound to you (user:<your name>) or to one of your groups".to_string(),
        role => format!("this page needs the role {role} in some namespace, and you hold it in none"),
    };
    ApiError::new(ErrorCode::Forbidden, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetcron_core::access::{Grant, Scope};

    fn grant(scope: &str, role: Role) -> Grant {
        Grant {
            scope: Scope::parse("namespace", scope).expect("scope"),
            role,
        }
    }

    #[test]
    fn a_grant_of_all_shows_what_is_asked_or_everything() {
        let admin = Grants::one(Grant::admin_of_all());
        assert_eq!(
            choose(&admin, Role::Viewer, "").expect("all"),
            Chosen::Any(None)
        );
        let ops = choose(&admin, Role::Admin, " ops ").expect("ops");
        assert_eq!(ops.shown(), Some("ops"));
        assert!(ops.picks());
        assert_eq!(ops.offered(|| vec!["x".into()]), ["x"]);
    }

    #[test]
    fn some_namespaces_show_the_asked_one_among_them_or_the_first() {
        let person = Grants::of([grant("ops", Role::Viewer), grant("billing", Role::Editor)]);
        let first = choose(&person, Role::Viewer, "").expect("first");
        assert_eq!(first.shown(), Some("billing"));
        assert!(first.picks());
        assert_eq!(first.offered(Vec::new), ["billing", "ops"]);
        assert_eq!(
            choose(&person, Role::Viewer, "ops").expect("ops").shown(),
            Some("ops")
        );
        // Another namespace is not shown: the page stays in their own.
        assert_eq!(
            choose(&person, Role::Viewer, "secret")
                .expect("own")
                .shown(),
            Some("billing")
        );
        // Where a page needs more, only those namespaces count.
        let editing = choose(&person, Role::Editor, "ops").expect("editor");
        assert_eq!(editing.shown(), Some("billing"));
        assert!(!editing.picks());
    }

    #[test]
    fn one_bound_nowhere_is_told_so() {
        let refused = choose(&Grants::none(), Role::Viewer, "").expect_err("nowhere");
        assert_eq!(refused.code, ErrorCode::Forbidden);
        assert!(refused.message.contains("no role in any namespace"));
        let viewer = Grants::one(grant("ops", Role::Viewer));
        let refused = choose(&viewer, Role::Admin, "ops").expect_err("no admin");
        assert!(refused.message.contains("admin"), "{}", refused.message);
    }
}
