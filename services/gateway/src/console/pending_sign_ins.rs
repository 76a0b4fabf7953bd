//! Sign-ins waiting for the identity provider's redirect back: what the
//! callback must check (`state`, the nonce, the PKCE verifier) and where
//! to go after, kept in the bucket `jetcron_sign_ins` under the SHA-256 of
//! a random id and bound to the browser that started the sign-in by the
//! cookie `jetcron_oidc` holding that id (`Path=/ui/oidc`, `SameSite=Lax`:
//! it must come back with the provider's cross-site redirect). A pending
//! sign-in is taken once (compare-and-delete: a replayed callback finds
//! nothing) and lasts [`LIFETIME`]; the bucket drops it then whether taken
//! or not, and caps what all of them hold, since anyone may begin one.

use std::time::Duration;

use async_nats::jetstream::kv;
use chrono::{DateTime, Utc};
use jetcron_core::api::ApiError;

use super::session::well_formed;
use crate::people::provider::PendingSignIn;
use crate::tokens::record::{new_secret, secret_hash};

/// The cookie naming a browser's pending sign-in.
pub const COOKIE: &str = "jetcron_oidc";
/// How long a sign-in may take at the provider.
pub const LIFETIME: Duration = jetcron_io::topology::SIGN_INS_MAX_AGE;

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::unavailable(format!("{}: {e}", jetcron_core::subjects::SIGN_INS_BUCKET))
}

/// The bucket of waiting sign-ins.
#[derive(Clone)]
pub struct PendingSignIns {
    bucket: kv::Store,
}

impl PendingSignIns {
    pub fn new(bucket: kv::Store) -> Self {
        Self { bucket }
    }

    /// Keep `pending`; the id for the browser's cookie.
    pub async fn keep(&self, pending: &PendingSignIn) -> Result<String, ApiError> {
        let id = new_secret();
        let value = serde_json::to_vec(pending)
            .map_err(|e| ApiError::internal("encode the pending sign-in", e))?;
        self.bucket
            .create(secret_hash(&id), value.into())
            .await
            .map_err(unavailable)?;
        Ok(id)
    }

    /// Take the pending sign-in of cookie value `id` (it is gone after),
    /// if there is one not older than [`LIFETIME`] at `now`.
    pub async fn take(
        &self,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<PendingSignIn>, ApiError> {
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
        // Whoever deletes it first has it; a second callback finds nothing.
        if self
            .bucket
            .purge_expect_revision(&key, Some(message.sequence))
            .await
            .is_err()
        {
            return Ok(None);
        }
        let Ok(pending) = serde_json::from_slice::<PendingSignIn>(&message.payload) else {
            return Ok(None);
        };
        let fresh = now < pending.created_at + LIFETIME;
        Ok(fresh.then_some(pending))
    }
}

/// The `Set-Cookie` value that hands pending sign-in `id` to the browser.
pub fn cookie(id: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={id}; Path=/ui/oidc; Max-Age={}; HttpOnly; SameSite=Lax{}",
        LIFETIME.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that drops it.
pub fn cleared_cookie() -> String {
    format!("{COOKIE}=; Path=/ui/oidc; Max-Age=0; HttpOnly; SameSite=Lax")
}
