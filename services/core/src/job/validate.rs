//! The semantic checks of a decoded definition: every field, all problems
//! at once, into a [`ValidJob`]. What a target needs is in `targets`.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::name::{validate_job_name, validate_token};
use super::spec::*;
use crate::backoff::{self, Backoff};
use crate::schedule::fire_times::RareTiming;
use crate::schedule::{parse_timezone, Schedule, ScheduleError};
use crate::subjects::DEFAULT_POOL;
use crate::time_format::duration_text;

mod targets;

pub use targets::{is_valid_publish_subject, reserved_subject_prefix, RESERVED_SUBJECT_PREFIXES};
use targets::{validate_headers, validate_target};
pub(crate) use targets::{validate_http_headers, validate_http_url};

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

/// Check every field of `spec`, returning all problems at once.
pub fn validate(spec: JobSpec) -> Result<ValidJob, Vec<FieldError>> {
    validate_with(spec, &mut Schedule::parse)
}

/// [`validate`] with the schedule line parsed by `parse_schedule`.
pub fn validate_with(
    spec: JobSpec,
    parse_schedule: &mut dyn FnMut(&str) -> Result<Schedule, ScheduleError>,
) -> Result<ValidJob, Vec<FieldError>> {
    // Problems are listed in the order of the fields below.
    let mut problems = Vec::new();
    if let Err(p) = validate_id(&spec.id) {
        problems.push(p);
    }
    let schedule = validate_schedule(&spec, parse_schedule, &mut problems);
    validate_after(&spec.id, &spec.after, &mut problems);
    let timezone = validate_timezone(spec.timezone.as_deref(), &mut problems);
    let attempts = validate_attempts(&spec, &mut problems);
    let placement = validate_placement(&spec, &mut problems);
    if let Some(notify) = &spec.notify {
        validate_notify(notify, &mut problems);
    }
    let window = validate_fire_window(&spec, &mut problems);
    validate_target(&spec.target, &mut problems);
    problems.extend(validate_labels("labels", &spec.labels));
    validate_description(spec.description.as_deref(), &mut problems);
    if !problems.is_empty() {
        return Err(problems);
    }
    match (schedule, timezone, attempts, placement, window) {
        (Some(schedule), Some(timezone), Some(attempts), Some(placement), Some(window)) => {
            Ok(ValidJob {
                misfire: spec.misfire.unwrap_or_default(),
                concurrency: spec.concurrency.unwrap_or_default(),
                spec,
                schedule,
                timezone,
                timeout: attempts.timeout,
                max_attempts: attempts.max_attempts,
                backoff: attempts.backoff,
                pool: placement.pool,
                shards: placement.shards,
                start_at: window.start_at,
                end_at: window.end_at,
                jitter: window.jitter,
                catchup_window: window.catchup_window,
            })
        }
        _ => Err(problems),
    }
}

/// `schedule`: a line, or none for a job that only runs `after` others.
fn validate_schedule(
    spec: &JobSpec,
    parse_schedule: &mut dyn FnMut(&str) -> Result<Schedule, ScheduleError>,
    problems: &mut Vec<FieldError>,
) -> Option<Schedule> {
    match spec.schedule.as_deref() {
        None if !spec.after.is_empty() => Some(Schedule::AfterOnly),
        None => {
            problems.push(FieldError::new("schedule", "required", MISSING_SCHEDULE));
            None
        }
        Some(line) => parse_schedule(line)
            .map_err(|e| problems.push(FieldError::new("schedule", "invalid_schedule", e.0)))
            .ok(),
    }
}

/// `timezone`: an IANA name, UTC when absent.
fn validate_timezone(name: Option<&str>, problems: &mut Vec<FieldError>) -> Option<Tz> {
    match name {
        None => Some(chrono_tz::UTC),
        Some(name) => parse_timezone(name)
            .map_err(|e| problems.push(FieldError::new("timezone", "invalid_timezone", e.0)))
            .ok(),
    }
}

/// How each run is attempted: its timeout, attempts and the delay between them.
struct Attempts {
    timeout: Duration,
    max_attempts: u32,
    backoff: Backoff,
}

/// `timeout` and `retry`.
fn validate_attempts(spec: &JobSpec, problems: &mut Vec<FieldError>) -> Option<Attempts> {
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
    let backoff = validate_backoff(spec.retry.as_ref(), problems);
    Some(Attempts {
        timeout: timeout?,
        max_attempts,
        backoff: backoff?,
    })
}

/// Where the job's runs go: its pool and how many shards a run has.
struct Placement {
    pool: String,
    shards: u32,
}

