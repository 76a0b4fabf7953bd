//! The regular expressions the job's JSON Schema states (`schemas/job.schema.json`);
//! the validator ([`super::validate`]) checks the same rules in code.

/// What [`char::is_whitespace`] is, as the inside of a character class.
macro_rules! blank {
    () => {
        r"\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000"
    };
}

/// What [`char::is_whitespace`] or [`char::is_control`] is, as the
/// inside of a character class (`\s` reads differently in each regex dialect).
macro_rules! blank_or_control {
    () => {
        r"\u0000-\u0020\u007F-\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000"
    };
}

/// `addr@domain` with no blank, control character or `<>,;"` in it; the
/// domain has a dot inside it, or is `localhost`.
macro_rules! mail_address {
    () => {
        concat!(
            r#"[^@<>,;""#,
            blank_or_control!(),
            r#"]+@(?:localhost|[^.<>,;""#,
            blank_or_control!(),
            r#"][^<>,;""#,
            blank_or_control!(),
            r#"]*\.[^<>,;""#,
            blank_or_control!(),
            r#"]*[^.<>,;""#,
            blank_or_control!(),
            "])"
        )
    };
}

/// A pool or a channel: a subject token and a KV key.
pub const ID_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$";
/// A job's name: `<job>` or `<namespace>.<job>`, each part an
/// [`ID_PATTERN`], the namespaces `default` and `deliver` not written out
/// ([`super::name`]).
pub const JOB_NAME_PATTERN: &str = r"^(?!(?:default|deliver)\.)[A-Za-z0-9][A-Za-z0-9_-]{0,127}(?:\.[A-Za-z0-9][A-Za-z0-9_-]{0,127})?$";
/// A label key.
pub const LABEL_KEY_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$";
/// Text without control characters (Unicode `Cc`: C0, DEL, C1).
pub const NO_CONTROL_PATTERN: &str = r"^[^\u0000-\u001F\u007F-\u009F]*$";
/// Text without NUL bytes.
pub const NO_NUL_PATTERN: &str = r"^[^\u0000]*$";
/// What `humantime` reads: numbers (fractions allowed) each with a unit, as
/// in `90s`, `1h30m`, `250ms`, `1.5h`.
pub const DURATION_PATTERN: &str = concat!(
    "^[",
    blank!(),
    "]*(?:[0-9][0-9",
    blank!(),
    r"]*(?:\.[",
    blank!(),
    "]*[0-9][0-9",
    blank!(),
    "]*)?(?:nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)[",
    blank!(),
    "]*)+$"
);
/// An RFC 3339 instant such as `2030-01-01T09:00:00Z`.
pub const INSTANT_PATTERN: &str = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:[Zz]|[+-][0-9]{2}:[0-9]{2})$";
/// A macro line (`@daily`, `@every 90s`, `@at …`) or 5 to 7 cron fields.
pub const SCHEDULE_PATTERN: &str = concat!(
    "^[",
    blank!(),
    "]*(?:@[^",
    blank!(),
    r"][\s\S]*|[^",
    blank!(),
    "]+(?:[",
    blank!(),
    "]+[^",
    blank!(),
    "]+){4,6})[",
    blank!(),
    "]*$"
);
/// An `http` or `https` URL (any case, as the URL parser reads it) without
/// control characters.
pub const HTTP_URL_PATTERN: &str = r"^ *[Hh][Tt][Tt][Pp][Ss]?:[^\u0000-\u001F\u007F-\u009F]*$";
/// A subject one may publish to: dot-separated non-empty tokens without
/// whitespace or control characters, no token `*` or `>`, and not under the
/// reserved prefixes (`jetcron.`, `$`, `_INBOX.`).
pub const SUBJECT_PATTERN: &str = concat!(
    r"^(?!jetcron(?:\.|$)|\$|_INBOX(?:\.|$))(?:[^.*>",
    blank_or_control!(),
    "]|[^.",
    blank_or_control!(),
    r"]{2,})(?:\.(?:[^.*>",
    blank_or_control!(),
    "]|[^.",
    blank_or_control!(),
    "]{2,}))*$"
);
/// A shell command: not blank, no NUL bytes.
pub const COMMAND_PATTERN: &str = concat!(r"^[^\u0000]*[^\u0000", blank!(), r"][^\u0000]*$");
/// An absolute path without NUL bytes.
pub const WORKING_DIR_PATTERN: &str = r"^/[^\u0000]*$";
/// An environment variable a job may set (`JETCRON_*` is the run context).
pub const ENV_NAME_PATTERN: &str = "^(?![Jj][Ee][Tt][Cc][Rr][Oo][Nn]_)[A-Za-z_][A-Za-z0-9_]*$";
/// A NATS header name: visible ASCII without `:`.
pub const NATS_HEADER_NAME_PATTERN: &str = "^[!-9;-~]+$";
/// A NATS header value: no CR, LF or NUL.
pub const NATS_HEADER_VALUE_PATTERN: &str = r"^[^\r\n\u0000]*$";
/// An HTTP header name: a token.
pub const HTTP_HEADER_NAME_PATTERN: &str = "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$";
/// An HTTP header value: no control characters but tab (non-ASCII text is
/// sent as its UTF-8 bytes, which HTTP allows).
pub const HTTP_HEADER_VALUE_PATTERN: &str = r"^[^\u0000-\u0008\u000A-\u001F\u007F]*$";

