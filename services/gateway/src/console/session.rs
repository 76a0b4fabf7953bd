//! Console sessions, kept server-side in the KV bucket `jetcron_sessions`.
//!
//! A sign-in makes a random session id (244 bits, from the OS's generator)
//! and stores a record under the SHA-256 of it: who signed in, the CSRF
//! token of every form, when it began and when it was last used. The
//! browser holds only the id, in a cookie that is `HttpOnly`,
//! `SameSite=Lax` (so the identity provider's redirect back carries it)
//! and `Secure` behind HTTPS. Every gateway reads the record from the
//! bucket's stream leader on every request, so a sign-out anywhere ends the
//! session everywhere at once, and whoever can read the bucket cannot use
//! what it holds as a cookie.
//!
//! A session ends at its absolute lifetime, after an idle time without a
//! request, at sign-out, and when what it stands for goes: a bootstrap
//! token no longer configured, a scoped token revoked or made again. The
//! record's `last_seen` is written at most every [`Timeouts::touch_every`],
//! so a page view is one read, not a write.

use std::time::Duration;

use crate::tokens::record::{new_secret, secret_hash};
use async_nats::jetstream::kv;
use chrono::{DateTime, Utc};
use jetcron_core::api::ApiError;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq as _;

/// The session cookie's name.
pub const COOKIE: &str = "jetcron_session";
/// Default of `--console-idle-timeout`.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(3600);
/// Default of `--console-session-lifetime`.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// The longest lifetime a gateway may give a session: the bucket's age
/// limit, which sweeps the records of sessions nobody ended.
pub const MAX_LIFETIME: Duration = jetcron_io::topology::SESSIONS_MAX_AGE;

/// How long a session lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Without a request for this long, a session ends.
    pub idle: Duration,
    /// A session ends this long after its sign-in, used or not.
    pub lifetime: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            idle: DEFAULT_IDLE,
            lifetime: DEFAULT_LIFETIME,
        }
    }
}

impl Timeouts {
    /// Timeouts checked: both at least a second, the lifetime at most
    /// [`MAX_LIFETIME`], the idle time no longer than the lifetime.
    pub fn new(idle: Duration, lifetime: Duration) -> Result<Self, String> {
        if idle < Duration::from_secs(1) || lifetime < Duration::from_secs(1) {
            return Err("console session timeouts must be at least 1s".into());
        }
        if lifetime > MAX_LIFETIME {
            return Err(format!(
                "--console-session-lifetime {} is longer than the {} the sessions bucket keeps a record",
                humantime::format_duration(lifetime),
                humantime::format_duration(MAX_LIFETIME)
            ));
        }
        if idle > lifetime {
            return Err(format!(
                "--console-idle-timeout {} is longer than --console-session-lifetime {}",
                humantime::format_duration(idle),
                humantime::format_duration(lifetime)
            ));
        }
        Ok(Self { idle, lifetime })
    }

    /// How stale `last_seen` may be before a request writes it again: a
    /// quarter of the idle time, at most a minute.
    pub fn touch_every(&self) -> Duration {
        (self.idle / 4).min(Duration::from_secs(60))
    }

    /// Why a session of `record` has ended at `now`, if it has.
    pub fn ended(&self, record: &SessionRecord, now: DateTime<Utc>) -> Option<&'static str> {
        if now >= record.created_at + self.lifetime {
            Some("its lifetime is over")
        } else if now >= record.last_seen + self.idle {
            Some("it was idle too long")
        } else {
            None
        }
    }
}

/// Whom a session stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Holder {
    /// A bootstrap `--api-token`, while this gateway accepts it: admin of
    /// every namespace.
    Bootstrap { token_sha256: String },
    /// A scoped token, while its record lives with this secret.
    Token { id: String, secret_sha256: String },
    /// A person, with the roles of their bindings and their groups'.
    Person(crate::people::Person),
}

/// A session as `jetcron_sessions` keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRecord {
    pub holder: Holder,
    /// The token every form of this session must carry.
    pub csrf: String,
    pub created_at: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
}

/// A live session of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The bucket key: the SHA-256 of the session id.
    pub key: String,
    pub record: SessionRecord,
}

impl Session {
    /// The token every form of this session must carry.
    pub fn csrf(&self) -> &str {
        &self.record.csrf
    }
}

