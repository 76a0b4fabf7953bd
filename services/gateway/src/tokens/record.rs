//! What is kept of a token, and its text (`jct_<id>_<secret>`): no I/O.

use chrono::{DateTime, Utc};
use jetcron_core::access::{Grant, Grants, Role, Scope};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

/// What every token's text starts with (a secret scanner can find leaked
/// ones).
pub const TOKEN_PREFIX: &str = "jct_";

/// A token as `jetcron_tokens` keeps it: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRecord {
    /// Its id (the bucket's key, the middle of its text).
    pub id: String,
    /// The namespace it acts in (`*`: every one).
    pub namespace: String,
    /// Its role there.
    pub role: Role,
    /// What it is for, as its maker said.
    pub description: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339; none: it does not expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Who made it (`token:<id>`, `admin-token`).
    pub created_by: String,
    /// Hex SHA-256 of its secret.
    #[schemars(skip)]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secret_sha256: String,
}

impl TokenRecord {
    /// Its grant, when its fields still read (a record written by hand may
    /// not).
    pub fn grant(&self) -> Option<Grant> {
        let scope = Scope::parse("namespace", &self.namespace).ok()?;
        Some(Grant {
            scope,
            role: self.role,
        })
    }

    /// The caller it stands for through `door`, when its fields still read.
    pub fn caller(&self, door: jetcron_core::audit::Door) -> Option<crate::caller::Caller> {
        Some(crate::caller::Caller {
            actor: format!("token:{}", self.id),
            grants: Grants::one(self.grant()?),
            door,
            note: Some(self.description.clone()),
        })
    }

    /// Whether it has expired at `now` (a record whose expiry does not read
    /// counts as expired).
    pub fn expired_at(&self, now: DateTime<Utc>) -> bool {
        match &self.expires_at {
            None => false,
            Some(at) => DateTime::parse_from_rfc3339(at).map_or(true, |at| at <= now),
        }
    }

    /// Whether `secret` is this token's (constant time).
    pub fn secret_matches(&self, secret: &str) -> bool {
        self.hash_matches(&secret_hash(secret))
    }

    /// Whether `secret_sha256` is the hash of this token's secret
    /// (constant time): a console session keeps the hash, not the secret.
    pub fn hash_matches(&self, secret_sha256: &str) -> bool {
        !self.secret_sha256.is_empty()
            && bool::from(
                self.secret_sha256
                    .as_bytes()
                    .ct_eq(secret_sha256.as_bytes()),
            )
    }

    /// The record as lists show it: without the hash.
    pub fn listed(mut self) -> Self {
        self.secret_sha256.clear();
        self
    }
}

/// Hex SHA-256 of `secret`.
pub fn secret_hash(secret: &str) -> String {
    data_encoding::HEXLOWER.encode(&Sha256::digest(secret.as_bytes()))
}

/// A new token's id and secret: 64 and 244 random bits (UUID v4s).
pub fn new_id_and_secret() -> (String, String) {
    let id = uuid::Uuid::new_v4().simple().to_string()[..16].to_string();
    (id, new_secret())
}

/// A new secret: 244 random bits from the OS's generator (two UUID v4s),
/// as 64 lower-case hex characters. Tokens' secrets, console session ids
/// and CSRF tokens.
pub fn new_secret() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// A token's text.
pub fn token_text(id: &str, secret: &str) -> String {
    format!("{TOKEN_PREFIX}{id}_{secret}")
}

/// The id and secret of a token's text, if it is one.
pub fn parse_token(text: &str) -> Option<(&str, &str)> {
    let (id, secret) = text.strip_prefix(TOKEN_PREFIX)?.split_once('_')?;
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(id) && hex(secret) && id.len() <= 32).then_some((id, secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(secret: &str, expires_at: Option<&str>) -> TokenRecord {
        TokenRecord {
            id: "0123abcd".into(),
            namespace: "billing".into(),
            role: Role::Operator,
            description: "deploys".into(),
            created_at: "2026-12-06T00:00:00Z".into(),
            expires_at: expires_at.map(str::to_string),
            created_by: "admin-token".into(),
            secret_sha256: secret_hash(secret),
        }
    }

    #[test]
    fn a_token_reads_back_and_only_its_secret_matches() {
        let (id, secret) = new_id_and_secret();
        assert_eq!(id.len(), 16);
        assert_eq!(secret.len(), 64);
        let text = token_text(&id, &secret);
        assert_eq!(parse_token(&text), Some((id.as_str(), secret.as_str())));
        let kept = record(&secret, None);
        assert!(kept.secret_matches(&secret));
        assert!(!kept.secret_matches(&secret.replace('a', "b").replace('0', "1")));
        for bad in [
            "",
            "jct_",
            "jct__x",
            "jct_ab",
            "xyz_ab_cd",
            "jct_ab_c d",
            "jct_zz_aa",
        ] {
            assert_eq!(parse_token(bad), None, "{bad}");
        }
        assert!(kept.clone().listed().secret_sha256.is_empty());
        assert_eq!(
            kept.grant(),
            Some(Grant {
                scope: Scope::One("billing".into()),
                role: Role::Operator
            })
        );
    }

    #[test]
    fn a_token_expires_at_its_time() {
        let now = DateTime::parse_from_rfc3339("2026-12-06T12:00:00Z")
            .expect("now")
            .with_timezone(&Utc);
        assert!(!record("s", None).expired_at(now));
        assert!(!record("s", Some("2026-12-06T12:00:01Z")).expired_at(now));
        assert!(record("s", Some("2026-12-06T12:00:00Z")).expired_at(now));
        assert!(record("s", Some("soon")).expired_at(now));
    }
}