// ---------------------------------------------------------------------------
// The HTTP API's parameters and bodies (`GET /openapi.json`). Each pattern is
// a necessary condition of the Rust check named beside it: what the check
// accepts matches it. Where the check also counts bytes, parses a value or
// compares it with the clock, the field names one of the [`FORMATS`] too.

/// A namespace as a parameter names it ([`super::validate_namespace`]):
/// a token, `default` allowed, `deliver` not.
pub const NAMESPACE_PATTERN: &str = r"^(?!deliver$)[A-Za-z0-9][A-Za-z0-9_-]{0,127}$";
/// A namespace or `*`, every one (`access::Scope::parse`).
pub const SCOPE_PATTERN: &str = r"^(?:\*|(?!deliver$)[A-Za-z0-9][A-Za-z0-9_-]{0,127})$";
/// Any spelling of a UUID `uuid::Uuid::parse_str` reads: simple,
/// hyphenated, braced or a URN.
pub const RUN_ID_PATTERN: &str = concat!(
    r"^(?:[0-9A-Fa-f]{32}|",
    r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}|",
    r"\{[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\}|",
    r"[Uu][Rr][Nn]:[Uu][Uu][Ii][Dd]:[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})$"
);
/// A run id as jetcron writes them (`control::is_run_id`): a lowercase
/// hyphenated UUID.
pub const CANONICAL_RUN_ID_PATTERN: &str =
    r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
