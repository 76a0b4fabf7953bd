//! Where a job's runs and alerts go: a target (NATS subject, HTTP URL,
//! shell command) and the URLs and headers a webhook or an alert channel
//! shares with it. Every problem is pushed, none stops the others.

use std::collections::BTreeMap;

use crate::job::spec::{FieldError, ShellTarget, Target, HTTP_METHODS, MAX_ENV_VARS};

/// `target`: what each kind of target needs.
pub(super) fn validate_target(target: &Target, problems: &mut Vec<FieldError>) {
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

/// A shell target's working directory and environment.
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

/// An http or https URL, taken as written (no control characters).
pub(crate) fn validate_http_url(field: &str, text: &str, problems: &mut Vec<FieldError>) {
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

/// Headers an HTTP request can carry as they are.
pub(crate) fn validate_http_headers(
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

/// Headers as NATS and HTTP both carry them: visible names without ':',
/// values without CR, LF or NUL.
pub(super) fn validate_headers(
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