/// Whether a cookie value can be a session id (and so a key's preimage):
/// 64 lower-case hex characters.
pub(super) fn well_formed(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The sessions bucket and this gateway's timeouts.
#[derive(Clone)]
pub struct SessionStore {
    bucket: kv::Store,
    timeouts: Timeouts,
}

fn unavailable(e: impl std::error::Error + Send + Sync + 'static) -> ApiError {
    ApiError::unavailable(e)
}

impl SessionStore {
    pub fn new(bucket: kv::Store, timeouts: Timeouts) -> Self {
        Self { bucket, timeouts }
    }

    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// Begin a session for `holder` at `now`: the cookie value (the
    /// session id) and the session.
    pub async fn begin(
        &self,
        holder: Holder,
        now: DateTime<Utc>,
    ) -> Result<(String, Session), ApiError> {
        let id = new_secret();
        let record = SessionRecord {
            holder,
            csrf: new_secret(),
            created_at: now,
            last_seen: now,
        };
        let key = secret_hash(&id);
        let value = serde_json::to_vec(&record)
            .map_err(|e| ApiError::internal("encode the session record", e))?;
        self.bucket
            .create(&key, value.into())
            .await
            .map_err(unavailable)?;
        Ok((id, Session { key, record }))
    }

    /// The live session of cookie value `id` at `now`, if there is one;
    /// its `last_seen` written again when it is [`Timeouts::touch_every`]
    /// old. A session found ended is removed.
    pub async fn find(&self, id: &str, now: DateTime<Utc>) -> Result<Option<Session>, ApiError> {
        if !well_formed(id) {
            return Ok(None);
        }
        let key = secret_hash(id);
        let Some(message) = jetcron_io::kv_entry::last_value(&self.bucket, &key)
            .await
            .map_err(unavailable)?
        else {
            return Ok(None);
        };
        // A record that does not read (written by hand) is no session.
        let Ok(mut record) = serde_json::from_slice::<SessionRecord>(&message.payload) else {
            return Ok(None);
        };
        if let Some(why) = self.timeouts.ended(&record, now) {
            tracing::debug!(why, "console session ended");
            self.end_key(&key).await;
            return Ok(None);
        }
        if now >= record.last_seen + self.timeouts.touch_every() {
            record.last_seen = now;
            self.touch(&key, &record, message.sequence).await;
        }
        Ok(Some(Session { key, record }))
    }

    /// Write `record`'s `last_seen` if nobody changed it since `revision`
    /// (another request of the session may have done so already).
    async fn touch(&self, key: &str, record: &SessionRecord, revision: u64) {
        let Ok(value) = serde_json::to_vec(record) else {
            return;
        };
        if let Err(e) = self.bucket.update(key, value.into(), revision).await {
            tracing::debug!(error = %e, "console session not touched");
        }
    }

    /// End `session` now, for every gateway.
    pub async fn end(&self, session: &Session) -> Result<(), ApiError> {
        self.bucket.purge(&session.key).await.map_err(unavailable)
    }

    async fn end_key(&self, key: &str) {
        if let Err(e) = self.bucket.purge(key).await {
            tracing::debug!(error = %e, "ended console session not removed");
        }
    }
}

/// Whether a form's CSRF token is the session's.
pub fn csrf_matches(session: &Session, presented: &str) -> bool {
    bool::from(session.csrf().as_bytes().ct_eq(presented.as_bytes()))
}

/// The session cookie's name over HTTPS: the `__Host-` prefix makes the
/// browser take it only from this host, `Secure`, for `Path=/`, so a
/// sibling domain cannot plant a session of its own choosing.
pub const SECURE_COOKIE: &str = "__Host-jetcron_session";

/// Whether the request came over HTTPS (a proxy in front says so with
/// `X-Forwarded-Proto`).
pub fn served_over_tls(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        == Some("https")
}

/// The `Set-Cookie` value that hands session `id` to the browser
/// (`secure` behind HTTPS), for `lifetime`.
pub fn cookie(id: &str, lifetime: Duration, secure: bool) -> String {
    match secure {
        true => format!(
            "{SECURE_COOKIE}={id}; Path=/; Max-Age={}; HttpOnly; SameSite=Lax; Secure",
            lifetime.as_secs()
        ),
        false => format!(
            "{COOKIE}={id}; Path=/; Max-Age={}; HttpOnly; SameSite=Lax",
            lifetime.as_secs()
        ),
    }
}

/// The `Set-Cookie` value that drops the session cookie.
pub fn cleared_cookie(secure: bool) -> String {
    match secure {
        true => format!("{SECURE_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax; Secure"),
        false => format!("{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"),
    }
}

/// The session cookie's value among a request's `Cookie` headers: over
/// HTTPS only the `__Host-` one counts.
pub fn from_headers(headers: &axum::http::HeaderMap) -> Option<String> {
    match served_over_tls(headers) {
        true => cookie_named(headers, SECURE_COOKIE),
        false => cookie_named(headers, COOKIE),
    }
}

/// The value of cookie `wanted` among a request's `Cookie` headers.
pub fn cookie_named(headers: &axum::http::HeaderMap, wanted: &str) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == wanted)
        .map(|(_, value)| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(created_at: DateTime<Utc>, last_seen: DateTime<Utc>) -> SessionRecord {
        SessionRecord {
            holder: Holder::Token {
                id: "ab12".into(),
                secret_sha256: "aa".into(),
            },
            csrf: new_secret(),
            created_at,
            last_seen,
        }
    }

    #[test]
    fn a_session_ends_at_its_lifetime_or_when_idle() {
        let timeouts =
            Timeouts::new(Duration::from_secs(60), Duration::from_secs(600)).expect("timeouts");
        let start = Utc::now();
        let seconds = |s: i64| chrono::Duration::seconds(s);
        assert_eq!(timeouts.ended(&record(start, start), start), None);
        assert_eq!(
            timeouts.ended(&record(start, start), start + seconds(59)),
            None
        );
        assert_eq!(
            timeouts.ended(&record(start, start), start + seconds(60)),
            Some("it was idle too long")
        );
        let busy = record(start, start + seconds(599));
        assert_eq!(timeouts.ended(&busy, start + seconds(599)), None);
        assert_eq!(
            timeouts.ended(&busy, start + seconds(600)),
            Some("its lifetime is over")
        );
        assert_eq!(timeouts.touch_every(), Duration::from_secs(15));
        assert_eq!(Timeouts::default().touch_every(), Duration::from_secs(60));
    }

    #[test]
    fn timeouts_are_checked_with_the_flag_named() {
        let hours = |h: u64| Duration::from_secs(h * 3600);
        assert!(Timeouts::new(hours(1), hours(12)).is_ok());
        assert!(Timeouts::new(hours(1), MAX_LIFETIME).is_ok());
        let long = Timeouts::new(hours(1), MAX_LIFETIME + hours(1)).expect_err("too long");
        assert!(long.contains("--console-session-lifetime"), "{long}");
        let idle = Timeouts::new(hours(13), hours(12)).expect_err("idle > lifetime");
        assert!(idle.contains("--console-idle-timeout"), "{idle}");
        assert!(Timeouts::new(Duration::ZERO, hours(1)).is_err());
    }

    #[test]
    fn session_ids_and_csrf_tokens_are_random_hex() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(well_formed(&a) && well_formed(&b), "{a} {b}");
        assert!(!well_formed(&a.to_uppercase()));
        assert!(!well_formed(&a[1..]));
        assert!(!well_formed("../../etc"));
        assert_eq!(secret_hash(&a).len(), 64);
    }

    #[test]
    fn the_cookie_is_http_only_lax_and_secure_behind_https() {
        let id = new_secret();
        let plain = cookie(&id, DEFAULT_LIFETIME, false);
        assert!(
            plain.contains("HttpOnly") && plain.contains("SameSite=Lax"),
            "{plain}"
        );
        assert!(plain.contains("Max-Age=43200") && !plain.contains("Secure"));
        let secure = cookie(&id, DEFAULT_LIFETIME, true);
        assert!(secure.starts_with("__Host-jetcron_session=") && secure.ends_with("; Secure"));
        assert!(secure.contains("Path=/;") && !secure.contains("Domain"));
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(
            axum::http::header::COOKIE,
            format!("other=1; {COOKIE}={id}").parse().expect("header"),
        );
        assert_eq!(from_headers(&headers), Some(id.clone()));
        // Over HTTPS a cookie without the prefix is not taken.
        headers.insert("x-forwarded-proto", "https".parse().expect("proto"));
        assert_eq!(from_headers(&headers), None);
        headers.insert(
            axum::http::header::COOKIE,
            format!("{SECURE_COOKIE}={id}").parse().expect("header"),
        );
        assert_eq!(from_headers(&headers), Some(id));
    }

    #[test]
    fn a_record_reads_back_and_unknown_fields_are_refused() {
        let now = Utc::now();
        let kept = SessionRecord {
            holder: Holder::Bootstrap {
                token_sha256: secret_hash("t"),
            },
            ..record(now, now)
        };
        let text = serde_json::to_string(&kept).expect("encode");
        assert!(text.contains(r#""kind":"bootstrap""#), "{text}");
        assert_eq!(
            serde_json::from_str::<SessionRecord>(&text).expect("decode"),
            kept
        );
        let extra = text.replacen('{', r#"{"admin":true,"#, 1);
        assert!(serde_json::from_str::<SessionRecord>(&extra).is_err());
    }
}
