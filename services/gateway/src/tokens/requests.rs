//! The token operations: make, list, revoke, and the look-up of a
//! presented token. Each checks the caller's grants first: only an admin of
//! a namespace makes, sees and revokes its tokens (an admin of `*`, every
//! one).

use std::time::Duration;

use chrono::{DateTime, Utc};
use jetcron_core::access::{Role, Scope};
use jetcron_core::api::ApiError;
use jetcron_core::job::patterns;
use jetcron_core::time_format::rfc3339_millis;
use serde::{Deserialize, Serialize};

use super::record::{self, TokenRecord};
use crate::caller::Caller;
use crate::GatewayState;

/// Longest life a token may be given.
pub const MAX_EXPIRES_IN: Duration = Duration::from_secs(5 * 366 * 24 * 3600);
/// Longest description.
pub const MAX_DESCRIPTION: usize = 200;

/// `POST /v1/tokens`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// The namespace it acts in (`*`: every one; only an admin of `*` makes those).
    #[schemars(regex(pattern = patterns::SCOPE_PATTERN))]
    pub namespace: String,
    /// `viewer`, `operator`, `editor` or `admin`.
    #[schemars(extend("enum" = ["viewer", "operator", "editor", "admin"]))]
    pub role: String,
    /// How long it lasts (`90d`, `12h`), at most 1830 days; none: until revoked.
    #[serde(default)]
    #[schemars(regex(pattern = patterns::DURATION_PATTERN), extend("format" = patterns::duration_format("1ns", "1830d")))]
    pub expires_in: Option<String>,
    /// What it is for (who holds it), 1 to 200 characters.
    #[schemars(regex(pattern = patterns::TOKEN_DESCRIPTION_PATTERN))]
    pub description: String,
}

/// The answer to a made token: its text, shown this once.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct CreatedToken {
    pub ok: bool,
    /// `jct_<id>_<secret>`: send it as `Authorization: Bearer <token>`. It
    /// cannot be read again.
    pub token: String,
    pub record: TokenRecord,
}

/// `GET /v1/tokens`: the tokens the caller administers, without secrets.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct TokensReply {
    pub ok: bool,
    pub tokens: Vec<TokenRecord>,
}

/// `DELETE /v1/tokens/{id}`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct RevokedReply {
    pub ok: bool,
    pub id: String,
    pub revoked: bool,
}

/// Whether `caller` administers the tokens of `namespace` (`*` included).
fn administers(caller: &Caller, namespace: &str) -> bool {
    match namespace {
        jetcron_core::access::ALL_NAMESPACES => caller.grants.allows_everywhere(Role::Admin),
        namespace => caller.grants.allows(Role::Admin, namespace),
    }
}

fn refuse(namespace: &str) -> ApiError {
    jetcron_core::access::forbidden(namespace, Role::Admin)
}

/// Make a token; nothing is kept when the request or the caller is refused.
pub async fn create(
    state: &GatewayState,
    caller: &Caller,
    request: CreateToken,
) -> Result<CreatedToken, ApiError> {
    let scope = Scope::parse("namespace", &request.namespace)
        .map_err(|p| ApiError::invalid_field("namespace", p.message))?;
    let role = Role::parse("role", &request.role)
        .map_err(|p| ApiError::invalid_field("role", p.message))?;
    let description = checked_description(&request.description)?;
    let now = state.clock.now();
    let expires_at = expiry(request.expires_in.as_deref(), now)?;
    if !administers(caller, scope.as_str()) {
        return Err(refuse(scope.as_str()));
    }
    let (id, secret) = record::new_id_and_secret();
    let kept = TokenRecord {
        id: id.clone(),
        namespace: scope.as_str().to_string(),
        role,
        description,
        created_at: rfc3339_millis(now),
        expires_at: expires_at.map(rfc3339_millis),
        created_by: caller.actor.clone(),
        secret_sha256: record::secret_hash(&secret),
    };
    state.tokens.create(&kept).await?;
    tracing::info!(token = %id, namespace = %kept.namespace, role = %role, by = %caller.actor, "token made");
    Ok(CreatedToken {
        ok: true,
        token: record::token_text(&id, &secret),
        record: kept.listed(),
    })
}

