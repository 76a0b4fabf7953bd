//! The job definition: what users put into `jetcron_jobs`, and its validation.
//!
//! A definition arrives as JSON from three doors (the `jetcron.api.jobs.put`
//! endpoint, a fire-and-forget publish to it, or a raw `nats kv put`), so
//! parsing and validation live here, once, and every door gets the same
//! field-by-field errors. [`ValidJob`] is the only form the ticker and the
//! executor act on: a definition that does not validate is never scheduled.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::backoff::{self, Backoff};
use crate::job_schema::{
    self, COMMAND_PATTERN, DURATION_PATTERN, ENV_NAME_PATTERN, HTTP_HEADER_NAME_PATTERN,
    HTTP_HEADER_VALUE_PATTERN, HTTP_URL_PATTERN, ID_PATTERN, INSTANT_PATTERN, LABEL_KEY_PATTERN,
    NATS_HEADER_NAME_PATTERN, NATS_HEADER_VALUE_PATTERN, NO_CONTROL_PATTERN, NO_NUL_PATTERN,
    SCHEDULE_PATTERN, SUBJECT_PATTERN, WORKING_DIR_PATTERN,
};
use crate::schedule::{parse_timezone, Schedule, ScheduleError};
use crate::subjects::DEFAULT_POOL;
use crate::time_format::duration_text;

/// Largest accepted definition, in bytes of JSON.
pub const MAX_DEFINITION_BYTES: usize = 64 * 1024;
/// Longest job id.
pub const MAX_ID_LEN: usize = 128;
/// Attempts when the job does not say.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Attempt timeout when the job does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest timeout, and longest delay between attempts.
pub const MAX_DURATION: Duration = Duration::from_secs(86_400);
/// Most shards per fire.
pub const MAX_SHARDS: u32 = 64;
/// Most environment variables of a shell target.
pub const MAX_ENV_VARS: usize = 64;
/// Methods of an `http` target (the schema lists them too).
pub const HTTP_METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
/// Most attempts of a run.
pub const MAX_ATTEMPTS: u32 = 100;

/// A job definition as users write it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Job id: `[A-Za-z0-9][A-Za-z0-9_-]{0,127}`, safe as a KV key and a subject token.
    /// May be omitted in a direct KV write, where the key is the id.
    #[serde(default)]
    #[schemars(regex(pattern = ID_PATTERN))]
    pub id: String,
    /// Free text, at most 4096 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub description: Option<String>,
    /// Schedule line, see [`Schedule`]: 5 to 7 cron fields, a macro such as
    /// `@daily`, `@every <duration>` or `@at <RFC 3339 instant>`.
    #[schemars(regex(pattern = SCHEDULE_PATTERN))]
    pub schedule: String,
    /// IANA time zone the schedule is read in; UTC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub timezone: Option<String>,
    /// A paused job stays defined but does not fire.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    pub target: Target,
    /// First instant the job may fire (RFC 3339); no bound when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = INSTANT_PATTERN))]
    pub start_at: Option<String>,
    /// Last instant the job may fire (RFC 3339), later than `start_at`; no
    /// bound when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = INSTANT_PATTERN))]
    pub end_at: Option<String>,
    /// Largest random delay added to each fire, e.g. `"30s"`; deterministic per
    /// (job, scheduled time). 0 to 1h, default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub jitter: Option<String>,
    /// What to do with fire times nobody fired (ticker down, job paused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<MisfirePolicy>,
    /// How far back `fire_all` catches up; 1s to 7d, default 1h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub catchup_window: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Per-attempt timeout, e.g. `"30s"`; 1s to 24h, default 60s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub timeout: Option<String>,
    /// Executor pool that runs the job (same characters as an id); default `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = ID_PATTERN))]
    pub pool: Option<String>,
    /// Parallel parts of every run, 1 to 64, default 1: each part runs on any
    /// executor of the pool and is told its index; the run succeeds when all do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_SHARDS))]
    pub shards: Option<u32>,
    /// What a fire does while the previous run of the job is still going.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<ConcurrencyPolicy>,
    /// Where to report a run that ended badly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<NotifyPolicy>,
    /// Free key/values for grouping (`pause`/`resume`/`list` select on them):
    /// at most 32; keys `[A-Za-z0-9][A-Za-z0-9_.-]{0,62}`, values up to 255 bytes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = MAX_LABELS,
        "propertyNames" = {"pattern": LABEL_KEY_PATTERN},
        "additionalProperties" = {"type": "string", "maxLength": 255, "pattern": NO_CONTROL_PATTERN},
    ))]
    pub labels: BTreeMap<String, String>,
}

/// Most labels per job.
pub const MAX_LABELS: usize = 32;

/// Check a label selector or a job's labels: key syntax and value size.
pub fn validate_labels(field: &str, labels: &BTreeMap<String, String>) -> Vec<FieldError> {
    let mut problems = Vec::new();
    if labels.len() > MAX_LABELS {
        problems.push(FieldError::new(
            field,
            "too_many",
            format!("at most {MAX_LABELS} labels, got {}", labels.len()),
        ));
    }
    for (key, value) in labels {
        let key_ok = key.len() <= 63
            && key
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric())
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !key_ok {
            problems.push(FieldError::new(
                format!("{field}.{}", key.escape_debug()),
                "invalid_label",
                "label keys must match [A-Za-z0-9][A-Za-z0-9_.-]{0,62}",
            ));
        }
        if value.len() > 255 || value.chars().any(char::is_control) {
            problems.push(FieldError::new(
                format!("{field}.{}", key.escape_debug()),
                "invalid_label",
                "label values must be at most 255 bytes without control characters",
            ));
        }
    }
    problems
}

