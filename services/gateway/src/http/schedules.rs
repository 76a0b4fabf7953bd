//! `GET /v1/schedules/preview`: the HTTP door of the schedule preview
//! ([`crate::schedule_requests`]), the same request and answer as
//! `jetcron.api.schedules.preview`.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use jetcron_core::schedule_preview::PreviewRequest;

use super::HttpError;
use crate::schedule_requests::{self, PreviewReply};
use crate::GatewayState;

/// `GET /v1/schedules/preview?schedule=…&timezone=…&count=N&from=RFC3339`.
pub async fn preview(
    State(state): State<Arc<GatewayState>>,
    query: super::QueryResult<PreviewRequest>,
) -> Result<Json<PreviewReply>, HttpError> {
    let request = super::query(query)?;
    Ok(Json(schedule_requests::preview(
        &request,
        state.clock.now(),
    )?))
}
