//! The job definition's types, as users write them ([`JobSpec`]) and as the
//! ticker and executor use them once valid ([`ValidJob`]); the JSON Schema's
//! rules ride on them as attributes (patterns from [`super::patterns`]).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use super::patterns::{
    COMMAND_PATTERN, DURATION_PATTERN, ENV_NAME_PATTERN, HTTP_HEADER_NAME_PATTERN,
    HTTP_HEADER_VALUE_PATTERN, HTTP_URL_PATTERN, ID_PATTERN, INSTANT_PATTERN, JOB_NAME_PATTERN,
    LABEL_KEY_PATTERN, NATS_HEADER_NAME_PATTERN, NATS_HEADER_VALUE_PATTERN, NO_CONTROL_PATTERN,
    NO_NUL_PATTERN, SCHEDULE_PATTERN, SUBJECT_PATTERN, WORKING_DIR_PATTERN,
};
use crate::backoff::Backoff;
use crate::schedule::Schedule;

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
/// What replaces a hidden value: a credential in a definition shown to
/// someone who may not see it (a job's header and environment values, an
/// alert channel's passwords, secrets and tokens).
pub const REDACTED: &str = "<redacted>";

/// A job definition as users write it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("anyOf" = [
    {"required": ["schedule"]},
    {"required": ["after"], "properties": {"after": {"minItems": 1}}},
]))]
pub struct JobSpec {
    /// Job id, its name: `<job>` or `<namespace>.<job>` (`billing.export`),
    /// each part `[A-Za-z0-9][A-Za-z0-9_-]{0,127}`; a name without a dot is
    /// in namespace `default`. Its key in the jobs bucket. May be omitted in
    /// a direct KV write, where the key is the id.
    #[serde(default)]
    #[schemars(regex(pattern = JOB_NAME_PATTERN))]
    pub id: String,
    /// Free text, at most 4096 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub description: Option<String>,
    /// Schedule line, see [`Schedule`]: 5 to 7 cron fields, a macro such as
    /// `@daily`, `@every <duration>` or `@at <RFC 3339 instant>`. May be
    /// left out when `after` names a parent: the job then runs only after it.
    #[serde(
        default,
        deserialize_with = "present_string",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "String", regex(pattern = SCHEDULE_PATTERN))]
    pub schedule: Option<String>,
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
    /// Parent jobs: when a run of one of them ends as its `on` says, a run of
    /// this job starts (at most 10 parents; see docs/jobs.md, "Chains").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = MAX_PARENTS))]
    pub after: Vec<ChainLink>,
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
/// The problem of a definition with neither a schedule nor a parent.
pub const MISSING_SCHEDULE: &str = "missing: a job needs a schedule, a parent in after, or both";
/// Most parents one job names in `after`.
pub const MAX_PARENTS: usize = 10;

/// One parent of a chained job: which job, and which of its endings start
/// this one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChainLink {
    /// Id (name) of the parent job, of any namespace.
    #[schemars(regex(pattern = JOB_NAME_PATTERN))]
    pub job: String,
    /// Which ending of a parent run starts this job (default `success`).
    #[serde(default)]
    pub on: ChainOn,
}

/// Which ending of a parent's run starts its child.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ChainOn {
    /// The parent run succeeded.
    #[default]
    Success,
    /// The parent run ended badly: failed after its last retry, timed out
    /// or was killed.
    Failure,
    /// Either.
    Completed,
}

impl ChainOn {
    pub fn as_str(self) -> &'static str {
        match self {
            ChainOn::Success => "success",
            ChainOn::Failure => "failure",
            ChainOn::Completed => "completed",
        }
    }

    /// Whether a parent run that ended well (`succeeded`) or badly starts the child.
    pub fn starts_after(self, succeeded: bool) -> bool {
        match self {
            ChainOn::Success => succeeded,
            ChainOn::Failure => !succeeded,
            ChainOn::Completed => true,
        }
    }
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