/// A page cursor, `<milliseconds>_<run id>` (the gateway's
/// `listing::decode_cursor`); the milliseconds fit an `i64` ([`CURSOR_FORMAT`]).
pub const CURSOR_PATTERN: &str = concat!(
    r"^[+-]?[0-9]+_(?:[0-9A-Fa-f]{32}|",
    r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}|",
    r"\{[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\}|",
    r"[Uu][Rr][Nn]:[Uu][Uu][Ii][Dd]:[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})$"
);
/// A label selector in a query, `key=value` pairs separated by commas
/// (empty pairs skipped), at most 32 of them, checked as a job's labels
/// ([`super::validate_labels`]; values are at most 255 bytes:
/// [`LABEL_SELECTOR_FORMAT`]).
pub const LABEL_SELECTOR_PATTERN: &str = concat!(
    r"^,*(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,62}=[^,\u0000-\u001F\u007F-\u009F]{0,255}",
    r"(?:,+[A-Za-z0-9][A-Za-z0-9_.-]{0,62}=[^,\u0000-\u001F\u007F-\u009F]{0,255}){0,31})?,*$"
);
/// The id of a scoped API token (the gateway's `tokens::record::parse_token`).
pub const TOKEN_ID_PATTERN: &str = "^[0-9A-Fa-f]{1,32}$";
/// What a token is for (the gateway's `tokens::requests`): 1 to 200
/// characters without control characters once blanks around are trimmed.
pub const TOKEN_DESCRIPTION_PATTERN: &str = concat!(
    r"^[\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]*",
    "[^",
    blank_or_control!(),
    r"](?:[^\u0000-\u001F\u007F-\u009F]{0,198}[^",
    blank_or_control!(),
    r"])?[\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]*$"
);
/// `user:<name>` or `group:<name>` (`binding::Subject::parse`): the name
/// 1 to 256 characters, no control characters, no blanks around.
pub const BINDING_SUBJECT_PATTERN: &str = concat!(
    "^(?:user|group):[^",
    blank_or_control!(),
    r"](?:[^\u0000-\u001F\u007F-\u009F]{0,254}[^",
    blank_or_control!(),
    "])?$"
);
/// A NATS subject pattern of a policy (`policy::is_subject_pattern`):
/// tokens, `*` for one, `>` last for the rest (at most 1024 bytes:
/// [`SUBJECT_FILTER_FORMAT`]).
pub const SUBJECT_FILTER_PATTERN: &str = concat!(
    "^(?:>|(?:\\*|[^.*>",
    blank_or_control!(),
    "]|[^.",
    blank_or_control!(),
    "]{2,})(?:\\.(?:\\*|[^.*>",
    blank_or_control!(),
    "]|[^.",
    blank_or_control!(),
    r"]{2,}))*(?:\.>)?)$"
);
/// A policy's URL prefix (`policy::check_url_prefix`): `http://` or
/// `https://`, a host, no blanks or control characters (at most 2048
/// bytes: [`URL_PREFIX_FORMAT`]).
pub const URL_PREFIX_PATTERN: &str = concat!(
    "^https?://[^/?#",
    blank_or_control!(),
    "][^",
    blank_or_control!(),
    "]*$"
);
/// A mail host of an email channel (`channel::check_host`).
pub const MAIL_HOST_PATTERN: &str = r"^[A-Za-z0-9.:\[\]-]{1,253}$";
/// A mail address of an email channel (`channel::check_address`):
/// `addr@domain` or `Display Name <addr@domain>` (at most 320 bytes:
/// [`MAIL_ADDRESS_FORMAT`]).
pub const MAIL_ADDRESS_PATTERN: &str = concat!(
    r"^(?:",
    mail_address!(),
    r"|[\s\S]*<",
    mail_address!(),
    ">)$"
);

// ---------------------------------------------------------------------------
// Formats: what a pattern cannot say (a value that parses, a count of bytes,
// the clock). A schema names one as `format`; `GET /openapi.json` lists the
// ones it uses under `info.x-jetcron-formats`, each with the Rust check that
// decides it, and `infra/schemathesis/hooks.py` generates values of each.

/// A schedule line that [`crate::schedule::Schedule::parse`] reads.
pub const SCHEDULE_FORMAT: &str = "jetcron-schedule";
/// An RFC 3339 instant that `chrono` reads (a month 13 matches
/// [`INSTANT_PATTERN`] and is refused).
pub const INSTANT_FORMAT: &str = "jetcron-instant";
/// A [`INSTANT_FORMAT`] instant not later than now.
pub const PAST_INSTANT_FORMAT: &str = "jetcron-past-instant";
/// An `http`/`https` URL the URL parser reads.
pub const HTTP_URL_FORMAT: &str = "jetcron-http-url";
/// A [`SUBJECT_PATTERN`] subject of at most 1024 bytes.
pub const SUBJECT_FORMAT: &str = "jetcron-subject";
/// A [`SUBJECT_FILTER_PATTERN`] pattern of at most 1024 bytes.
pub const SUBJECT_FILTER_FORMAT: &str = "jetcron-subject-filter";
/// A [`URL_PREFIX_PATTERN`] prefix of at most 2048 bytes.
pub const URL_PREFIX_FORMAT: &str = "jetcron-url-prefix";
/// A [`MAIL_ADDRESS_PATTERN`] address of at most 320 bytes.
pub const MAIL_ADDRESS_FORMAT: &str = "jetcron-mail-address";
/// A [`WORKING_DIR_PATTERN`] path of at most 4096 bytes.
pub const PATH_FORMAT: &str = "jetcron-path";
/// A [`CURSOR_PATTERN`] cursor whose milliseconds fit an `i64`.
pub const CURSOR_FORMAT: &str = "jetcron-cursor";
/// A [`LABEL_SELECTOR_PATTERN`] selector whose values are at most 255 bytes.
pub const LABEL_SELECTOR_FORMAT: &str = "jetcron-label-selector";

