//! The parameters of the read operations ([`crate::jobs::reads`],
//! [`crate::jobs::rejections`], [`crate::runs::reads`],
//! [`crate::runs::stats`]): requests carry them as the caller wrote them
//! (instants as RFC 3339 text, page sizes as given), so that this one place
//! turns text into values and names the parameter that is wrong.

use chrono::{DateTime, Duration, Utc};
use jetcron_core::api::ApiError;
use jetcron_core::job::{validate_id, validate_namespace};

/// Page size bounds of run listings and rejections.
pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 500;

/// The schema of a `status` parameter: statuses separated by commas
/// (`style: form, explode: false` in the document).
pub fn statuses_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": { "type": "string", "enum": crate::runs::listing::STATUSES },
    })
}

/// `limit` (default [`DEFAULT_LIMIT`]), checked to be 1 to [`MAX_LIMIT`].
pub(crate) fn checked_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid_field(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}, got {limit}"),
        ));
    }
    Ok(limit)
}

/// An RFC 3339 instant given as `field`, if given.
fn instant(field: &str, text: Option<&str>) -> Result<Option<DateTime<Utc>>, ApiError> {
    text.map(|t| {
        DateTime::parse_from_rfc3339(t)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| {
                ApiError::invalid_field(
                    field,
                    format!("must be an RFC 3339 instant like 2026-11-22T10:00:00Z: {e}"),
                )
            })
    })
    .transpose()
}

/// `[from, to]` from the request, defaults applied (`to`: now), bounded by `max`.
pub(crate) fn range(
    from: Option<&str>,
    to: Option<&str>,
    now: DateTime<Utc>,
    default_span: Duration,
    max: Duration,
) -> Result<(DateTime<Utc>, DateTime<Utc>), ApiError> {
    let to = instant("to", to)?.unwrap_or(now);
    let from = instant("from", from)?.unwrap_or(to - default_span);
    if from > to {
        return Err(ApiError::invalid_field("from", "must not be later than to"));
    }
    if to - from > max {
        return Err(ApiError::invalid_field(
            "from",
            format!("the range may span at most {} days", max.num_days()),
        ));
    }
    Ok((from, to))
}

/// A job id given as the `job` parameter, checked.
pub(crate) fn job_param(job: Option<String>) -> Result<Option<String>, ApiError> {
    job.map(|id| {
        validate_id(&id)
            .map(|()| id)
            .map_err(|p| ApiError::invalid_field("job", p.message))
    })
    .transpose()
}

/// A namespace given as the `namespace` parameter, checked (`default`
/// selects the names without a dot).
pub(crate) fn namespace_param(namespace: Option<String>) -> Result<Option<String>, ApiError> {
    namespace
        .map(|ns| {
            validate_namespace("namespace", &ns)
                .map(|()| ns)
                .map_err(|p| ApiError::invalid_field("namespace", p.message))
        })
        .transpose()
}
