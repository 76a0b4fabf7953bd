//! What the document says of the path captures and headers of the routes,
//! and of the one query whose type lives in the core crate: schema-only
//! types ([`schemars::JsonSchema`]), one property per parameter, with the
//! pattern of the check the handler runs ([`jetcron_core::job::patterns`]).
//! The query types of the other routes are the handlers' own.

use jetcron_core::job::patterns::{
    BINDING_SUBJECT_PATTERN, CANONICAL_RUN_ID_PATTERN, ID_PATTERN, INSTANT_FORMAT, INSTANT_PATTERN,
    JOB_NAME_PATTERN, NAMESPACE_PATTERN, RUN_ID_PATTERN, SCHEDULE_FORMAT, SCHEDULE_PATTERN,
    SCOPE_PATTERN, TOKEN_ID_PATTERN,
};
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};

/// `{id}`: a job's name.
#[derive(JsonSchema)]
#[allow(dead_code)]
pub struct JobPath {
    /// The job's name, `<job>` or `<namespace>.<job>`.
    #[schemars(regex(pattern = JOB_NAME_PATTERN))]
    id: String,
}

/// `{run_id}` of a read: any spelling of a UUID.
#[derive(JsonSchema)]
#[allow(dead_code)]
pub struct RunPath {
    /// The run's id (a UUID: hyphenated, simple, braced or `urn:uuid:`).
    #[schemars(regex(pattern = RUN_ID_PATTERN))]
    run_id: String,
}

/// `{run_id}` of a control: the run id as jetcron writes it.
#[derive(JsonSchema)]
#[allow(dead_code)]
pub struct ControlledRunPath {
    /// The run's id, a lowercase hyphenated UUID.
    #[schemars(regex(pattern = CANONICAL_RUN_ID_PATTERN))]
    run_id: String,
}

/// `{name}`: an alert channel.
#[derive(JsonSchema)]
#[allow(dead_code)]
pub struct ChannelPath {
    /// The channel's name.
    #[schemars(regex(pattern = ID_PATTERN))]
    name: String,
}

/// `{id}`: a scoped token.
#[derive(JsonSchema)]
#[allow(dead_code)]
pub struct TokenPath {
    /// The token's id (the hex after `jct_`).
    #[schemars(regex(pattern = TOKEN_ID_PATTERN))]
    id: String,
}

/// `{namespace}` of a policy.
#[derive(JsonSchema)]
#[allow(dead_code)]
pub struct NamespacePath {
    /// The namespace (`default`: the names without a dot).
    #[schemars(regex(pattern = NAMESPACE_PATTERN))]
    namespace: String,
}

/// `{namespace}` of the bindings list.
#[derive(JsonSchema)]
#[allow(dead_code)]
pub struct ScopePath {
    /// The namespace, or `*` for the bindings that hold in every one.
    #[schemars(regex(pattern = SCOPE_PATTERN))]
    namespace: String,
}

/// `{namespace}` and `{subject}` of one binding.
#[derive(JsonSchema)]
#[allow(dead_code)]
pub struct BindingPath {
    /// The namespace, or `*` for every one.
    #[schemars(regex(pattern = SCOPE_PATTERN))]
    namespace: String,
    /// `user:<name>` or `group:<name>`.
    #[schemars(regex(pattern = BINDING_SUBJECT_PATTERN))]
    subject: String,
}

/// The compare-and-swap headers of a put (`http::writes::precondition`).
#[derive(JsonSchema)]
#[allow(dead_code)]
pub struct PutPreconditions {
    /// Write only if this is still the current revision (quotes around it
    /// are taken off, as in an entity tag).
    #[schemars(rename = "If-Match")]
    if_match: Option<u64>,
    /// `*`: create only (the name must be free). Ignored beside `If-Match`.
    #[schemars(rename = "If-None-Match", schema_with = "star", default)]
    if_none_match: Option<String>,
}

/// The compare-and-swap header of a delete.
#[derive(JsonSchema)]
#[allow(dead_code)]
pub struct DeletePrecondition {
    /// Delete only if this is still the current revision (not with
    /// `expected_revision` in the query).
    #[schemars(rename = "If-Match")]
    if_match: Option<u64>,
}

fn star(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "const": "*" })
}

/// The query of `GET /v1/schedules/preview`: the fields of
/// [`jetcron_core::schedule_preview::PreviewRequest`] (a test holds the
/// two together).
#[derive(JsonSchema)]
#[allow(dead_code)]
pub struct PreviewQuery {
    /// The schedule line, as in a job.
    #[schemars(regex(pattern = SCHEDULE_PATTERN), extend("format" = SCHEDULE_FORMAT))]
    schedule: String,
    /// IANA time zone (default UTC).
    #[schemars(schema_with = "time_zone", default)]
    timezone: Option<String>,
    /// How many fires, 1 to 1000 (default 10).
    #[schemars(range(min = 1, max = jetcron_core::schedule_preview::MAX_COUNT))]
    count: Option<usize>,
    /// Fires after this RFC 3339 instant (default: now).
    #[schemars(regex(pattern = INSTANT_PATTERN), extend("format" = INSTANT_FORMAT))]
    from: Option<String>,
}

/// An IANA time zone name ([`jetcron_core::job::schema::TIME_ZONE`]).
pub fn time_zone(_: &mut SchemaGenerator) -> Schema {
    let reference = format!(
        "#/components/schemas/{}",
        jetcron_core::job::schema::TIME_ZONE
    );
    json_schema!({ "$ref": reference })
}
