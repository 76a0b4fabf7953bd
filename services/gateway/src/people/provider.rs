//! Sign-in with the company's identity provider: OpenID Connect's
//! authorization code flow with PKCE, through the `openidconnect` crate
//! (discovery, the code exchange, the ID token's signature, issuer,
//! audience, expiry and nonce are its work, not ours).
//!
//! - **Discovery** happens at the first sign-in, not at start (a gateway
//!   starts while its provider is down; the sign-in page then says so), and
//!   again when an hour old.
//! - **Key rotation**: a token signed with a key the cached set lacks makes
//!   one fetch of the provider's key set (at most one per
//!   [`ProviderSettings::key_refetch_gap`], so forged tokens cannot make the
//!   gateway hammer the provider), and is verified again.
//! - **Clock leeway**: a token is taken until `exp + leeway` and refused
//!   when issued more than `leeway` in the future (`--oidc-clock-leeway`,
//!   60 s by default), against the gateway's clock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreAuthenticationFlow, CoreErrorResponseType,
    CoreGenderClaim, CoreJsonWebKey, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm,
    CoreProviderMetadata, CoreRevocableToken, CoreRevocationErrorResponse,
    CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalClaims, AuthorizationCode, ClaimsVerificationError, Client, ClientId, ClientSecret,
    CsrfToken, EmptyExtraTokenFields, EndpointMaybeSet, EndpointNotSet, EndpointSet, IdTokenFields,
    IssuerUrl, JsonWebKeySet, Nonce, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope,
    SignatureVerificationError, StandardErrorResponse, StandardTokenResponse, TokenResponse as _,
};
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, RwLock};

use super::provider_claims::{self, NamingClaims, UserClaim};
use super::provider_http::{self, HttpClient};

/// How a gateway signs people in with the provider (`--oidc-*`).
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    /// The issuer URL, as the provider's discovery document names itself.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    /// This console's `/ui/oidc/callback`, as registered at the provider.
    pub redirect_url: String,
    /// Scopes asked for besides `openid`.
    pub scopes: Vec<String>,
    /// The claim that lists a person's groups.
    pub groups_claim: String,
    /// The claim that names a person.
    pub user_claim: UserClaim,
    pub clock_leeway: Duration,
    /// What the sign-in button calls the provider.
    pub display_name: String,
    /// The least time between two fetches of the key set for an unknown
    /// key id.
    pub key_refetch_gap: Duration,
}

/// The claims beyond the standard ones (the groups claim among them).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OtherClaims {
    #[serde(flatten)]
    pub claims: serde_json::Map<String, serde_json::Value>,
}

impl AdditionalClaims for OtherClaims {}

type ProviderTokenResponse = StandardTokenResponse<
    IdTokenFields<
        OtherClaims,
        EmptyExtraTokenFields,
        CoreGenderClaim,
        CoreJweContentEncryptionAlgorithm,
        CoreJwsSigningAlgorithm,
    >,
    CoreTokenType,
>;

/// `CoreClient` with [`OtherClaims`], as discovery makes it.
type ProviderClient = Client<
    OtherClaims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    ProviderTokenResponse,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// The provider's metadata and keys, and the client made of them.
struct Discovered {
    metadata: CoreProviderMetadata,
    client: ProviderClient,
    at: Instant,
}

/// How often the discovery document is read again.
const REDISCOVER_AFTER: Duration = Duration::from_secs(3600);

/// What a sign-in keeps between its start and the provider's redirect
/// back (in the sessions bucket, bound to the browser by a cookie).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingSignIn {
    pub state: String,
    pub nonce: String,
    pub pkce_verifier: String,
    /// The console path to go to after.
    pub next: String,
    pub created_at: DateTime<Utc>,
}

/// Who the provider signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    pub name: String,
    pub groups: Vec<String>,
    /// What was left out of the groups, if anything.
    pub groups_note: Option<String>,
}

/// Why a sign-in with the provider failed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The provider did not answer or answered what is not OpenID Connect.
    #[error("the identity provider at {issuer} cannot be used: {why}")]
    Unavailable { issuer: String, why: String },
    /// The provider's answer is refused (a bad token, a refused code).
    #[error("{0}")]
    Refused(String),
}