/// Overlap of runs of one job.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ConcurrencyPolicy {
    /// Runs may overlap.
    #[default]
    Allow,
    /// A fire that finds the previous run still going is recorded as `skipped`.
    Forbid,
    /// A fire that finds the previous run still going kills it and starts.
    Replace,
}

impl ConcurrencyPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ConcurrencyPolicy::Allow => "allow",
            ConcurrencyPolicy::Forbid => "forbid",
            ConcurrencyPolicy::Replace => "replace",
        }
    }
}

/// Notification of a run that failed, timed out or was killed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NotifyPolicy {
    /// `http` or `https` URL that receives a JSON summary by POST.
    #[schemars(regex(pattern = HTTP_URL_PATTERN))]
    pub webhook: String,
    /// Extra request headers (an authorization token, say): names are HTTP
    /// tokens, values without control characters but tab.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "propertyNames" = {"pattern": HTTP_HEADER_NAME_PATTERN},
        "additionalProperties" = {"type": "string", "pattern": HTTP_HEADER_VALUE_PATTERN},
    ))]
    pub headers: BTreeMap<String, String>,
}

/// Recovery of missed fire times.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum MisfirePolicy {
    /// Fire nothing that was missed; continue with the next time.
    Skip,
    /// One catch-up fire for the latest missed time.
    #[default]
    FireOnce,
    /// Every missed time within `catchup_window`.
    FireAll,
}

/// What runs when the job fires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Target {
    /// A NATS request; success is a reply without a service error header.
    Nats(NatsTarget),
    /// An HTTP request; success is a 2xx status.
    Http(HttpTarget),
    /// A command run by `/bin/sh -c`; success is exit status 0.
    Shell(ShellTarget),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsTarget {
    /// Subject to send the request to: dot-separated tokens without
    /// whitespace or wildcards, not under `jetcron.`, `$` or `_INBOX.`.
    #[schemars(regex(pattern = SUBJECT_PATTERN), length(max = 1024))]
    pub subject: String,
    /// Request body; any JSON value (a string is sent as its text). When absent
    /// the run context (`run_id`, `job_id`, `scheduled_at`, `attempt`) is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Value>,
    /// Extra headers: names visible ASCII without `:`, values without CR, LF or NUL.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "propertyNames" = {"pattern": NATS_HEADER_NAME_PATTERN},
        "additionalProperties" = {"type": "string", "pattern": NATS_HEADER_VALUE_PATTERN},
    ))]
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpTarget {
    /// `http` or `https` URL.
    #[schemars(regex(pattern = HTTP_URL_PATTERN))]
    pub url: String,
    /// HTTP method, default `GET`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", null]))]
    pub method: Option<String>,
    /// Extra headers: names are HTTP tokens, values without control characters but tab.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "propertyNames" = {"pattern": HTTP_HEADER_NAME_PATTERN},
        "additionalProperties" = {"type": "string", "pattern": HTTP_HEADER_VALUE_PATTERN},
    ))]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellTarget {
    /// Command line for `/bin/sh -c`: not blank, no NUL bytes.
    #[schemars(regex(pattern = COMMAND_PATTERN))]
    pub command: String,
    /// Absolute working directory; the executor's `--shell-workdir` (or its
    /// own) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = WORKING_DIR_PATTERN), length(max = 4096))]
    pub working_dir: Option<String>,
    /// Extra environment variables (names `[A-Za-z_][A-Za-z0-9_]*`, not `JETCRON_*`),
    /// at most 64.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = MAX_ENV_VARS,
        "propertyNames" = {"pattern": ENV_NAME_PATTERN},
        "additionalProperties" = {"type": "string", "pattern": NO_NUL_PATTERN},
    ))]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, including the first; 1 to 100, default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_ATTEMPTS))]
    pub max_attempts: Option<u32>,
    /// Delay before the second attempt; 100ms to 24h, default 1s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub backoff: Option<String>,
    /// Factor applied to the delay for each later attempt; 1 to 10, default 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub multiplier: Option<f64>,
    /// Longest delay; from `backoff` to 24h, default 5m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub max_backoff: Option<String>,
    /// Fraction of each delay taken off at random (deterministic per run and
    /// attempt); 0 to 1, default 0.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1))]
    pub jitter: Option<f64>,
}

impl Target {
    /// `nats`, `http` or `shell`.
    pub fn kind(&self) -> &'static str {
        match self {
            Target::Nats(_) => "nats",
            Target::Http(_) => "http",
            Target::Shell(_) => "shell",
        }
    }
}

/// One problem with a definition: which field, a stable code, and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FieldError {
    pub field: String,
    pub code: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, code: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            code: code.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// Default of `catchup_window`.
pub const DEFAULT_CATCHUP_WINDOW: Duration = Duration::from_secs(3600);
/// Largest `jitter`.
pub const MAX_JITTER: Duration = Duration::from_secs(3600);

/// A definition that passed validation, with its parsed parts.
#[derive(Debug, Clone)]
pub struct ValidJob {
    pub spec: JobSpec,
    pub schedule: Schedule,
    pub timezone: Tz,
    pub timeout: Duration,
    pub max_attempts: u32,
    pub backoff: Backoff,
    pub pool: String,
    pub shards: u32,
    pub concurrency: ConcurrencyPolicy,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub jitter: Duration,
    pub misfire: MisfirePolicy,
    pub catchup_window: Duration,
}

impl ValidJob {
    /// Delay before attempt `next_attempt` (2, 3, ...) of the run (or shard) named `seed`.
    pub fn retry_delay(&self, next_attempt: u32, seed: &str) -> Duration {
        self.backoff.delay(next_attempt, seed)
    }
}