/// `jetcron-duration:<min>..<max>`: what `humantime` reads, from `min` to
/// `max` (both included; `humantime` spellings).
pub fn duration_format(min: &str, max: &str) -> String {
    format!("jetcron-duration:{min}..{max}")
}

/// `jetcron-text:<min>..<max>`: `min` to `max` bytes of UTF-8 without
/// control characters (a schema's `maxLength` counts characters).
pub fn text_format(min: usize, max: usize) -> String {
    format!("jetcron-text:{min}..{max}")
}

/// `jetcron-bytes:<min>..<max>`: `min` to `max` bytes of UTF-8.
pub fn bytes_format(min: usize, max: usize) -> String {
    format!("jetcron-bytes:{min}..{max}")
}

/// Every format (a family's name ends before its `:`) and the Rust check
/// that decides it.
pub const FORMATS: [(&str, &str); 14] = [
    (SCHEDULE_FORMAT, "jetcron_core::schedule::Schedule::parse"),
    (INSTANT_FORMAT, "chrono::DateTime::parse_from_rfc3339"),
    (
        PAST_INSTANT_FORMAT,
        "chrono::DateTime::parse_from_rfc3339, not after now",
    ),
    (
        HTTP_URL_FORMAT,
        "jetcron_core::job::validate_http_url (url::Url::parse, scheme http or https)",
    ),
    (
        SUBJECT_FORMAT,
        "jetcron_core::job::is_valid_publish_subject (at most 1024 bytes)",
    ),
    (
        SUBJECT_FILTER_FORMAT,
        "jetcron_core::policy::is_subject_pattern (at most 1024 bytes)",
    ),
    (
        URL_PREFIX_FORMAT,
        "jetcron_core::policy check_url_prefix (at most 2048 bytes)",
    ),
    (
        MAIL_ADDRESS_FORMAT,
        "jetcron_core::channel check_address (at most 320 bytes)",
    ),
    (
        PATH_FORMAT,
        "jetcron_core::job validate_shell_options (an absolute path of at most 4096 bytes)",
    ),
    (
        CURSOR_FORMAT,
        "jetcron_gateway::runs::listing::decode_cursor (the milliseconds an i64)",
    ),
    (
        LABEL_SELECTOR_FORMAT,
        "jetcron_core::job::validate_labels (values at most 255 bytes)",
    ),
    (
        "jetcron-duration",
        "humantime::parse_duration, from <min> to <max> (jetcron-duration:<min>..<max>)",
    ),
    (
        "jetcron-text",
        "UTF-8 of <min> to <max> bytes without control characters (jetcron-text:<min>..<max>)",
    ),
    (
        "jetcron-bytes",
        "UTF-8 of <min> to <max> bytes (jetcron-bytes:<min>..<max>)",
    ),
];

/// The rules of a definition that tie fields together, which a schema
/// does not state: their names (a schema lists them under
/// `x-jetcron-rules`) and what each says. [`super::validate`] and
/// `never_fires_after` check them (`no-cycle` the gateway's job store).
pub const JOB_RULES: [(&str, &str); 6] = [
    ("after-not-self", "no after[].job names the job itself"),
    (
        "no-cycle",
        "the parents, and theirs as stored, never lead back to the job (checked against the stored jobs)",
    ),
    ("after-unique", "no parent is named twice in after"),
    ("start-before-end", "start_at is earlier than end_at"),
    (
        "backoff-le-max",
        "retry.max_backoff is not shorter than retry.backoff (default 1s)",
    ),
    (
        "fires",
        "the schedule fires after now, within start_at and end_at (an @at or an end_at in the past never does)",
    ),
];

#[cfg(test)]
pub(crate) mod tests;