/// `pool` and `shards`.
fn validate_placement(spec: &JobSpec, problems: &mut Vec<FieldError>) -> Option<Placement> {
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
    Some(Placement {
        pool: pool?,
        shards,
    })
}

/// `start_at`, `end_at`, `jitter` and `catchup_window`: when the job's
/// scheduled times may be, and how its fires are spread and recovered.
fn validate_fire_window(spec: &JobSpec, problems: &mut Vec<FieldError>) -> Option<RareTiming> {
    let start_at = parse_instant("start_at", spec.start_at.as_deref(), problems);
    let end_at = parse_instant("end_at", spec.end_at.as_deref(), problems);
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
    Some(RareTiming {
        start_at: start_at?,
        end_at: end_at?,
        jitter: jitter?,
        catchup_window: catchup_window?,
    })
}

/// `description`: at most 4096 bytes.
fn validate_description(description: Option<&str>, problems: &mut Vec<FieldError>) {
    if let Some(d) = description {
        if d.len() > 4096 {
            problems.push(FieldError::new(
                "description",
                "too_long",
                format!("must be at most 4096 bytes, got {}", d.len()),
            ));
        }
    }
}

/// Check `after`: at most [`MAX_PARENTS`] parents, each a valid job id,
/// named once, not the job itself (cycles through other jobs need the
/// other definitions: [`crate::chain::find_cycle`]).
fn validate_after(id: &str, after: &[ChainLink], problems: &mut Vec<FieldError>) {
    if after.len() > MAX_PARENTS {
        problems.push(FieldError::new(
            "after",
            "too_many",
            format!("at most {MAX_PARENTS} parents, got {}", after.len()),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, link) in after.iter().enumerate() {
        let field = format!("after[{i}].job");
        if let Err(p) = validate_job_name(&field, &link.job) {
            problems.push(p);
        } else if link.job == id {
            problems.push(FieldError::new(
                field,
                "cycle",
                format!("{id:?} cannot run after itself"),
            ));
        } else if !seen.insert(link.job.as_str()) {
            problems.push(FieldError::new(
                field,
                "duplicate",
                format!(
                    "{:?} is named twice; use on: completed for both endings",
                    link.job
                ),
            ));
        }
    }
}

/// Check a job's id (its name: `<job>` or `<namespace>.<job>`).
pub fn validate_id(id: &str) -> Result<(), FieldError> {
    validate_job_name("id", id)
}

/// `notify`: a webhook, channels, or both; the repeat interval.
fn validate_notify(notify: &NotifyPolicy, problems: &mut Vec<FieldError>) {
    if notify.webhook.is_none() && notify.channels.is_empty() {
        problems.push(FieldError::new(
            "notify",
            "required",
            "name a webhook, alert channels, or both",
        ));
    }
    if let Some(webhook) = &notify.webhook {
        validate_http_url("notify.webhook", webhook, problems);
    }
    validate_headers("notify.headers", &notify.headers, problems);
    validate_http_headers("notify.headers", &notify.headers, problems);
    if notify.channels.len() > MAX_NOTIFY_CHANNELS {
        problems.push(FieldError::new(
            "notify.channels",
            "too_many",
            format!(
                "at most {MAX_NOTIFY_CHANNELS} channels, got {}",
                notify.channels.len()
            ),
        ));
    }
    for (i, name) in notify.channels.iter().enumerate() {
        if let Err(mut p) = validate_token(&format!("notify.channels.{i}"), name) {
            p.message = format!("{name:?}: {}", p.message);
            problems.push(p);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(twice) = notify.channels.iter().find(|c| !seen.insert(*c)) {
        problems.push(FieldError::new(
            "notify.channels",
            "duplicate",
            format!("{twice:?} is named twice"),
        ));
    }
    if let Some(n) = notify.after_failures {
        if !(1..=100).contains(&n) {
            problems.push(FieldError::new(
                "notify.after_failures",
                "out_of_range",
                format!("must be 1 to 100, got {n}"),
            ));
        }
    }
    if let Some(after) = &notify.running_longer_than {
        if let Err(p) = parse_bounded_duration(
            "notify.running_longer_than",
            after,
            Duration::from_secs(1),
            Duration::from_secs(30 * 24 * 3600),
        ) {
            problems.push(p);
        }
        if notify.channels.is_empty() {
            problems.push(FieldError::new(
                "notify.running_longer_than",
                "needs_channels",
                "long-running alerts go to alert channels: name some in notify.channels",
            ));
        }
    }
    if let Some(repeat) = &notify.repeat {
        if let Err(p) = parse_bounded_duration(
            "notify.repeat",
            repeat,
            Duration::from_secs(60),
            Duration::from_secs(7 * 24 * 3600),
        ) {
            problems.push(p);
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
