//! HTTP adapters of the token operations ([`crate::tokens::requests`]):
//! `POST /v1/tokens`, `GET /v1/tokens`, `DELETE /v1/tokens/{id}`. Each
//! needs a token (reads of tokens are never open).

use std::sync::Arc;

use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::Json;
use jetcron_core::api::ApiError;

use super::writes::LimitedBody;
use super::{HttpError, PathResult};
use crate::caller::Caller;
use crate::request_body::parse_body;
use crate::tokens::requests::{self, CreatedToken, RevokedReply, TokensReply};
use crate::GatewayState;

/// `POST /v1/tokens` with `{"namespace","role","expires_in"?,"description"}`.
pub async fn create(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    LimitedBody(body): LimitedBody,
) -> Result<(StatusCode, Json<CreatedToken>), HttpError> {
    let made = requests::create(&state, &caller, parse_body(&body)?).await?;
    Ok((StatusCode::CREATED, Json(made)))
}

/// `GET /v1/tokens`.
pub async fn list(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<TokensReply>, HttpError> {
    Ok(Json(requests::list(&state, &caller).await?))
}

/// `DELETE /v1/tokens/{id}`. An id no token can have is refused before it
/// is looked up: as a key of the tokens bucket it could be no subject, and
/// NATS's refusal would read as the bucket being down (503).
pub async fn revoke(
    State(state): State<Arc<GatewayState>>,
    Extension(caller): Extension<Caller>,
    id: PathResult<String>,
) -> Result<Json<RevokedReply>, HttpError> {
    let Path(id) = id.map_err(super::bad_path)?;
    if !is_token_id(&id) {
        return Err(HttpError(ApiError::invalid_field(
            "id",
            format!(
                "{:?} is not a token id (1 to 32 hex digits, as in jct_<id>_<secret>)",
                id.chars().take(64).collect::<String>()
            ),
        )));
    }
    Ok(Json(requests::revoke(&state, &caller, &id).await?))
}

/// What `tokens::record::parse_token` takes as a token's id
/// ([`jetcron_core::job::patterns::TOKEN_ID_PATTERN`]).
pub(super) fn is_token_id(id: &str) -> bool {
    (1..=32).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit())
}
