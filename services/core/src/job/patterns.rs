//! The regular expressions the job's JSON Schema states (`schemas/job.schema.json`);
//! the validator ([`super::validate`]) checks the same rules in code.

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
pub const DURATION_PATTERN: &str = r"^\s*(?:[0-9][0-9\s]*(?:\.\s*[0-9][0-9\s]*)?(?:nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)\s*)+$";
/// An RFC 3339 instant such as `2030-01-01T09:00:00Z`.
pub const INSTANT_PATTERN: &str = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:[Zz]|[+-][0-9]{2}:[0-9]{2})$";
/// A macro line (`@daily`, `@every 90s`, `@at …`) or 5 to 7 cron fields.
pub const SCHEDULE_PATTERN: &str = r"^\s*(?:@\S[\s\S]*|\S+(?:\s+\S+){4,6})\s*$";
/// An `http` or `https` URL (any case, as the URL parser reads it) without
/// control characters.
pub const HTTP_URL_PATTERN: &str = r"^ *[Hh][Tt][Tt][Pp][Ss]?:[^\u0000-\u001F\u007F-\u009F]*$";
/// A subject one may publish to: dot-separated non-empty tokens without
/// whitespace or control characters, no token `*` or `>`, and not under the
/// reserved prefixes (`jetcron.`, `$`, `_INBOX.`).
pub const SUBJECT_PATTERN: &str = r"^(?!jetcron(?:\.|$)|\$|_INBOX(?:\.|$))(?:[^.\s\u0000-\u001F\u007F-\u009F*>]|[^.\s\u0000-\u001F\u007F-\u009F]{2,})(?:\.(?:[^.\s\u0000-\u001F\u007F-\u009F*>]|[^.\s\u0000-\u001F\u007F-\u009F]{2,}))*$";
/// A shell command: not blank, no NUL bytes.
pub const COMMAND_PATTERN: &str = r"^[^\u0000]*[^\s\u0000][^\u0000]*$";
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
