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

use crate::schedule::{parse_timezone, Schedule, ScheduleError};

/// Largest accepted definition, in bytes of JSON.
pub const MAX_DEFINITION_BYTES: usize = 64 * 1024;
/// Longest job id.
pub const MAX_ID_LEN: usize = 128;
/// Attempts when the job does not say.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Delay before the second attempt when the job does not say; doubles each attempt.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);
/// Longest delay between attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Attempt timeout when the job does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A job definition as users write it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Job id: `[A-Za-z0-9][A-Za-z0-9_-]{0,127}`, safe as a KV key and a subject token.
    /// May be omitted in a direct KV write, where the key is the id.
    #[serde(default)]
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Schedule line, see [`Schedule`].
    pub schedule: String,
    /// IANA time zone the schedule is read in; UTC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// A paused job stays defined but does not fire.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    pub target: Target,
    /// First instant the job may fire (RFC 3339); no bound when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// Last instant the job may fire (RFC 3339); no bound when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<String>,
    /// Largest random delay added to each fire, e.g. `"30s"`; deterministic per
    /// (job, scheduled time). 0 to 1h, default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    /// What to do with fire times nobody fired (ticker down, job paused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<MisfirePolicy>,
    /// How far back `fire_all` catches up; 1s to 7d, default 1h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catchup_window: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Per-attempt timeout, e.g. `"30s"`; 1s to 24h, default 60s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// Recovery of missed fire times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Target {
    /// A NATS request; success is a reply without a service error header.
    Nats(NatsTarget),
    /// An HTTP request; success is a 2xx status.
    Http(HttpTarget),
    /// A command run by `/bin/sh -c`; success is exit status 0.
    Shell(ShellTarget),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsTarget {
    pub subject: String,
    /// Request body; any JSON value (a string is sent as its text). When absent
    /// the run context (`run_id`, `job_id`, `scheduled_at`, `attempt`) is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpTarget {
    pub url: String,
    /// HTTP method, default `GET`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellTarget {
    pub command: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, including the first; 1 to 100, default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Delay before the second attempt, doubled for each later one (capped at 5m); default 1s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<String>,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    pub backoff: Duration,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub jitter: Duration,
    pub misfire: MisfirePolicy,
    pub catchup_window: Duration,
}

impl ValidJob {
    /// Delay before attempt `next_attempt` (2, 3, ...): backoff doubled per
    /// earlier retry, capped at [`MAX_BACKOFF`].
    pub fn retry_delay(&self, next_attempt: u32) -> Duration {
        let doublings = next_attempt.saturating_sub(2).min(20);
        self.backoff
            .saturating_mul(1u32 << doublings)
            .min(MAX_BACKOFF)
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
    let mut de = serde_json::Deserializer::from_str(text);
    let mut spec: JobSpec = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        if path == "target" {
            if let Some(precise) = diagnose_target(text) {
                return vec![precise];
            }
        }
        let field = if path == "." || path == "?" {
            String::new()
        } else {
            path
        };
        vec![FieldError::new(
            field,
            "invalid_json",
            e.inner().to_string(),
        )]
    })?;
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
            return Err(vec![FieldError::new(
                "id",
                "id_mismatch",
                format!(
                    "id {:?} differs from the KV key {key:?} it is stored under",
                    spec.id
                ),
            )]);
        }
    }
    validate_with(spec, parse_schedule)
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
        Some(text) => parse_bounded_duration(
            "timeout",
            text,
            Duration::from_secs(1),
            Duration::from_secs(86_400),
        )
        .map_err(|p| problems.push(p))
        .ok(),
    };
    let retry = spec.retry.clone().unwrap_or(RetryPolicy {
        max_attempts: None,
        backoff: None,
    });
    let max_attempts = retry.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    if !(1..=100).contains(&max_attempts) {
        problems.push(FieldError::new(
            "retry.max_attempts",
            "out_of_range",
            format!("must be between 1 and 100, got {max_attempts}"),
        ));
    }
    let backoff = match &retry.backoff {
        None => Some(DEFAULT_BACKOFF),
        Some(text) => parse_bounded_duration(
            "retry.backoff",
            text,
            Duration::from_millis(100),
            MAX_BACKOFF,
        )
        .map_err(|p| problems.push(p))
        .ok(),
    };
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
        schedule,
        timezone,
        timeout,
        backoff,
        start_at,
        end_at,
        jitter,
        catchup_window,
    ) {
        (
            Some(schedule),
            Some(timezone),
            Some(timeout),
            Some(backoff),
            Some(start_at),
            Some(end_at),
            Some(jitter),
            Some(catchup_window),
        ) => Ok(ValidJob {
            misfire: spec.misfire.unwrap_or_default(),
            spec,
            schedule,
            timezone,
            timeout,
            max_attempts,
            backoff,
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
    if id.is_empty() {
        return Err(FieldError::new("id", "required", "must not be empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(FieldError::new(
            "id",
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
            "id",
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
            validate_headers("target.headers", &t.headers, problems);
        }
        Target::Http(t) => {
            match url::Url::parse(&t.url) {
                Ok(u) if u.scheme() == "http" || u.scheme() == "https" => {}
                Ok(u) => problems.push(FieldError::new(
                    "target.url",
                    "invalid_url",
                    format!("scheme must be http or https, got {:?}", u.scheme()),
                )),
                Err(e) => problems.push(FieldError::new(
                    "target.url",
                    "invalid_url",
                    format!("{:?} is not a URL: {e}", t.url),
                )),
            }
            if let Some(m) = &t.method {
                const METHODS: [&str; 7] =
                    ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
                if !METHODS.contains(&m.as_str()) {
                    problems.push(FieldError::new(
                        "target.method",
                        "invalid_method",
                        format!("must be one of {}, got {m:?}", METHODS.join(" ")),
                    ));
                }
            }
            validate_headers("target.headers", &t.headers, problems);
            for (name, value) in &t.headers {
                let ok = http::HeaderName::from_bytes(name.as_bytes()).is_ok()
                    && http::HeaderValue::from_str(value).is_ok();
                if !ok {
                    problems.push(FieldError::new(
                        format!("target.headers.{}", name.escape_debug()),
                        "invalid_header",
                        "not a valid HTTP header: names are tokens (letters, digits, !#$%&'*+-.^_`|~), values visible ASCII, space or tab",
                    ));
                }
            }
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
        }
    }
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
                humantime::format_duration(min),
                humantime::format_duration(max)
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
            errs[4].to_string(),
            "target.url: scheme must be http or https, got \"ftp\""
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
            r#"{"id":"x","schedule":"@daily","target":{"type":"shell","command":"true","cwd":"/"}}"#,
        );
        assert!(errs[0].message.contains("unknown field"), "{:?}", errs);
        let errs = problems("{\"id\":\"x\"} trailing");
        assert_eq!(errs[0].code, "invalid_json");
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
    fn retry_delay_doubles_and_caps() {
        let job = parse_job(
            br#"{"id":"r","schedule":"@daily","target":{"type":"shell","command":"true"},"retry":{"max_attempts":5,"backoff":"2s"}}"#,
            None,
        )
        .expect("valid");
        assert_eq!(job.retry_delay(2), Duration::from_secs(2));
        assert_eq!(job.retry_delay(3), Duration::from_secs(4));
        assert_eq!(job.retry_delay(4), Duration::from_secs(8));
        assert_eq!(job.retry_delay(40), MAX_BACKOFF);
    }
}
