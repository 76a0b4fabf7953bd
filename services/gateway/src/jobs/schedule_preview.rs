//! The schedule preview operation, one typed function behind both doors:
//! `jetcron.api.schedules.preview` (JSON body) and `GET
//! /v1/schedules/preview` (query string) decode into the same
//! [`PreviewRequest`] and answer the same [`Preview`]. The maths is pure and
//! lives in core ([`jetcron_core::schedule_preview`]); nothing here touches
//! NATS or ClickHouse, so a preview works while either is away.

use chrono::{DateTime, Utc};
use jetcron_core::api::ApiError;
use jetcron_core::schedule_preview::{self, Preview, PreviewRequest};
use serde::Serialize;

/// The answer with the API's `ok` flag.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PreviewReply {
    /// Always `true`.
    pub ok: bool,
    #[serde(flatten)]
    pub preview: Preview,
}

/// The next fires of `request`'s line after its `from` (default `now`).
pub fn preview(request: &PreviewRequest, now: DateTime<Utc>) -> Result<PreviewReply, ApiError> {
    // Problems of the line or its zone are exactly a job put's (code
    // `invalid_job`); `count` and `from` are the request's own.
    let checked = request.check(now).map_err(|problems| {
        if problems
            .iter()
            .all(|p| p.field == "schedule" || p.field == "timezone")
        {
            ApiError::invalid_job(problems)
        } else {
            ApiError::invalid_request(problems)
        }
    })?;
    Ok(PreviewReply {
        ok: true,
        preview: schedule_preview::preview(&request.schedule, &checked),
    })
}