/// Parse and validate a definition. `key` is the KV key it was stored under,
/// if any: the id may then be omitted, and must otherwise equal the key.
pub fn parse_job(bytes: &[u8], key: Option<&str>) -> Result<ValidJob, Vec<FieldError>> {
    parse_job_with(bytes, key, &mut Schedule::parse)
}

/// [`parse_job`] with the schedule line parsed by `parse_schedule` (a cache,
/// for holders of many jobs: the ticker parses a million definitions at start).
pub fn parse_job_with(
    bytes: &[u8],
    key: Option<&str>,
    parse_schedule: &mut dyn FnMut(&str) -> Result<Schedule, ScheduleError>,
) -> Result<ValidJob, Vec<FieldError>> {
    if bytes.len() > MAX_DEFINITION_BYTES {
        return Err(vec![FieldError::new(
            "",
            "too_large",
            format!(
                "definition is {} bytes, the limit is {MAX_DEFINITION_BYTES}",
                bytes.len()
            ),
        )]);
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        vec![FieldError::new(
            "",
            "invalid_utf8",
            format!("definition is not valid UTF-8: {e}"),
        )]
    })?;
    // serde would also read a struct from a positional array: a definition
    // (and each object in it) must be a JSON object.
    if !text.trim_start().starts_with('{') {
        let message = match serde_json::from_str::<serde_json::Value>(text) {
            Ok(value) => format!(
                "a definition is a JSON object, got {}",
                match value {
                    serde_json::Value::Null => "null",
                    serde_json::Value::Bool(_) => "a boolean",
                    serde_json::Value::Number(_) => "a number",
                    serde_json::Value::String(_) => "a string",
                    serde_json::Value::Array(_) => "an array",
                    serde_json::Value::Object(_) => "an object",
                }
            ),
            Err(e) => format!("a definition is a JSON object: {e}"),
        };
        return Err(vec![FieldError::new("", "invalid_json", message)]);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let mut spec = match serde_path_to_error::deserialize::<_, JobSpec>(&mut de) {
        Err(e) => {
            return Err(capped(every_problem(
                text,
                key,
                serde_problem(text, &e),
                parse_schedule,
            )))
        }
        Ok(spec) => match positional_object(text) {
            Some(first) => return Err(capped(every_problem(text, key, first, parse_schedule))),
            None => spec,
        },
    };
    de.end().map_err(|e| {
        vec![FieldError::new(
            "",
            "invalid_json",
            format!("trailing characters after the definition: {e}"),
        )]
    })?;
    if let Some(key) = key {
        if spec.id.is_empty() {
            spec.id = key.to_string();
        } else if spec.id != key {
            return Err(vec![id_mismatch(&spec.id, key)]);
        }
    }
    validate_with(spec, parse_schedule).map_err(capped)
}

/// The problem serde stopped at, named as precisely as we can.
fn serde_problem(text: &str, e: &serde_path_to_error::Error<serde_json::Error>) -> FieldError {
    let path = known_path(&e.path().to_string());
    if path == "target" {
        if let Some(precise) = diagnose_target(text) {
            return precise;
        }
    }
    let message = e.inner().to_string();
    // "missing field `schedule`": a required field, named.
    if let Some(name) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
    {
        let field = if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        };
        return FieldError::new(field, "required", "missing");
    }
    FieldError::new(path, "invalid_json", message)
}

/// Most problems one answer lists: a 64 KiB definition can hold thousands
/// of bad fields, and their list must still fit a NATS reply and a
/// `job.rejected` event.
pub const MAX_PROBLEMS: usize = 50;

/// `problems`, at most [`MAX_PROBLEMS`] of them: the first ones, then one
/// saying how many more there were.
fn capped(mut problems: Vec<FieldError>) -> Vec<FieldError> {
    if problems.len() > MAX_PROBLEMS {
        let more = problems.len() - (MAX_PROBLEMS - 1);
        problems.truncate(MAX_PROBLEMS - 1);
        problems.push(FieldError::new(
            "",
            "more_problems",
            format!("{more} more problems not listed"),
        ));
    }
    problems
}

/// Every problem of a definition serde refused at `first`: serde stops at
/// one, the job schema finds the other structural ones, and the fields that
/// did decode are validated as usual. Only on this failure path is the
/// schema consulted.
fn every_problem(
    text: &str,
    key: Option<&str>,
    first: FieldError,
    parse_schedule: &mut dyn FnMut(&str) -> Result<Schedule, ScheduleError>,
) -> Vec<FieldError> {
    // A problem of the document as a whole (a duplicate field) says it all.
    if first.field.is_empty() {
        return vec![first];
    }
    let mut problems = vec![first];
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return problems;
    };
    let structural = job_schema::structural_problems(&value);
    for s in &structural {
        add_unless_named(&mut problems, s.problem.clone());
    }
    let Some((mut spec, mut settled, serde_only)) = job_schema::decodable(value, &structural)
    else {
        return problems;
    };
    for p in serde_only {
        add_unless_named(&mut problems, p);
    }
    settled.extend(problems.iter().map(|p| p.field.clone()));
    if let Some(key) = key {
        if spec.id.is_empty() || job_schema::covered("id", &settled) {
            spec.id = key.to_string();
        } else if spec.id != key {
            problems.push(id_mismatch(&spec.id, key));
        }
    }
    if let Err(semantic) = validate_with(spec, parse_schedule) {
        problems.extend(
            semantic
                .into_iter()
                .filter(|p| !job_schema::covered(&p.field, &settled)),
        );
    }
    problems
}

