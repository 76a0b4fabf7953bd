//! Bearer tokens on the HTTP API.
//!
//! Routes are public (health, readiness, metrics, the OpenAPI document), reads
//! or writes ([`Access`]). Writes always need a token: a bootstrap token of
//! `--api-token` (admin of every namespace), or a scoped token of
//! `POST /v1/tokens` ([`crate::tokens`]), whose grant the operations check.
//! Reads need one only with `--protect-reads`; without, a read without a
//! token is an anonymous viewer of every namespace. Bootstrap tokens are
//! compared in constant time, scoped ones by their secret's hash.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jetcron_core::api::ApiError;
use subtle::ConstantTimeEq as _;

use super::HttpError;
use crate::caller::Caller;
use crate::tokens::record::secret_hash;
use crate::GatewayState;

/// Shortest token accepted: a guessable token is no protection.
pub const MIN_TOKEN_LEN: usize = 16;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Probes, metrics and the API description.
    Public,
    /// Reads; token required only with `protect_reads`.
    Read,
    /// Changes; token always required.
    Write,
}

/// The accepted tokens and whether reads need one.
#[derive(Debug, Clone, Default)]
pub struct HttpAuth {
    tokens: Arc<Vec<Vec<u8>>>,
    /// The SHA-256 of each token, in the same order (what a console
    /// session of a bootstrap token keeps).
    digests: Arc<Vec<String>>,
    protect_reads: bool,
}

impl HttpAuth {
    /// Tokens shorter than [`MIN_TOKEN_LEN`] or with whitespace are refused.
    pub fn new(tokens: Vec<String>, protect_reads: bool) -> anyhow::Result<Self> {
        let mut accepted = Vec::new();
        for (i, token) in tokens.iter().enumerate() {
            if token.len() < MIN_TOKEN_LEN
                || token.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                anyhow::bail!(
                    "API token #{} must be at least {MIN_TOKEN_LEN} characters without spaces or control characters",
                    i + 1
                );
            }
            accepted.push(token.as_bytes().to_vec());
        }
        if protect_reads && accepted.is_empty() {
            anyhow::bail!("--protect-reads needs at least one --api-token");
        }
        let digests = tokens.iter().map(|t| secret_hash(t)).collect();
        Ok(Self {
            tokens: Arc::new(accepted),
            digests: Arc::new(digests),
            protect_reads,
        })
    }

    /// Whether HTTP reads need a token (then they may show secrets).
    pub fn reads_protected(&self) -> bool {
        self.protect_reads
    }

    /// The SHA-256 (hex) of the configured token `presented` is, if it is
    /// one: what a console session of a bootstrap token keeps.
    pub(crate) fn bootstrap_digest(&self, presented: &str) -> Option<String> {
        // Every token is compared, so the time taken says nothing about which matched.
        let mut matched = None;
        for (token, digest) in self.tokens.iter().zip(self.digests.iter()) {
            if bool::from(token.as_slice().ct_eq(presented.as_bytes())) {
                matched = Some(digest);
            }
        }
        matched.cloned()
    }

    /// Whether a configured token has the SHA-256 `digest` (hex): a console
    /// session of a bootstrap token ends when its token is no longer
    /// configured.
    pub(crate) fn accepts_digest(&self, digest: &str) -> bool {
        self.digests.iter().fold(false, |hit, kept| {
            hit | bool::from(kept.as_bytes().ct_eq(digest.as_bytes()))
        })
    }

    /// Whether no token is configured (then HTTP writes are refused).
    pub fn has_no_tokens(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Who a request with `authorization` is, for a route of `access`:
    /// [`Presented::Known`] when that is settled here (a bootstrap token, an
    /// open read), [`Presented::Other`] for a token only the tokens bucket
    /// can tell ([`crate::tokens`]), an error when the route needs a token
    /// and none was sent.
    pub fn presented<'a>(
        &self,
        access: Access,
        authorization: Option<&'a HeaderValue>,
    ) -> Result<Presented<'a>, ApiError> {
        let needed = match access {
            Access::Public => return Ok(Presented::Public),
            Access::Read => self.protect_reads,
            Access::Write => true,
        };
        let presented = authorization.and_then(|v| v.to_str().ok()).and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
                .map(str::trim)
        });
        let Some(presented) = presented else {
            return match needed {
                true => Err(ApiError::unauthorized(
                    "missing bearer token: send Authorization: Bearer <token>",
                )),
                false => Ok(Presented::Known(Caller::anonymous_reader())),
            };
        };
        // Every token is compared, so the time taken says nothing about which matched.
        let matched = self.tokens.iter().fold(0u8, |hit, t| {
            hit | t.as_slice().ct_eq(presented.as_bytes()).unwrap_u8()
        });
        if matched == 1 {
            return Ok(Presented::Known(Caller::admin_token()));
        }
        Ok(Presented::Other {
            token: presented,
            needed,
        })
    }

    /// The refusal of a token that is neither a bootstrap nor a live scoped
    /// token.
    fn not_accepted(&self) -> ApiError {
        match self.tokens.is_empty() {
            true => ApiError::unauthorized("the bearer token is not accepted, and this gateway has no bootstrap API token (start it with --api-token); the NATS API (jetcron.api.>) takes writes"),
            false => ApiError::unauthorized("the bearer token is not accepted"),
        }
    }
}

