//! Who a verified ID token names: the person's name (the claim
//! `--oidc-user-claim` says: `email`, `preferred_username`, `sub`, or
//! another string claim such as Entra ID's `oid`) and
//! their groups (the claim `--oidc-groups-claim` says, `groups` by
//! default). Called only with claims whose signature, issuer, audience,
//! expiry and nonce the `openidconnect` crate has verified.

use jetcron_core::binding::MAX_SUBJECT_NAME;
use serde_json::Value;

/// Most groups kept of one person (Microsoft Entra ID stops listing at
/// 200 too, and says "overage" instead: docs/security.md).
pub const MAX_GROUPS: usize = 200;

/// The claim that names a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserClaim {
    /// `email`, taken only when the provider says it is verified
    /// (`email_verified: true`): an address a user may set themselves must
    /// not pick whose bindings they get.
    Email,
    PreferredUsername,
    /// `sub`: stable, but opaque at most providers.
    Subject,
    /// Another claim holding a string (Entra ID's `oid`).
    Other(String),
}

impl UserClaim {
    /// `email`, `preferred_username`, `sub`, or another claim's name.
    pub fn parse(text: &str) -> Result<Self, String> {
        let plain = |c: char| c.is_ascii_alphanumeric() || c == '_';
        match text {
            "email" => Ok(Self::Email),
            "preferred_username" => Ok(Self::PreferredUsername),
            "sub" => Ok(Self::Subject),
            other if !other.is_empty() && other.chars().all(plain) => {
                Ok(Self::Other(other.to_string()))
            }
            other => Err(format!(
                "--oidc-user-claim {other:?}: email, preferred_username, sub, or another claim's name (letters, digits, _)"
            )),
        }
    }
}

/// The claims a name is read from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamingClaims {
    pub subject: String,
    pub email: Option<String>,
    pub email_verified: Option<bool>,
    pub preferred_username: Option<String>,
    /// Every other claim.
    pub others: serde_json::Map<String, Value>,
}

/// The person's name by `claim`, or why there is none usable.
pub fn name_of(claim: &UserClaim, claims: &NamingClaims) -> Result<String, String> {
    let name = match claim {
        UserClaim::Other(other) => claims
            .others
            .get(other)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("the ID token has no string claim {other:?}"))?,
        UserClaim::Email => {
            if claims.email_verified != Some(true) {
                return Err("the provider does not say the e-mail address is verified (email_verified); name people by another claim (--oidc-user-claim)".into());
            }
            claims
                .email
                .clone()
                .ok_or("the ID token has no email claim (is the scope `email` asked for?)")?
        }
        UserClaim::PreferredUsername => claims
            .preferred_username
            .clone()
            .ok_or("the ID token has no preferred_username claim")?,
        UserClaim::Subject => claims.subject.clone(),
    };
    usable(&name)
        .then_some(name)
        .ok_or_else(|| "the name is empty, too long or has control characters".into())
}

/// Whether `name` can be a binding's `user:` or `group:` name.
fn usable(name: &str) -> bool {
    !name.is_empty()
        && name.trim() == name
        && name.chars().count() <= MAX_SUBJECT_NAME
        && !name.chars().any(char::is_control)
}

/// The groups in claim `value`: a list of strings (or one string), each
/// usable as a binding's name, at most [`MAX_GROUPS`]; what is not is
/// left out, and said so in the second part.
pub fn groups_of(value: Option<&Value>) -> (Vec<String>, Option<String>) {
    let listed: Vec<&Value> = match value {
        None | Some(Value::Null) => return (Vec::new(), None),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(one @ Value::String(_)) => vec![one],
        Some(_) => return (Vec::new(), Some("the groups claim is not a list".into())),
    };
    let mut groups: Vec<String> = listed
        .iter()
        .filter_map(|v| v.as_str())
        .filter(|g| usable(g))
        .map(str::to_string)
        .collect();
    let mut left_out = listed.len() - groups.len();
    groups.sort();
    groups.dedup();
    if groups.len() > MAX_GROUPS {
        left_out += groups.len() - MAX_GROUPS;
        groups.truncate(MAX_GROUPS);
    }
    let note = (left_out > 0)
        .then(|| format!("{left_out} groups left out (not names, or past {MAX_GROUPS})"));
    (groups, note)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims() -> NamingClaims {
        NamingClaims {
            subject: "248289761001".into(),
            email: Some("alice@corp.example".into()),
            email_verified: Some(true),
            preferred_username: Some("alice".into()),
            others: serde_json::Map::new(),
        }
    }

    #[test]
    fn the_configured_claim_names_the_person() {
        let named = |claim: &UserClaim, claims: &NamingClaims| name_of(claim, claims);
        assert_eq!(
            named(&UserClaim::Email, &claims()),
            Ok("alice@corp.example".into())
        );
        assert_eq!(
            named(&UserClaim::PreferredUsername, &claims()),
            Ok("alice".into())
        );
        assert_eq!(
            named(&UserClaim::Subject, &claims()),
            Ok("248289761001".into())
        );
        for verified in [Some(false), None] {
            let unverified = NamingClaims {
                email_verified: verified,
                ..claims()
            };
            assert!(
                named(&UserClaim::Email, &unverified).is_err(),
                "{verified:?}"
            );
        }
        let bare = NamingClaims {
            subject: "x".into(),
            email_verified: Some(true),
            ..NamingClaims::default()
        };
        let refused = named(&UserClaim::Email, &bare).expect_err("no email");
        assert!(refused.contains("scope"), "{refused}");
        let odd = NamingClaims {
            preferred_username: Some("al\nice".into()),
            ..claims()
        };
        assert!(named(&UserClaim::PreferredUsername, &odd).is_err());
        let oid = UserClaim::parse("oid").expect("oid");
        let entra = NamingClaims {
            others: json!({"oid": "00000000-0000-0000-66f3-3332eca7ea81"})
                .as_object()
                .cloned()
                .expect("map"),
            ..claims()
        };
        assert_eq!(
            named(&oid, &entra),
            Ok("00000000-0000-0000-66f3-3332eca7ea81".into())
        );
        assert!(named(&oid, &claims()).is_err());
        assert!(UserClaim::parse("a b").is_err() && UserClaim::parse("").is_err());
    }

    #[test]
    fn groups_are_names_from_a_list_or_one_string() {
        let (groups, note) = groups_of(Some(&json!(["ops", "billing-devs", "ops"])));
        assert_eq!(groups, ["billing-devs", "ops"]);
        assert_eq!(note, None);
        assert_eq!(groups_of(Some(&json!("sre"))).0, ["sre"]);
        assert_eq!(groups_of(None), (Vec::new(), None));
        let (groups, note) = groups_of(Some(&json!(["ok", 7, "", "bad\u{0}"])));
        assert_eq!(groups, ["ok"]);
        assert!(note.expect("note").starts_with("3 groups left out"));
        assert!(groups_of(Some(&json!({"a": 1}))).1.is_some());
        let many: Vec<String> = (0..250).map(|i| format!("g{i:03}")).collect();
        let (groups, note) = groups_of(Some(&json!(many)));
        assert_eq!(groups.len(), MAX_GROUPS);
        assert!(note.is_some());
    }
}