/// A gateway's identity provider.
pub struct Provider {
    settings: ProviderSettings,
    http: HttpClient,
    discovered: RwLock<Option<Arc<Discovered>>>,
    /// When the key set was last fetched for an unknown key id.
    keys_fetched: Mutex<Option<Instant>>,
}

impl Provider {
    pub fn new(settings: ProviderSettings) -> anyhow::Result<Self> {
        IssuerUrl::new(settings.issuer.clone())
            .map_err(|e| anyhow::anyhow!("--oidc-issuer {:?}: {e}", settings.issuer))?;
        RedirectUrl::new(settings.redirect_url.clone())
            .map_err(|e| anyhow::anyhow!("--oidc-redirect-url {:?}: {e}", settings.redirect_url))?;
        Ok(Self {
            http: provider_http::client()?,
            settings,
            discovered: RwLock::new(None),
            keys_fetched: Mutex::new(None),
        })
    }

    pub fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    fn unavailable(&self, why: impl std::fmt::Display) -> ProviderError {
        ProviderError::Unavailable {
            issuer: self.settings.issuer.clone(),
            why: why.to_string(),
        }
    }

    /// The provider as discovered, at most an hour ago (an older one is
    /// kept while the provider does not answer).
    async fn discovered(&self) -> Result<Arc<Discovered>, ProviderError> {
        if let Some(known) = self.discovered.read().await.as_ref() {
            if known.at.elapsed() < REDISCOVER_AFTER {
                return Ok(known.clone());
            }
        }
        let mut held = self.discovered.write().await;
        if let Some(known) = held.as_ref() {
            if known.at.elapsed() < REDISCOVER_AFTER {
                return Ok(known.clone());
            }
        }
        match self.discover().await {
            Ok(fresh) => {
                let fresh = Arc::new(fresh);
                *held = Some(fresh.clone());
                Ok(fresh)
            }
            Err(e) => match held.as_ref() {
                Some(known) => {
                    tracing::warn!(error = %e, "identity provider not discovered again; the last discovery is kept");
                    Ok(known.clone())
                }
                None => Err(e),
            },
        }
    }

    async fn discover(&self) -> Result<Discovered, ProviderError> {
        let issuer =
            IssuerUrl::new(self.settings.issuer.clone()).map_err(|e| self.unavailable(e))?;
        let metadata = CoreProviderMetadata::discover_async(issuer, &self.http)
            .await
            .map_err(|e| self.unavailable(error_chain(&e)))?;
        Ok(self.discovered_with(metadata))
    }

    fn discovered_with(&self, metadata: CoreProviderMetadata) -> Discovered {
        let client = ProviderClient::from_provider_metadata(
            metadata.clone(),
            ClientId::new(self.settings.client_id.clone()),
            Some(ClientSecret::new(self.settings.client_secret.clone())),
        )
        // Checked in `new`.
        .set_redirect_uri(
            RedirectUrl::new(self.settings.redirect_url.clone()).unwrap_or_else(|_| unreachable!()),
        );
        Discovered {
            metadata,
            client,
            at: Instant::now(),
        }
    }

