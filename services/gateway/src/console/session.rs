//! Console sessions and CSRF tokens, without server-side state.
//!
//! An operator signs in once with an API token (the same `--api-token` the
//! HTTP API takes). The cookie does not hold the token: it holds an expiry
//! and an HMAC-SHA256 of it keyed by the token, so any gateway with the same
//! tokens accepts it, a cookie read off a screen does not give API access,
//! and removing a token from the gateway ends every session made with it.
//! The cookie is `HttpOnly` and `SameSite=Strict` (and `Secure` behind
//! HTTPS). Every form carries a CSRF token, an HMAC of the session value, so
//! a page from elsewhere cannot post on the operator's behalf even where
//! `SameSite` is not honoured.
//!
//! A team member signs in with a scoped token (`jct_<id>_<secret>`,
//! [`crate::tokens`]) the same way: the cookie names the token's id and
//! an expiry, signed with the SHA-256 of the token's secret kept in its
//! record ([`sign_in_scoped`]). Each request reads the record again (as the
//! HTTP API does), so a revoked or expired token ends its sessions at once,
//! and the page acts with the token's role in its namespace. Whoever could
//! read that hash could sign such a cookie; the tokens bucket is readable
//! only by the gateway's NATS user, which may do everything anyway.

use chrono::{DateTime, Duration, Utc};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

use crate::http::auth::HttpAuth;
use crate::tokens::record::TokenRecord;

/// The session cookie's name.
pub const COOKIE: &str = "jetcron_session";
/// How long a sign-in lasts.
pub const LIFETIME: Duration = Duration::hours(12);

/// A signed-in operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The cookie value.
    pub value: String,
    /// The token every form of this session must carry.
    pub csrf: String,
    /// The scoped token it was signed in with (`None`: a bootstrap token).
    pub token_id: Option<String>,
}

fn mac(key: &[u8], purpose: &str, message: &str) -> Vec<u8> {
    // HMAC takes keys of any length; new_from_slice cannot fail for it.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(purpose.as_bytes());
    mac.update(b"|");
    mac.update(message.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(bytes)
}

/// A session for `presented`, if it is one of the configured tokens.
pub fn sign_in(auth: &HttpAuth, presented: &str, now: DateTime<Utc>) -> Option<Session> {
    let token = auth
        .tokens()
        .iter()
        .find(|t| bool::from(t.as_slice().ct_eq(presented.as_bytes())))?;
    let expiry = (now + LIFETIME).timestamp().to_string();
    let value = format!("v1.{expiry}.{}", hex(&mac(token, "session", &expiry)));
    Some(Session {
        csrf: hex(&mac(token, "csrf", &value)),
        value,
        token_id: None,
    })
}

/// A session for the scoped token of `record` (whose secret the caller
/// checked).
pub fn sign_in_scoped(record: &TokenRecord, now: DateTime<Utc>) -> Session {
    let expiry = (now + LIFETIME).timestamp().to_string();
    scoped_session(record, &expiry)
}

fn scoped_session(record: &TokenRecord, expiry: &str) -> Session {
    let key = record.secret_sha256.as_bytes();
    let signed = format!("{}.{expiry}", record.id);
    let value = format!("v2.{signed}.{}", hex(&mac(key, "session", &signed)));
    Session {
        csrf: hex(&mac(key, "csrf", &value)),
        value,
        token_id: Some(record.id.clone()),
    }
}

/// The scoped token a cookie value names, before its record is read
/// (`None`: not a scoped session).
pub fn scoped_token_id(value: &str) -> Option<&str> {
    let mut parts = value.splitn(4, '.');
    match (parts.next(), parts.next()) {
        (Some("v2"), Some(id)) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Some(id)
        }
        _ => None,
    }
}