/// Add `problem` unless one of `problems` names its field, or a field around
/// or inside it.
fn add_unless_named(problems: &mut Vec<FieldError>, problem: FieldError) {
    let named = problems.iter().any(|q| {
        job_schema::covered(&problem.field, std::slice::from_ref(&q.field))
            || job_schema::covered(&q.field, std::slice::from_ref(&problem.field))
    });
    if !named {
        problems.push(problem);
    }
}

fn id_mismatch(id: &str, key: &str) -> FieldError {
    FieldError::new(
        "id",
        "id_mismatch",
        format!("id {id:?} differs from the KV key {key:?} it is stored under"),
    )
}

/// A serde path as a field name: `.` (the root) is empty, and the path stops
/// before an unknown position (`?`, a document cut off mid-way).
fn known_path(path: &str) -> String {
    path.split('.')
        .take_while(|segment| *segment != "?")
        .filter(|segment| !segment.is_empty())
        .collect::<Vec<_>>()
        .join(".")
}

/// The first object-valued field given as an array (serde reads structs from
/// positional arrays too; a definition never has them).
fn positional_object(text: &str) -> Option<FieldError> {
    const OBJECTS: [&str; 7] = [
        "/target",
        "/retry",
        "/notify",
        "/labels",
        "/target/headers",
        "/target/env",
        "/notify/headers",
    ];
    let root: serde_json::Value = serde_json::from_str(text).ok()?;
    OBJECTS.iter().find_map(|pointer| {
        root.pointer(pointer).filter(|v| !v.is_object()).map(|v| {
            let field = pointer.trim_start_matches('/').replace('/', ".");
            let kind = match v {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::Null => "null",
                _ => "not an object",
            };
            FieldError::new(
                field,
                "invalid_json",
                format!("must be a JSON object, got {kind}"),
            )
        })
    })
}

/// serde reads a tagged enum through a buffer and loses the path inside it;
/// re-read the target alone to name the exact field (`target.url`).
fn diagnose_target(text: &str) -> Option<FieldError> {
    let root: serde_json::Value = serde_json::from_str(text).ok()?;
    let mut target = root.get("target")?.as_object()?.clone();
    let kind = match target.remove("type") {
        Some(serde_json::Value::String(kind)) => kind,
        Some(other) => {
            return Some(FieldError::new(
                "target.type",
                "invalid_json",
                format!("must be one of \"nats\", \"http\", \"shell\", got {other}"),
            ))
        }
        None => {
            return Some(FieldError::new(
                "target.type",
                "required",
                "missing; must be one of \"nats\", \"http\", \"shell\"",
            ))
        }
    };
    let rest = serde_json::Value::Object(target);
    let result = match kind.as_str() {
        "nats" => serde_path_to_error::deserialize::<_, NatsTarget>(rest).map(drop),
        "http" => serde_path_to_error::deserialize::<_, HttpTarget>(rest).map(drop),
        "shell" => serde_path_to_error::deserialize::<_, ShellTarget>(rest).map(drop),
        other => {
            return Some(FieldError::new(
                "target.type",
                "invalid_json",
                format!("must be one of \"nats\", \"http\", \"shell\", got {other:?}"),
            ))
        }
    };
    let err = result.err()?;
    let path = err.path().to_string();
    let field = if path == "." {
        "target".to_string()
    } else {
        format!("target.{path}")
    };
    Some(FieldError::new(
        field,
        "invalid_json",
        err.inner().to_string(),
    ))
}

/// Check every field of `spec`, returning all problems at once.
pub fn validate(spec: JobSpec) -> Result<ValidJob, Vec<FieldError>> {
    validate_with(spec, &mut Schedule::parse)
}

