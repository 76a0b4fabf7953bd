//! `GET /v1/schedules/preview`: the HTTP door of the schedule preview
//! ([`crate::jobs::schedule_preview`]), the same request and answer as
//! `jetcron.api.schedules.preview`.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use jetcron_core::schedule_preview::PreviewRequest;

use super::HttpError;
use crate::jobs;
use crate::jobs::schedule_preview::PreviewReply;
use crate::GatewayState;

/// `GET /v1/schedules/preview?schedule=…&timezone=…&count=N&from=RFC3339`.
pub async fn preview(
    State(state): State<Arc<GatewayState>>,
    query: super::QueryResult<PreviewRequest>,
) -> Result<Json<PreviewReply>, HttpError> {
    let request = super::query(query)?;
    Ok(Json(jobs::schedule_preview::preview(
        &request,
        state.clock.now(),
    )?))
}