    /// Begin a sign-in that returns to `next`: the provider's URL to send
    /// the browser to, and what to keep until it comes back.
    pub async fn begin(
        &self,
        next: &str,
        now: DateTime<Utc>,
    ) -> Result<(url::Url, PendingSignIn), ProviderError> {
        let discovered = self.discovered().await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = discovered.client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in &self.settings.scopes {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        Ok((
            url,
            PendingSignIn {
                state: state.secret().clone(),
                nonce: nonce.secret().clone(),
                pkce_verifier: verifier.secret().clone(),
                next: next.to_string(),
                created_at: now,
            },
        ))
    }

    /// Finish the sign-in `pending` with the provider's `code`: exchange
    /// it, verify the ID token at `now`, and read who it names.
    pub async fn finish(
        &self,
        code: String,
        pending: &PendingSignIn,
        now: DateTime<Utc>,
    ) -> Result<SignedIn, ProviderError> {
        let discovered = self.discovered().await?;
        let tokens = discovered
            .client
            .exchange_code(AuthorizationCode::new(code))
            .map_err(|e| self.unavailable(e))?
            .set_pkce_verifier(PkceCodeVerifier::new(pending.pkce_verifier.clone()))
            .request_async(&self.http)
            .await
            .map_err(|e| {
                ProviderError::Refused(format!("the code was not exchanged: {}", error_chain(&e)))
            })?;
        let id_token = tokens
            .id_token()
            .ok_or_else(|| ProviderError::Refused("the provider sent no ID token".into()))?;
        let nonce = Nonce::new(pending.nonce.clone());
        let verified = match self.verify(&discovered, id_token, &nonce, now) {
            Err(ClaimsVerificationError::SignatureVerification(
                SignatureVerificationError::NoMatchingKey,
            )) => {
                let rekeyed = self.with_fresh_keys(&discovered).await?;
                self.verify(&rekeyed, id_token, &nonce, now)
            }
            other => other,
        };
        let claims = verified.map_err(|e| ProviderError::Refused(refusal_text(&e)))?;
        self.signed_in(&claims)
    }

    fn verify(
        &self,
        discovered: &Discovered,
        id_token: &openidconnect::IdToken<
            OtherClaims,
            CoreGenderClaim,
            CoreJweContentEncryptionAlgorithm,
            CoreJwsSigningAlgorithm,
        >,
        nonce: &Nonce,
        now: DateTime<Utc>,
    ) -> Result<openidconnect::IdTokenClaims<OtherClaims, CoreGenderClaim>, ClaimsVerificationError>
    {
        let leeway = chrono::Duration::from_std(self.settings.clock_leeway)
            .unwrap_or_else(|_| chrono::Duration::seconds(60));
        let verifier = discovered
            .client
            .id_token_verifier()
            .set_time_fn(move || now - leeway)
            .set_issue_time_verifier_fn(move |issued| match issued > now + leeway {
                true => Err(format!("issued in the future, at {issued}")),
                false => Ok(()),
            });
        id_token.claims(&verifier, nonce).cloned()
    }

    /// The discovery with the provider's key set fetched again, unless it
    /// was fetched less than [`ProviderSettings::key_refetch_gap`] ago.
    async fn with_fresh_keys(
        &self,
        discovered: &Discovered,
    ) -> Result<Arc<Discovered>, ProviderError> {
        let mut fetched = self.keys_fetched.lock().await;
        if fetched.is_some_and(|at| at.elapsed() < self.settings.key_refetch_gap) {
            return Err(ProviderError::Refused(
                "the ID token is signed with a key the provider does not publish".into(),
            ));
        }
        *fetched = Some(Instant::now());
        let keys = JsonWebKeySet::fetch_async(discovered.metadata.jwks_uri(), &self.http)
            .await
            .map_err(|e| self.unavailable(error_chain(&e)))?;
        let fresh = Arc::new(self.discovered_with(discovered.metadata.clone().set_jwks(keys)));
        *self.discovered.write().await = Some(fresh.clone());
        tracing::info!("identity provider's keys fetched again for an unknown key id");
        Ok(fresh)
    }

    /// Who verified `claims` name.
    fn signed_in(
        &self,
        claims: &openidconnect::IdTokenClaims<OtherClaims, CoreGenderClaim>,
    ) -> Result<SignedIn, ProviderError> {
        let naming = NamingClaims {
            subject: claims.subject().to_string(),
            email: claims.email().map(|e| e.to_string()),
            email_verified: claims.email_verified(),
            preferred_username: claims.preferred_username().map(|u| u.to_string()),
            others: claims.additional_claims().claims.clone(),
        };
        let name = provider_claims::name_of(&self.settings.user_claim, &naming)
            .map_err(|why| ProviderError::Refused(format!("no usable name: {why}")))?;
        let groups_claim = claims
            .additional_claims()
            .claims
            .get(&self.settings.groups_claim);
        let (groups, groups_note) = provider_claims::groups_of(groups_claim);
        Ok(SignedIn {
            name,
            groups,
            groups_note,
        })
    }
}

/// What a person is told of a refused ID token.
fn refusal_text(e: &ClaimsVerificationError) -> String {
    match e {
        ClaimsVerificationError::SignatureVerification(
            SignatureVerificationError::NoMatchingKey,
        ) => "the ID token is signed with a key the provider does not publish".into(),
        ClaimsVerificationError::SignatureVerification(_) => {
            "the ID token's signature does not verify".into()
        }
        ClaimsVerificationError::Expired(why) => format!("the ID token is out of date: {why}"),
        other => format!("the ID token is refused: {other}"),
    }
}

/// `e` and its sources, as one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}