fn checked_description(text: &str) -> Result<String, ApiError> {
    let text = text.trim();
    if text.is_empty() || text.chars().count() > MAX_DESCRIPTION {
        return Err(ApiError::invalid_field(
            "description",
            format!("say what the token is for, in 1 to {MAX_DESCRIPTION} characters"),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(ApiError::invalid_field(
            "description",
            "must not contain control characters",
        ));
    }
    Ok(text.to_string())
}

/// When a token given `expires_in` at `now` expires.
fn expiry(expires_in: Option<&str>, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>, ApiError> {
    let Some(text) = expires_in else {
        return Ok(None);
    };
    let bad = |why: String| ApiError::invalid_field("expires_in", why);
    let span = humantime::parse_duration(text).map_err(|e| {
        bad(format!(
            "{text:?} is not a duration such as 90d or 12h: {e}"
        ))
    })?;
    if span.is_zero() || span > MAX_EXPIRES_IN {
        return Err(bad(format!(
            "must be more than 0 and at most {} days",
            MAX_EXPIRES_IN.as_secs() / 86_400
        )));
    }
    let span = chrono::Duration::from_std(span).map_err(|e| bad(e.to_string()))?;
    Ok(Some(now + span))
}

/// The tokens `caller` administers; refused when it administers none.
pub async fn list(state: &GatewayState, caller: &Caller) -> Result<TokensReply, ApiError> {
    caller.grants.require_somewhere(Role::Admin)?;
    let tokens = state
        .tokens
        .list()
        .await?
        .into_iter()
        .filter(|t| administers(caller, &t.namespace))
        .map(TokenRecord::listed)
        .collect();
    Ok(TokensReply { ok: true, tokens })
}

/// Revoke token `id`: every later request with it is refused.
pub async fn revoke(
    state: &GatewayState,
    caller: &Caller,
    id: &str,
) -> Result<RevokedReply, ApiError> {
    let Some(kept) = state.tokens.get(id).await? else {
        return Err(ApiError::not_found("id", format!("no token {id:?}")));
    };
    if !administers(caller, &kept.namespace) {
        return Err(refuse(&kept.namespace));
    }
    state.tokens.revoke(id).await?;
    tracing::info!(token = %id, by = %caller.actor, "token revoked");
    Ok(RevokedReply {
        ok: true,
        id: id.to_string(),
        revoked: true,
    })
}

/// The record of a presented token, if it is a live scoped token whose
/// secret matches (`None`: not one of them).
pub async fn live_record(
    state: &GatewayState,
    text: &str,
) -> Result<Option<TokenRecord>, ApiError> {
    let Some((id, secret)) = record::parse_token(text) else {
        return Ok(None);
    };
    let Some(kept) = state.tokens.get(id).await? else {
        return Ok(None);
    };
    let live = kept.secret_matches(secret) && !kept.expired_at(state.clock.now());
    Ok(live.then_some(kept))
}

/// The caller a presented token stands for over HTTP, if it is a live
/// scoped token (`None`: not one of them).
pub async fn caller_of(state: &GatewayState, text: &str) -> Result<Option<Caller>, ApiError> {
    let kept = live_record(state, text).await?;
    Ok(kept.and_then(|kept| kept.caller(jetcron_core::audit::Door::Http)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lives_and_descriptions_are_checked() {
        let now = Utc::now();
        assert_eq!(expiry(None, now).expect("none"), None);
        assert_eq!(
            expiry(Some("90d"), now).expect("90d"),
            Some(now + chrono::Duration::days(90))
        );
        for bad in ["0s", "soon", "6000d", ""] {
            let error = expiry(Some(bad), now).expect_err(bad);
            assert_eq!(error.field.as_deref(), Some("expires_in"), "{bad}");
        }
        assert!(checked_description("deploys of billing").is_ok());
        for bad in ["", "  ", "a\nb", &"x".repeat(201)] {
            assert!(checked_description(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_admins_administer_their_namespaces_tokens() {
        let caller = |scope: &str, role| Caller {
            actor: "t".into(),
            door: jetcron_core::audit::Door::Http,
            note: None,
            grants: jetcron_core::access::Grants::one(jetcron_core::access::Grant {
                scope: Scope::parse("namespace", scope).expect("scope"),
                role,
            }),
        };
        assert!(administers(&caller("billing", Role::Admin), "billing"));
        assert!(!administers(&caller("billing", Role::Admin), "ops"));
        assert!(!administers(&caller("billing", Role::Admin), "*"));
        assert!(!administers(&caller("billing", Role::Editor), "billing"));
        assert!(administers(&Caller::admin_token(), "*"));
        assert!(administers(&Caller::admin_token(), "ops"));
    }
}