/// What a request presents, as [`HttpAuth::presented`] reads it.
#[derive(Debug)]
pub enum Presented<'a> {
    /// A public route: nobody to know.
    Public,
    /// A caller known without a look-up.
    Known(Caller),
    /// A token to look up; `needed` when the route cannot go on without it.
    Other { token: &'a str, needed: bool },
}

/// Tokens from a file: one per line, blank lines and `#` comments skipped.
pub fn read_token_file(path: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("read API token file {}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect())
}

/// Middleware enforcing `access` on one route: the caller it finds goes
/// to the handler as an extension ([`Caller`]), for the operations to check.
pub async fn require(
    State((state, access)): State<(Arc<GatewayState>, Access)>,
    mut request: Request,
    next: Next,
) -> Response {
    match caller_of(&state, access, request.headers().get(header::AUTHORIZATION)).await {
        Ok(Some(caller)) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Ok(None) => next.run(request).await,
        Err(e) => {
            let mut response = HttpError(e).into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"jetcron\""),
            );
            response
        }
    }
}

/// The caller of a request to a route of `access` (none for a public one).
async fn caller_of(
    state: &GatewayState,
    access: Access,
    authorization: Option<&HeaderValue>,
) -> Result<Option<Caller>, ApiError> {
    match state.http_auth.presented(access, authorization)? {
        Presented::Public => Ok(None),
        Presented::Known(caller) => Ok(Some(caller)),
        Presented::Other { token, needed } => {
            match crate::tokens::requests::caller_of(state, token).await {
                Ok(Some(caller)) => Ok(Some(caller)),
                // An open read reads as anyone with a token nobody knows, or
                // while the tokens bucket does not answer.
                Ok(None) | Err(_) if !needed => Ok(Some(Caller::anonymous_reader())),
                Ok(None) => Err(state.http_auth.not_accepted()),
                Err(e) => Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(token: &str) -> HeaderValue {
        HeaderValue::from_str(&format!("Bearer {token}")).expect("header")
    }

    /// The caller a request is known as without a look-up, if it is.
    fn known(auth: &HttpAuth, access: Access, header: Option<&HeaderValue>) -> Option<String> {
        match auth.presented(access, header) {
            Ok(Presented::Known(caller)) => Some(caller.actor),
            _ => None,
        }
    }

    #[test]
    fn writes_need_a_token_and_reads_only_when_protected() {
        let token = "0123456789abcdef-token";
        let open_reads = HttpAuth::new(vec![token.into()], false).expect("auth");
        assert_eq!(
            known(&open_reads, Access::Read, None).as_deref(),
            Some("anonymous")
        );
        assert!(open_reads.presented(Access::Write, None).is_err());
        assert_eq!(
            known(&open_reads, Access::Write, Some(&bearer(token))).as_deref(),
            Some("admin-token")
        );
        // Another token is looked up in the tokens bucket.
        assert!(matches!(
            open_reads.presented(Access::Write, Some(&bearer("0123456789abcdef-tokeN"))),
            Ok(Presented::Other { needed: true, .. })
        ));
        assert!(open_reads
            .presented(Access::Write, Some(&HeaderValue::from_static("Basic abc")))
            .is_err());

        let closed = HttpAuth::new(vec![token.into()], true).expect("auth");
        assert!(closed.presented(Access::Read, None).is_err());
        assert!(matches!(
            closed.presented(Access::Public, None),
            Ok(Presented::Public)
        ));

        let none = HttpAuth::new(vec![], false).expect("auth");
        assert!(none.not_accepted().message.contains("--api-token"));
    }

    #[test]
    fn weak_tokens_are_refused_at_start() {
        assert!(HttpAuth::new(vec!["short".into()], false).is_err());
        assert!(HttpAuth::new(vec!["has a space in it, long".into()], false).is_err());
        assert!(HttpAuth::new(vec![], true).is_err());
    }
}