/// Who hears about a run that ended badly: a webhook of the job's own
/// (`webhook`, a JSON summary of each failed, timed out or killed run), and
/// alert channels by name (`channels`, see `docs/alerts.md`): one alert when
/// the job starts failing, repeated at most every `repeat` while it keeps
/// failing, and one when it succeeds again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NotifyPolicy {
    /// `http` or `https` URL that receives a JSON summary by POST.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = HTTP_URL_PATTERN))]
    pub webhook: Option<String>,
    /// Extra request headers of the webhook (an authorization token, say):
    /// names are HTTP tokens, values without control characters but tab.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "propertyNames" = {"pattern": HTTP_HEADER_NAME_PATTERN},
        "additionalProperties" = {"type": "string", "pattern": HTTP_HEADER_VALUE_PATTERN},
    ))]
    pub headers: BTreeMap<String, String>,
    /// Alert channels (names in `jetcron_channels`), at most 10.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = MAX_NOTIFY_CHANNELS, "items" = {"type": "string", "pattern": ID_PATTERN}))]
    pub channels: Vec<String>,
    /// Alert once this many runs in a row ended badly (default 1: the
    /// first bad run alerts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub after_failures: Option<u32>,
    /// Alert when an attempt is still running this long after it started
    /// (and say so again when it ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub running_longer_than: Option<String>,
    /// While the job keeps failing, the alert is repeated at most this
    /// often (default 1h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub repeat: Option<String>,
}

impl NotifyPolicy {
    /// `running_longer_than`, when the job has channels to tell.
    pub fn long_running_after(&self) -> Option<Duration> {
        if self.channels.is_empty() {
            return None;
        }
        humantime::parse_duration(self.running_longer_than.as_deref()?).ok()
    }

    /// `after_failures`, or 1.
    pub fn failures_before_alert(&self) -> u64 {
        u64::from(self.after_failures.unwrap_or(1).max(1))
    }

    /// `repeat`, or its default (it was validated when the job was put).
    pub fn repeat_every(&self) -> Duration {
        self.repeat
            .as_deref()
            .and_then(|r| humantime::parse_duration(r).ok())
            .unwrap_or(DEFAULT_ALERT_REPEAT)
    }
}

/// Most channels one job names.
pub const MAX_NOTIFY_CHANNELS: usize = 10;
/// Default of `notify.repeat`.
pub const DEFAULT_ALERT_REPEAT: Duration = Duration::from_secs(3600);

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

/// A field that may be left out but, when given, is a string (`null` is
/// refused like any other non-string).
fn present_string<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    String::deserialize(deserializer).map(Some)
}

impl JobSpec {
    /// The schedule line as written; empty for a job that runs only after
    /// its parents.
    pub fn schedule_line(&self) -> &str {
        self.schedule.as_deref().unwrap_or_default()
    }

    /// This definition as an open read shows it: the values of its target's
    /// headers (`http`, `nats`) or environment (`shell`) and of its
    /// notification headers, where definitions carry credentials, are
    /// [`REDACTED`]; their names and everything else stay. A definition as
    /// written, which may not decode, hides the same with [`redact_written`].
    pub fn redacted(&self) -> JobSpec {
        let mut spec = self.clone();
        match &mut spec.target {
            Target::Http(http) => hide_values(&mut http.headers),
            Target::Nats(nats) => hide_values(&mut nats.headers),
            Target::Shell(shell) => hide_values(&mut shell.env),
        }
        if let Some(notify) = &mut spec.notify {
            hide_values(&mut notify.headers);
        }
        spec
    }
}

fn hide_values(values: &mut BTreeMap<String, String>) {
    values.values_mut().for_each(|v| *v = REDACTED.into());
}

/// The maps whose values reads hide, as `(object, field)` of a definition:
/// where definitions carry credentials.
pub const SECRET_MAPS: [(&str, &str); 3] = [
    ("target", "headers"),
    ("target", "env"),
    ("notify", "headers"),
];

/// Whether `field` (dotted, as problems and plans name fields) is one of
/// [`SECRET_MAPS`] or a value in one: `target.env`, `target.headers.Authorization`.
pub fn is_secret_field(field: &str) -> bool {
    SECRET_MAPS.iter().any(|(object, map)| {
        field
            .strip_prefix(object)
            .and_then(|rest| rest.strip_prefix('.'))
            .and_then(|rest| rest.strip_prefix(map))
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    })
}