/// The session a scoped cookie value stands for, if it is unexpired and
/// signed for `record`.
pub fn verify_scoped(record: &TokenRecord, value: &str, now: DateTime<Utc>) -> Option<Session> {
    let mut parts = value.splitn(4, '.');
    let (Some("v2"), Some(id), Some(expiry), Some(_)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    if id != record.id || record.secret_sha256.is_empty() {
        return None;
    }
    let expires = expiry.parse::<i64>().ok()?;
    if expires <= now.timestamp() || expires > (now + LIFETIME).timestamp() {
        return None;
    }
    let expected = scoped_session(record, expiry);
    bool::from(expected.value.as_bytes().ct_eq(value.as_bytes())).then_some(expected)
}

/// The session a cookie value stands for, if it is unexpired and signed by
/// a configured token.
pub fn verify(auth: &HttpAuth, value: &str, now: DateTime<Utc>) -> Option<Session> {
    let mut parts = value.splitn(3, '.');
    let (Some("v1"), Some(expiry), Some(signature)) = (parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let expires = expiry.parse::<i64>().ok()?;
    if expires <= now.timestamp() || expires > (now + LIFETIME).timestamp() {
        return None;
    }
    let signature = data_encoding::HEXLOWER.decode(signature.as_bytes()).ok()?;
    // Every token is tried, so the time taken says nothing about which matched.
    let mut matched = None;
    for token in auth.tokens() {
        if bool::from(mac(token, "session", expiry).ct_eq(&signature)) {
            matched = Some(token);
        }
    }
    let token = matched?;
    Some(Session {
        csrf: hex(&mac(token, "csrf", value)),
        value: value.to_string(),
        token_id: None,
    })
}

/// Whether a form's CSRF token is the session's.
pub fn csrf_matches(session: &Session, presented: &str) -> bool {
    bool::from(session.csrf.as_bytes().ct_eq(presented.as_bytes()))
}

/// The `Set-Cookie` value that stores `session` (`secure` behind HTTPS).
pub fn cookie(session: &Session, secure: bool) -> String {
    format!(
        "{COOKIE}={}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{}",
        session.value,
        LIFETIME.num_seconds(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that ends a session.
pub fn cleared_cookie() -> String {
    format!("{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict")
}

/// The session cookie's value among a request's `Cookie` headers.
pub fn from_headers(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef-console";

    fn auth(tokens: &[&str]) -> HttpAuth {
        HttpAuth::new(tokens.iter().map(|t| t.to_string()).collect(), false).expect("auth")
    }

    #[test]
    fn a_session_is_signed_by_a_token_and_ends_with_it() {
        let now = Utc::now();
        let gateway = auth(&[TOKEN]);
        assert!(sign_in(&gateway, "0123456789abcdef-consolE", now).is_none());
        let session = sign_in(&gateway, TOKEN, now).expect("signed in");
        assert!(!session.value.contains(TOKEN));
        // Another gateway with the same token accepts it, with the same CSRF token.
        assert_eq!(
            verify(
                &auth(&["another-token-0123456", TOKEN]),
                &session.value,
                now
            ),
            Some(session.clone())
        );
        // A gateway without that token does not; nor after expiry; nor when altered.
        assert!(verify(&auth(&["another-token-0123456"]), &session.value, now).is_none());
        assert!(verify(&gateway, &session.value, now + LIFETIME).is_none());
        let later = session.value.replacen("v1.", "v1.9", 1);
        assert!(verify(&gateway, &later, now).is_none());
        assert!(verify(&gateway, "v1.x.y", now).is_none());
        assert!(verify(&gateway, "", now).is_none());
        assert!(csrf_matches(&session, &session.csrf));
        assert!(!csrf_matches(&session, ""));
    }

    fn record(secret_sha256: &str) -> TokenRecord {
        TokenRecord {
            id: "ab12".into(),
            namespace: "billing".into(),
            role: jetcron_core::access::Role::Viewer,
            description: "d".into(),
            created_at: String::new(),
            expires_at: None,
            created_by: "admin-token".into(),
            secret_sha256: secret_sha256.into(),
        }
    }

    #[test]
    fn a_scoped_session_is_signed_for_its_token_and_ends_with_it() {
        let now = Utc::now();
        let kept = record("aa11");
        let session = sign_in_scoped(&kept, now);
        assert_eq!(scoped_token_id(&session.value), Some("ab12"));
        assert_eq!(session.token_id.as_deref(), Some("ab12"));
        assert_eq!(
            verify_scoped(&kept, &session.value, now),
            Some(session.clone())
        );
        // Another secret (the token made again), expiry, alteration: refused.
        assert!(verify_scoped(&record("bb22"), &session.value, now).is_none());
        assert!(verify_scoped(&kept, &session.value, now + LIFETIME).is_none());
        let altered = session.value.replacen(".", ".0", 2);
        assert!(verify_scoped(&kept, &altered, now).is_none());
        // A bootstrap session is not a scoped one, nor the other way round.
        assert_eq!(scoped_token_id("v1.123.abc"), None);
        assert!(verify(&auth(&[TOKEN]), &session.value, now).is_none());
    }

    #[test]
    fn the_cookie_is_http_only_and_strict() {
        let session = sign_in(&auth(&[TOKEN]), TOKEN, Utc::now()).expect("signed in");
        let cookie = cookie(&session, false);
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
            "{cookie}"
        );
        assert!(!cookie.contains("Secure"));
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(
            axum::http::header::COOKIE,
            format!("other=1; {COOKIE}={}", session.value)
                .parse()
                .expect("header"),
        );
        assert_eq!(from_headers(&headers), Some(session.value));
    }
}