/// [`validate`] with the schedule line parsed by `parse_schedule`.
pub fn validate_with(
    spec: JobSpec,
    parse_schedule: &mut dyn FnMut(&str) -> Result<Schedule, ScheduleError>,
) -> Result<ValidJob, Vec<FieldError>> {
    let mut problems = Vec::new();
    if let Err(p) = validate_id(&spec.id) {
        problems.push(p);
    }
    let schedule = parse_schedule(&spec.schedule)
        .map_err(|e| problems.push(FieldError::new("schedule", "invalid_schedule", e.0)))
        .ok();
    let timezone = match &spec.timezone {
        None => Some(chrono_tz::UTC),
        Some(name) => parse_timezone(name)
            .map_err(|e| problems.push(FieldError::new("timezone", "invalid_timezone", e.0)))
            .ok(),
    };
    let timeout = match &spec.timeout {
        None => Some(DEFAULT_TIMEOUT),
        Some(text) => parse_bounded_duration("timeout", text, Duration::from_secs(1), MAX_DURATION)
            .map_err(|p| problems.push(p))
            .ok(),
    };
    let max_attempts = spec
        .retry
        .as_ref()
        .and_then(|r| r.max_attempts)
        .unwrap_or(DEFAULT_MAX_ATTEMPTS);
    if !(1..=MAX_ATTEMPTS).contains(&max_attempts) {
        problems.push(FieldError::new(
            "retry.max_attempts",
            "out_of_range",
            format!("must be between 1 and {MAX_ATTEMPTS}, got {max_attempts}"),
        ));
    }
    let backoff = validate_backoff(spec.retry.as_ref(), &mut problems);
    let pool = match &spec.pool {
        None => Some(DEFAULT_POOL.to_string()),
        Some(pool) => validate_token("pool", pool)
            .map_err(|p| problems.push(p))
            .ok()
            .map(|()| pool.clone()),
    };
    let shards = spec.shards.unwrap_or(1);
    if !(1..=MAX_SHARDS).contains(&shards) {
        problems.push(FieldError::new(
            "shards",
            "out_of_range",
            format!("must be between 1 and {MAX_SHARDS}, got {shards}"),
        ));
    }
    if let Some(notify) = &spec.notify {
        validate_http_url("notify.webhook", &notify.webhook, &mut problems);
        validate_headers("notify.headers", &notify.headers, &mut problems);
        validate_http_headers("notify.headers", &notify.headers, &mut problems);
    }
    let start_at = parse_instant("start_at", spec.start_at.as_deref(), &mut problems);
    let end_at = parse_instant("end_at", spec.end_at.as_deref(), &mut problems);
    if let (Some(Some(start)), Some(Some(end))) = (start_at, end_at) {
        if end <= start {
            problems.push(FieldError::new(
                "end_at",
                "out_of_range",
                "must be later than start_at",
            ));
        }
    }
    let jitter = match &spec.jitter {
        None => Some(Duration::ZERO),
        Some(text) => parse_bounded_duration("jitter", text, Duration::ZERO, MAX_JITTER)
            .map_err(|p| problems.push(p))
            .ok(),
    };
    let catchup_window = match &spec.catchup_window {
        None => Some(DEFAULT_CATCHUP_WINDOW),
        Some(text) => parse_bounded_duration(
            "catchup_window",
            text,
            Duration::from_secs(1),
            Duration::from_secs(7 * 86_400),
        )
        .map_err(|p| problems.push(p))
        .ok(),
    };
    validate_target(&spec.target, &mut problems);
    problems.extend(validate_labels("labels", &spec.labels));
    if let Some(d) = &spec.description {
        if d.len() > 4096 {
            problems.push(FieldError::new(
                "description",
                "too_long",
                format!("must be at most 4096 bytes, got {}", d.len()),
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    match (
        (schedule, timezone, timeout, backoff),
        (start_at, end_at, jitter, catchup_window),
        pool,
    ) {
        (
            (Some(schedule), Some(timezone), Some(timeout), Some(backoff)),
            (Some(start_at), Some(end_at), Some(jitter), Some(catchup_window)),
            Some(pool),
        ) => Ok(ValidJob {
            misfire: spec.misfire.unwrap_or_default(),
            concurrency: spec.concurrency.unwrap_or_default(),
            spec,
            schedule,
            timezone,
            timeout,
            max_attempts,
            backoff,
            pool,
            shards,
            start_at,
            end_at,
            jitter,
            catchup_window,
        }),
        _ => Err(problems),
    }
}

/// Check a job id against the documented character set and length.
pub fn validate_id(id: &str) -> Result<(), FieldError> {
    validate_token("id", id)
}

/// Check a name that becomes a subject token and a KV key (job id, pool).
pub fn validate_token(field: &str, id: &str) -> Result<(), FieldError> {
    if id.is_empty() {
        return Err(FieldError::new(field, "required", "must not be empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(FieldError::new(
            field,
            "too_long",
            format!("must be at most {MAX_ID_LEN} characters, got {}", id.len()),
        ));
    }
    let mut chars = id.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !first_ok || !rest_ok {
        return Err(FieldError::new(
            field,
            "invalid_id",
            format!(
                "{id:?} must start with a letter or digit and contain only letters, digits, '-' and '_'"
            ),
        ));
    }
    Ok(())
}

fn validate_target(target: &Target, problems: &mut Vec<FieldError>) {
    match target {
        Target::Nats(t) => {
            if !is_valid_publish_subject(&t.subject) {
                problems.push(FieldError::new(
                    "target.subject",
                    "invalid_subject",
                    format!(
                        "{:?} is not a NATS subject: dot-separated non-empty tokens without spaces or wildcards",
                        t.subject
                    ),
                ));
            }
            if let Some(prefix) = reserved_subject_prefix(&t.subject) {
                problems.push(FieldError::new(
                    "target.subject",
                    "reserved_subject",
                    format!(
                        "{:?} is under {prefix:?}, which jetcron and NATS use themselves (a job could forge due or run events through it)",
                        t.subject
                    ),
                ));
            }
            validate_headers("target.headers", &t.headers, problems);
        }
        Target::Http(t) => {
            validate_http_url("target.url", &t.url, problems);
            if let Some(m) = &t.method {
                if !HTTP_METHODS.contains(&m.as_str()) {
                    problems.push(FieldError::new(
                        "target.method",
                        "invalid_method",
                        format!("must be one of {}, got {m:?}", HTTP_METHODS.join(" ")),
                    ));
                }
            }
            validate_headers("target.headers", &t.headers, problems);
            validate_http_headers("target.headers", &t.headers, problems);
        }
        Target::Shell(t) => {
            if t.command.trim().is_empty() {
                problems.push(FieldError::new(
                    "target.command",
                    "required",
                    "must not be empty",
                ));
            }
            if t.command.contains('\0') {
                problems.push(FieldError::new(
                    "target.command",
                    "invalid_command",
                    "must not contain NUL bytes",
                ));
            }
            validate_shell_options(t, problems);
        }
    }
}

fn validate_shell_options(t: &ShellTarget, problems: &mut Vec<FieldError>) {
    if let Some(dir) = &t.working_dir {
        if !dir.starts_with('/') || dir.contains('\0') || dir.len() > 4096 {
            problems.push(FieldError::new(
                "target.working_dir",
                "invalid_path",
                format!(
                    "must be an absolute path without NUL bytes, at most 4096 bytes, got {dir:?}"
                ),
            ));
        }
    }
    if t.env.len() > MAX_ENV_VARS {
        problems.push(FieldError::new(
            "target.env",
            "too_many",
            format!("at most {MAX_ENV_VARS} variables, got {}", t.env.len()),
        ));
    }
    for (name, value) in &t.env {
        let field = format!("target.env.{}", name.escape_debug());
        let name_ok = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok {
            problems.push(FieldError::new(
                field.clone(),
                "invalid_env",
                "names must match [A-Za-z_][A-Za-z0-9_]*",
            ));
        } else if name.to_ascii_uppercase().starts_with("JETCRON_") {
            problems.push(FieldError::new(
                field.clone(),
                "reserved_env",
                "JETCRON_* variables are set by the executor (run context)",
            ));
        }
        if value.contains('\0') {
            problems.push(FieldError::new(
                field,
                "invalid_env",
                "values must not contain NUL bytes",
            ));
        }
    }
}

fn validate_http_url(field: &str, text: &str, problems: &mut Vec<FieldError>) {
    // The URL parser drops tabs and line breaks: the stored text would not be
    // the URL that runs.
    if text.chars().any(char::is_control) {
        problems.push(FieldError::new(
            field,
            "invalid_url",
            format!("{text:?} contains control characters"),
        ));
        return;
    }
    match url::Url::parse(text) {
        Ok(u) if u.scheme() == "http" || u.scheme() == "https" => {}
        Ok(u) => problems.push(FieldError::new(
            field,
            "invalid_url",
            format!("scheme must be http or https, got {:?}", u.scheme()),
        )),
        Err(e) => problems.push(FieldError::new(
            field,
            "invalid_url",
            format!("{text:?} is not a URL: {e}"),
        )),
    }
}

fn validate_http_headers(
    field: &str,
    headers: &BTreeMap<String, String>,
    problems: &mut Vec<FieldError>,
) {
    for (name, value) in headers {
        let ok = http::HeaderName::from_bytes(name.as_bytes()).is_ok()
            && http::HeaderValue::from_str(value).is_ok();
        if !ok {
            problems.push(FieldError::new(
                format!("{field}.{}", name.escape_debug()),
                "invalid_header",
                "not a valid HTTP header: names are tokens (letters, digits, !#$%&'*+-.^_`|~), values visible ASCII, space or tab",
            ));
        }
    }
}

/// `retry.backoff`, `retry.multiplier`, `retry.max_backoff`, `retry.jitter`.
fn validate_backoff(
    retry: Option<&RetryPolicy>,
    problems: &mut Vec<FieldError>,
) -> Option<Backoff> {
    let Some(retry) = retry else {
        return Some(Backoff::default());
    };
    let before = problems.len();
    let initial = match &retry.backoff {
        None => backoff::DEFAULT_INITIAL,
        Some(text) => parse_bounded_duration(
            "retry.backoff",
            text,
            Duration::from_millis(100),
            MAX_DURATION,
        )
        .map_err(|p| problems.push(p))
        .unwrap_or(backoff::DEFAULT_INITIAL),
    };
    let max = match &retry.max_backoff {
        None => backoff::DEFAULT_MAX.max(initial),
        Some(text) => parse_bounded_duration("retry.max_backoff", text, initial, MAX_DURATION)
            .map_err(|mut p| {
                if p.code == "out_of_range" {
                    p.message = format!(
                        "must be between retry.backoff ({}) and 24h, got {text:?}",
                        duration_text(initial)
                    );
                }
                problems.push(p)
            })
            .unwrap_or(backoff::DEFAULT_MAX),
    };
    let multiplier = retry.multiplier.unwrap_or(backoff::DEFAULT_MULTIPLIER);
    if !(1.0..=10.0).contains(&multiplier) {
        problems.push(FieldError::new(
            "retry.multiplier",
            "out_of_range",
            format!("must be between 1 and 10, got {multiplier}"),
        ));
    }
    let jitter = retry.jitter.unwrap_or(backoff::DEFAULT_JITTER);
    if !(0.0..=1.0).contains(&jitter) {
        problems.push(FieldError::new(
            "retry.jitter",
            "out_of_range",
            format!("must be between 0 and 1, got {jitter}"),
        ));
    }
    (problems.len() == before).then_some(Backoff {
        initial,
        multiplier,
        max,
        jitter,
    })
}

fn validate_headers(
    field: &str,
    headers: &BTreeMap<String, String>,
    problems: &mut Vec<FieldError>,
) {
    for (name, value) in headers {
        let name_ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b':');
        if !name_ok {
            problems.push(FieldError::new(
                format!("{field}.{}", name.escape_debug()),
                "invalid_header",
                "header names must be visible ASCII without ':'",
            ));
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            problems.push(FieldError::new(
                format!("{field}.{}", name.escape_debug()),
                "invalid_header",
                "header values must not contain CR, LF or NUL",
            ));
        }
    }
}

/// A subject one can publish to: non-empty dot-separated tokens, no wildcards or whitespace.
/// Subject prefixes a `nats` target may not use: the executor publishes a
/// target's request with its own permissions, so a job aimed at jetcron's own
/// subjects (`jetcron.due.…`, `jetcron.runs.…`), the JetStream and system
/// APIs (`$JS.…`, `$KV.…`, `$SYS.…`) or reply inboxes could forge events.
pub const RESERVED_SUBJECT_PREFIXES: [&str; 3] = ["jetcron.", "$", "_INBOX."];

/// The reserved prefix `subject` falls under, if any.
pub fn reserved_subject_prefix(subject: &str) -> Option<&'static str> {
    RESERVED_SUBJECT_PREFIXES
        .into_iter()
        .find(|p| subject.starts_with(p) || subject == p.trim_end_matches('.'))
}

pub fn is_valid_publish_subject(subject: &str) -> bool {
    !subject.is_empty()
        && subject.len() <= 1024
        && subject.split('.').all(|token| {
            !token.is_empty()
                && token != "*"
                && token != ">"
                && !token.chars().any(|c| c.is_whitespace() || c.is_control())
        })
}

/// `Some(None)`: absent; `Some(Some(t))`: valid; `None`: invalid (problem recorded).
fn parse_instant(
    field: &str,
    text: Option<&str>,
    problems: &mut Vec<FieldError>,
) -> Option<Option<DateTime<Utc>>> {
    let Some(text) = text else {
        return Some(None);
    };
    match DateTime::parse_from_rfc3339(text) {
        Ok(t) => Some(Some(t.with_timezone(&Utc))),
        Err(e) => {
            problems.push(FieldError::new(
                field,
                "invalid_instant",
                format!(
                    "expected an RFC 3339 instant such as 2030-01-01T09:00:00Z, got {text:?}: {e}"
                ),
            ));
            None
        }
    }
}

fn parse_bounded_duration(
    field: &str,
    text: &str,
    min: Duration,
    max: Duration,
) -> Result<Duration, FieldError> {
    let d = humantime::parse_duration(text).map_err(|e| {
        FieldError::new(
            field,
            "invalid_duration",
            format!("{text:?} is not a duration such as \"30s\" or \"5m\": {e}"),
        )
    })?;
    if d < min || d > max {
        return Err(FieldError::new(
            field,
            "out_of_range",
            format!(
                "must be between {} and {}, got {text:?}",
                duration_text(min),
                duration_text(max)
            ),
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(json: &str) -> Vec<FieldError> {
        parse_job(json.as_bytes(), None).expect_err("must be refused")
    }

    #[test]
    fn minimal_definition_is_valid() {
        let job = parse_job(
            br#"{"id":"hello","schedule":"*/2 * * * * *","target":{"type":"nats","subject":"demo.hello"}}"#,
            None,
        )
        .expect("valid");
        assert_eq!(job.spec.id, "hello");
        assert_eq!(job.max_attempts, 3);
        assert_eq!(job.timeout, DEFAULT_TIMEOUT);
        assert_eq!(job.spec.target.kind(), "nats");
    }

    #[test]
    fn key_supplies_a_missing_id_and_must_match_a_given_one() {
        let json = br#"{"schedule":"@every 5s","target":{"type":"shell","command":"true"}}"#;
        assert_eq!(parse_job(json, Some("k1")).expect("valid").spec.id, "k1");
        let json =
            br#"{"id":"a","schedule":"@every 5s","target":{"type":"shell","command":"true"}}"#;
        let errs = parse_job(json, Some("b")).expect_err("mismatch");
        assert_eq!(errs[0].code, "id_mismatch");
    }

    #[test]
    fn thousands_of_bad_fields_give_a_bounded_answer() {
        let unknown: Vec<String> = (0..4000).map(|i| format!("\"x{i}\":1")).collect();
        let text = format!(
            r#"{{"id":"j","schedule":"@daily","target":{{"type":"nats","subject":"a"}},{}}}"#,
            unknown.join(",")
        );
        assert!(text.len() < MAX_DEFINITION_BYTES);
        let started = std::time::Instant::now();
        let errs = problems(&text);
        assert_eq!(errs.len(), MAX_PROBLEMS, "{:?}", &errs[..3]);
        assert_eq!(errs[0].field, "x0", "{}", errs[0]);
        let last = errs.last().expect("last");
        assert_eq!(last.code, "more_problems");
        assert!(last.message.ends_with("more problems not listed"), "{last}");
        let answer = serde_json::to_vec(&errs).expect("json");
        assert!(answer.len() < 64 * 1024, "{} bytes", answer.len());
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let errs = problems(
            r#"{"id":"bad id","schedule":"* * * *","timezone":"Nowhere/City","timeout":"0s",
                "target":{"type":"http","url":"ftp://x/"}}"#,
        );
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            ["id", "schedule", "timezone", "timeout", "target.url"]
        );
        assert_eq!(
            errs[1].to_string(),
            "schedule: expected 5, 6 or 7 fields, got 4"
        );
        assert_eq!(
            errs[3].to_string(),
            "timeout: must be between 1s and 24h, got \"0s\""
        );
        assert_eq!(
            errs[4].to_string(),
            "target.url: scheme must be http or https, got \"ftp\""
        );
    }

    #[test]
    fn duration_bounds_read_as_they_are_written() {
        let errs = problems(
            r#"{"id":"x","schedule":"@daily","jitter":"2h","catchup_window":"8d",
                "retry":{"backoff":"10ms","max_backoff":"25h"},
                "target":{"type":"shell","command":"true"}}"#,
        );
        let got: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "retry.backoff: must be between 100ms and 24h, got \"10ms\"",
                "retry.max_backoff: must be between retry.backoff (1s) and 24h, got \"25h\"",
                "jitter: must be between 0s and 1h, got \"2h\"",
                "catchup_window: must be between 1s and 7d, got \"8d\"",
            ]
        );
    }

    #[test]
    fn structural_errors_name_the_field() {
        let errs = problems(r#"{"id":"x","schedule":"@daily","target":{"type":"http","url":5}}"#);
        assert_eq!(errs[0].field, "target.url");
        let errs = problems(r#"{"id":"x","schedule":"@daily","target":{"type":"ftp"}}"#);
        assert_eq!(errs[0].field, "target.type");
        let errs = problems(
            r#"{"id":"x","schedule":"@daily","colour":"red","target":{"type":"shell","command":"true"}}"#,
        );
        assert!(errs[0].message.contains("unknown field"), "{:?}", errs);
        let errs = problems(
            r#"{"id":"x","schedule":"@daily","target":{"type":"shell","command":"true","workdir":"/"}}"#,
        );
        assert!(errs[0].message.contains("unknown field"), "{:?}", errs);
        let errs = problems(
            r#"{"id":"x","schedule":"@daily","target":{"type":"shell","command":"true"}} trailing"#,
        );
        assert_eq!(errs[0].code, "invalid_json");
        // Found by the bad-input corpus (tests/bad_input/):
        // a missing field is "required", by name;
        let errs = problems(r#"{"id":"x","target":{"type":"shell","command":"true"}}"#);
        assert_eq!(
            (errs[0].field.as_str(), errs[0].code.as_str()),
            ("schedule", "required")
        );
        let errs = problems(r#"{"id":"x","schedule":"@daily"}"#);
        assert_eq!(
            (errs[0].field.as_str(), errs[0].code.as_str()),
            ("target", "required")
        );
        // serde's positional form of a struct is not a definition;
        for (body, field) in [
            (
                r#"["x",null,"@daily",null,false,{"type":"nats","subject":"s"}]"#,
                "",
            ),
            (
                r#"{"id":"x","schedule":"@daily","retry":[3],"target":{"type":"nats","subject":"s"}}"#,
                "retry",
            ),
            (
                r#"{"id":"x","schedule":"@daily","target":{"type":"nats","subject":"s","headers":[]}}"#,
                "target",
            ),
        ] {
            let errs = problems(body);
            assert_eq!(errs[0].code, "invalid_json", "{body}: {errs:?}");
            assert!(errs[0].field.starts_with(field), "{body}: {errs:?}");
        }
        // a document cut off inside target names target, not "target.?";
        let errs = problems(r#"{"id":"x","schedule":"@daily","target":{"type":"nats","subj"#);
        assert_eq!(errs[0].field, "target", "{errs:?}");
        // and line breaks in a URL are refused, not silently dropped.
        let errs = problems(
            "{\"id\":\"x\",\"schedule\":\"@daily\",\"target\":{\"type\":\"http\",\"url\":\"http://example.com/x\\r\\nX-Injected: 1\"}}",
        );
        assert_eq!(
            (errs[0].field.as_str(), errs[0].code.as_str()),
            ("target.url", "invalid_url"),
            "{errs:?}"
        );
    }

    #[test]
    fn ids_are_subject_and_key_safe() {
        assert!(validate_id("backup-db_01").is_ok());
        for bad in ["", "a.b", "a b", "a*", ">", "-lead", "é", &"x".repeat(129)] {
            assert!(validate_id(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn oversize_and_non_utf8_are_refused() {
        let big = vec![b' '; MAX_DEFINITION_BYTES + 1];
        assert_eq!(parse_job(&big, None).expect_err("big")[0].code, "too_large");
        assert_eq!(
            parse_job(&[0xff, 0xfe], None).expect_err("utf8")[0].code,
            "invalid_utf8"
        );
    }

    #[test]
    fn retry_fields_shape_the_delays() {
        let job = parse_job(
            br#"{"id":"r","schedule":"@daily","target":{"type":"shell","command":"true"},
                "retry":{"max_attempts":5,"backoff":"2s","multiplier":3,"max_backoff":"10s","jitter":0}}"#,
            None,
        )
        .expect("valid");
        let delays: Vec<u64> = (2..=5).map(|a| job.retry_delay(a, "r").as_secs()).collect();
        assert_eq!(delays, [2, 6, 10, 10]);
        let default = parse_job(
            br#"{"id":"r","schedule":"@daily","target":{"type":"shell","command":"true"}}"#,
            None,
        )
        .expect("valid");
        assert_eq!(default.backoff, Backoff::default());
    }

    #[test]
    fn lifecycle_fields_are_checked() {
        let errs = problems(
            r#"{"id":"x","schedule":"@daily","pool":"gpu.a","shards":0,
                "retry":{"backoff":"10s","max_backoff":"5s","multiplier":0.5,"jitter":2},
                "notify":{"webhook":"mailto:ops@example.com"},
                "target":{"type":"shell","command":"true","working_dir":"tmp","env":{"JETCRON_RUN_ID":"x","1A":"y"}}}"#,
        );
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "retry.max_backoff",
                "retry.multiplier",
                "retry.jitter",
                "pool",
                "shards",
                "notify.webhook",
                "target.working_dir",
                "target.env.1A",
                "target.env.JETCRON_RUN_ID",
            ],
            "{errs:#?}"
        );
        let job = parse_job(
            br#"{"id":"x","schedule":"@daily","pool":"gpu","shards":3,"concurrency":"forbid",
                "notify":{"webhook":"https://hooks.example.com/x"},
                "target":{"type":"shell","command":"true","working_dir":"/tmp","env":{"MODE":"fast"}}}"#,
            None,
        )
        .expect("valid");
        assert_eq!((job.pool.as_str(), job.shards), ("gpu", 3));
        assert_eq!(job.concurrency, ConcurrencyPolicy::Forbid);
    }

    #[test]
    fn nats_targets_cannot_aim_at_jetcron_or_nats_subjects() {
        for subject in [
            "jetcron.due.default.x",
            "jetcron.runs.x.succeeded",
            "jetcron",
            "$KV.jetcron_jobs.x",
            "$JS.API.STREAM.DELETE.JETCRON_DUE",
            "_INBOX.abc",
        ] {
            let body = format!(
                r#"{{"id":"forge","schedule":"@daily","target":{{"type":"nats","subject":"{subject}"}}}}"#
            );
            let problems = parse_job(body.as_bytes(), None).expect_err(subject);
            assert!(
                problems
                    .iter()
                    .any(|p| p.field == "target.subject" && p.code == "reserved_subject"),
                "{subject}: {problems:?}"
            );
        }
        let ok = br#"{"id":"fine","schedule":"@daily","target":{"type":"nats","subject":"jetcronish.svc"}}"#;
        assert!(parse_job(ok, None).is_ok());
    }
}