/// Hide in `definition`, a definition as written (JSON that may not decode
/// as a [`JobSpec`]: a stored value is shown as it is), what
/// [`JobSpec::redacted`] hides: every value of `target.headers`,
/// `target.env` and `notify.headers` that is an object. A definition is an
/// object with a `target` object; any other value is searched for
/// definitions inside it, at any depth, so that a value of an unknown shape
/// hides no less.
pub fn redact_written(definition: &mut serde_json::Value) {
    use serde_json::Value;
    match definition {
        Value::Object(fields) if fields.get("target").is_some_and(Value::is_object) => {
            for (object, field) in SECRET_MAPS {
                if let Some(Value::Object(values)) =
                    fields.get_mut(object).and_then(|o| o.get_mut(field))
                {
                    values
                        .values_mut()
                        .for_each(|v| *v = Value::String(REDACTED.into()));
                }
            }
        }
        Value::Object(fields) => fields.values_mut().for_each(redact_written),
        Value::Array(items) => items.iter_mut().for_each(redact_written),
        _ => {}
    }
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

/// Most problems one answer lists: a 64 KiB definition can hold thousands
/// of bad fields, and their list must still fit a NATS reply and a
/// `job.rejected` event.
pub const MAX_PROBLEMS: usize = 50;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(definition: serde_json::Value) -> JobSpec {
        serde_json::from_value(definition).expect("a definition")
    }

    #[test]
    fn a_redacted_spec_hides_header_and_env_values_and_keeps_their_names() {
        let http = spec(json!({
            "id": "a", "schedule": "@daily",
            "target": { "type": "http", "url": "https://x", "headers": { "Authorization": "Bearer s3cret" } },
            "notify": { "webhook": "https://hook", "headers": { "X-Token": "t0ken" } }
        }));
        let shell = spec(json!({
            "id": "b", "schedule": "@daily",
            "target": { "type": "shell", "command": "run", "env": { "DB_PASSWORD": "pa55" } }
        }));
        let nats = spec(json!({
            "id": "c", "schedule": "@daily",
            "target": { "type": "nats", "subject": "s", "headers": { "Authorization": "n4ts" } }
        }));
        for (spec, secrets) in [
            (http, ["s3cret", "t0ken"]),
            (shell, ["pa55", "pa55"]),
            (nats, ["n4ts", "n4ts"]),
        ] {
            let shown = serde_json::to_value(spec.redacted()).expect("encode");
            let text = shown.to_string();
            for secret in secrets {
                assert!(!text.contains(secret), "{secret} in {text}");
            }
            // The typed and the written definition hide the same values.
            let mut written = serde_json::to_value(&spec).expect("encode");
            redact_written(&mut written);
            assert_eq!(shown, written);
        }
        let shown = serde_json::to_value(spec(json!({
            "id": "a", "schedule": "@daily",
            "target": { "type": "http", "url": "https://x", "headers": { "Authorization": "Bearer s3cret" } }
        })).redacted()).expect("encode");
        assert_eq!(shown["target"]["headers"]["Authorization"], REDACTED);
        assert_eq!(shown["target"]["url"], "https://x");
    }

    #[test]
    fn a_written_definition_that_does_not_decode_hides_the_same_values() {
        let mut weird = json!({
            "id": "a",
            "target": { "type": "http", "headers": { "A": "s" }, "env": "not an object" },
            "notify": { "headers": { "X-Token": "t0ken" } },
            "labels": { "team": "a" }
        });
        redact_written(&mut weird);
        assert_eq!(weird["target"]["headers"]["A"], REDACTED);
        assert_eq!(weird["target"]["env"], "not an object");
        assert_eq!(weird["notify"]["headers"]["X-Token"], REDACTED);
        assert_eq!(weird["labels"]["team"], "a");
        // No target object here: the definitions inside it are found.
        let mut nested = json!({ "foo": { "target": { "headers": { "x": "y" } } }, "list": [{ "target": { "env": { "K": "v" } } }] });
        redact_written(&mut nested);
        assert_eq!(nested["foo"]["target"]["headers"]["x"], REDACTED);
        assert_eq!(nested["list"][0]["target"]["env"]["K"], REDACTED);
        let mut text = json!("not an object");
        redact_written(&mut text);
        assert_eq!(text, "not an object");
    }
}
