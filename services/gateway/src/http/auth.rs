//! Bearer tokens on the HTTP API.
//!
//! Routes are public (health, readiness, metrics, the OpenAPI document), reads
//! or writes ([`Access`]). Writes always need a configured token: a gateway
//! started without one refuses them, so a forgotten flag fails closed. Reads
//! need one only with `--protect-reads`. Tokens are compared in constant time.

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
        Ok(Self {
            tokens: Arc::new(accepted),
            protect_reads,
        })
    }

    /// Whether HTTP reads need a token (then they may show secrets).
    pub fn reads_protected(&self) -> bool {
        self.protect_reads
    }

    /// The configured tokens (the console signs its sessions with them).
    pub(crate) fn tokens(&self) -> &[Vec<u8>] {
        &self.tokens
    }

    /// Whether no token is configured (then HTTP writes are refused).
    pub fn has_no_tokens(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Whether a request with `authorization` may call a route of `access`.
    pub fn check(
        &self,
        access: Access,
        authorization: Option<&HeaderValue>,
    ) -> Result<(), ApiError> {
        let needed = match access {
            Access::Public => false,
            Access::Read => self.protect_reads,
            Access::Write => true,
        };
        if !needed {
            return Ok(());
        }
        if self.tokens.is_empty() {
            return Err(ApiError::unauthorized("HTTP writes are disabled: this gateway has no API token (start it with --api-token); the NATS API (jetcron.api.>) takes writes",
            ));
        }
        let presented = authorization
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .ok_or_else(|| {
                ApiError::unauthorized("missing bearer token: send Authorization: Bearer <token>")
            })?;
        // Every token is compared, so the time taken says nothing about which matched.
        let matched = self.tokens.iter().fold(0u8, |hit, t| {
            hit | t.as_slice().ct_eq(presented.as_bytes()).unwrap_u8()
        });
        if matched == 1 {
            Ok(())
        } else {
            Err(ApiError::unauthorized("the bearer token is not accepted"))
        }
    }
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

/// Middleware enforcing `access` on one route.
pub async fn require(
    State((state, access)): State<(Arc<GatewayState>, Access)>,
    request: Request,
    next: Next,
) -> Response {
    match state
        .http_auth
        .check(access, request.headers().get(header::AUTHORIZATION))
    {
        Ok(()) => next.run(request).await,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(token: &str) -> HeaderValue {
        HeaderValue::from_str(&format!("Bearer {token}")).expect("header")
    }

    #[test]
    fn writes_need_a_configured_token_and_reads_only_when_protected() {
        let token = "0123456789abcdef-token";
        let open_reads = HttpAuth::new(vec![token.into()], false).expect("auth");
        assert!(open_reads.check(Access::Read, None).is_ok());
        assert!(open_reads.check(Access::Write, None).is_err());
        assert!(open_reads
            .check(Access::Write, Some(&bearer(token)))
            .is_ok());
        assert!(open_reads
            .check(Access::Write, Some(&bearer("0123456789abcdef-tokeN")))
            .is_err());
        assert!(open_reads
            .check(Access::Write, Some(&HeaderValue::from_static("Basic abc")))
            .is_err());

        let closed = HttpAuth::new(vec![token.into()], true).expect("auth");
        assert!(closed.check(Access::Read, None).is_err());
        assert!(closed.check(Access::Public, None).is_ok());

        let none = HttpAuth::new(vec![], false).expect("auth");
        let err = none
            .check(Access::Write, Some(&bearer(token)))
            .expect_err("no token configured");
        assert!(err.message.contains("--api-token"), "{err}");
    }

    #[test]
    fn weak_tokens_are_refused_at_start() {
        assert!(HttpAuth::new(vec!["short".into()], false).is_err());
        assert!(HttpAuth::new(vec!["has a space in it, long".into()], false).is_err());
        assert!(HttpAuth::new(vec![], true).is_err());
    }
}
