//! Each pattern against the Rust check it states: every string of the
//! bad-input corpus (`tests/bad_input/`), and the tricky ones below, that the
//! check accepts matches the pattern (the pattern is a necessary condition,
//! never a stricter one); and for the checks a pattern states whole, what
//! the pattern matches the check accepts too.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

use super::*;
use crate::access::Scope;
use crate::binding::Subject;
use crate::channel::{Channel, EmailChannel, SmtpTls};
use crate::job::{is_valid_publish_subject, reserved_subject_prefix, validate_id, validate_token};
use crate::policy::{is_subject_pattern, Policy};
use crate::schedule::Schedule;

/// Every string of the corpus: the values and keys of its cases, and the
/// path segments and query values of its hand-written requests, decoded.
pub(crate) fn corpus_strings() -> BTreeSet<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/bad_input");
    let mut strings = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("tests/bad_input") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).expect("corpus file");
            let value: Value = serde_json::from_str(&text).expect("corpus JSON");
            collect(&value, &mut strings);
        }
    }
    for request in strings.clone() {
        let Some(target) = request
            .strip_prefix("http:")
            .and_then(|r| r.split_once(' '))
            .map(|(_, target)| target.to_string())
        else {
            continue;
        };
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        for part in path.split('/').chain(query.split('&')) {
            let value = part.split_once('=').map_or(part, |(_, v)| v);
            strings.insert(percent_decoded(value));
        }
    }
    strings.extend(TRICKY.iter().map(|s| s.to_string()));
    strings
}

/// Strings where regex dialects and Rust disagree: Unicode blanks, controls,
/// separators, lookalikes, edges of ranges.
const TRICKY: &[&str] = &[
    "",
    " ",
    "a b",
    "\u{85}",
    "\u{a0}",
    "\u{feff}",
    "\u{1680}",
    "\u{2028}",
    "\u{3000}",
    "\u{1c}",
    "x\u{85}",
    "\u{85}x",
    "x\u{feff}",
    "\u{feff}x",
    "\t",
    "a\tb",
    "a\nb",
    "\u{0}",
    "\u{7f}",
    "\u{9f}",
    "\u{200b}",
    "é",
    "日本",
    "deliver",
    "default",
    "*",
    ">",
    "a.>",
    ">.a",
    "a.*",
    "a..b",
    ".a",
    "a.",
    "jetcron",
    "jetcron.x",
    "jetcronx",
    "$JS.x",
    "_INBOX",
    "_INBOX.x",
    "user:alice",
    "group: x",
    "user: a",
    "user:a ",
    "user:\u{a0}a",
    "user:a\u{feff}",
    "user:\u{85}",
    "robot:x",
    "user:",
    "http://",
    "https://a",
    "https://a b",
    "http:///x",
    "https://\u{a0}x",
    "HTTPS://a",
    "ops@example.com",
    "Ops <ops@example.com>",
    "a@localhost",
    "a@b",
    "a@.b.c",
    "a@b.c.",
    "<a@b.c>",
    "x<a@b.c",
    "a@b.c>",
    "a b@c.d",
    "a@b\u{85}.c",
    "1s",
    "90 s",
    "1\u{85}s",
    "1\u{feff}s",
    "1.5h",
    "1.s",
    "5ns",
    "@daily",
    "@every 1s",
    "@every\u{85}1s",
    "\u{85}@daily",
    "* * * * *",
    "*\u{85}* * * *",
    "0 0 30 2 *",
    "2030-01-01T00:00:00Z",
    "2030-13-01T00:00:00Z",
    "2030-01-01 00:00:00z",
    "0123456789abcdef0123456789ABCDEF",
    "{67e55044-10b1-426f-9247-bb680e5fe0c8}",
    "urn:uuid:67e55044-10b1-426f-9247-bb680e5fe0c8",
    "URN:UUID:67E55044-10B1-426F-9247-BB680E5FE0C8",
    "67e55044-10b1-426f-9247-bb680e5fe0c8",
    "67E55044-10B1-426F-9247-BB680E5FE0C8",
    "{67e55044-10b1-426f-9247-bb680e5fe0c8",
    "true",
    " true",
    "true\u{85}",
    "\u{3000}x\u{3000}",
];

fn collect(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::String(s) => {
            out.insert(s.clone());
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
        Value::Object(object) => {
            for (key, value) in object {
                out.insert(key.clone());
                collect(value, out);
            }
        }
        _ => {}
    }
}

/// `%41` → `A`; an escape that is no UTF-8 is left as it is.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_string())
}

pub(crate) fn matcher(pattern: &str) -> jsonschema::Validator {
    jsonschema::validator_for(&serde_json::json!({ "type": "string", "pattern": pattern }))
        .unwrap_or_else(|e| panic!("{pattern} compiles: {e}"))
}

/// Each string `check` accepts matches `pattern`; with `exact`, each string
/// `pattern` matches `check` accepts too.
pub(crate) fn assert_states(
    name: &str,
    pattern: &str,
    strings: &BTreeSet<String>,
    exact: bool,
    check: impl Fn(&str) -> bool,
) {
    let matcher = matcher(pattern);
    let mut wrong = Vec::new();
    for s in strings {
        let (accepted, matched) = (check(s), matcher.is_valid(&Value::from(s.as_str())));
        if (accepted && !matched) || (exact && matched && !accepted) {
            wrong.push(format!("{s:?}: check {accepted}, pattern {matched}"));
        }
    }
    assert!(wrong.is_empty(), "{name}: {wrong:#?}");
}

fn email(host: &str, from: &str) -> Channel {
    Channel::Email(EmailChannel {
        name: "mail".into(),
        description: None,
        smtp_host: host.into(),
        smtp_port: None,
        tls: SmtpTls::default(),
        username: None,
        password: None,
        from: from.into(),
        to: vec!["ops@example.com".into()],
        cc: vec![],
    })
}

fn channel_field_ok(channel: &Channel, field: &str) -> bool {
    !crate::channel::validate(channel)
        .iter()
        .any(|p| p.field == field)
}

#[test]
fn each_pattern_holds_for_every_string_its_check_accepts() {
    let strings = corpus_strings();
    assert!(strings.len() > 500, "the corpus: {} strings", strings.len());
    assert_states("ID", ID_PATTERN, &strings, true, |s| {
        validate_token("x", s).is_ok()
    });
    assert_states("JOB_NAME", JOB_NAME_PATTERN, &strings, true, |s| {
        validate_id(s).is_ok()
    });
    assert_states("NAMESPACE", NAMESPACE_PATTERN, &strings, true, |s| {
        crate::job::validate_namespace("x", s).is_ok()
    });
    assert_states("SCOPE", SCOPE_PATTERN, &strings, true, |s| {
        Scope::parse("x", s).is_ok()
    });
    assert_states("RUN_ID", RUN_ID_PATTERN, &strings, true, |s| {
        uuid::Uuid::parse_str(s).is_ok()
    });
    assert_states(
        "CANONICAL_RUN_ID",
        CANONICAL_RUN_ID_PATTERN,
        &strings,
        true,
        crate::control::is_run_id,
    );
    assert_states(
        "BINDING_SUBJECT",
        BINDING_SUBJECT_PATTERN,
        &strings,
        true,
        |s| Subject::parse("x", s).is_ok(),
    );
    assert_states("SUBJECT", SUBJECT_PATTERN, &strings, false, |s| {
        is_valid_publish_subject(s) && reserved_subject_prefix(s).is_none()
    });
    assert_states(
        "SUBJECT_FILTER",
        SUBJECT_FILTER_PATTERN,
        &strings,
        false,
        is_subject_pattern,
    );
    assert_states("URL_PREFIX", URL_PREFIX_PATTERN, &strings, false, |s| {
        Policy {
            url_prefixes: Some(vec![s.to_string()]),
            ..Policy::default()
        }
        .problems()
        .is_empty()
    });
    assert_states("MAIL_HOST", MAIL_HOST_PATTERN, &strings, true, |s| {
        channel_field_ok(&email(s, "ops@example.com"), "smtp_host")
    });
    assert_states("MAIL_ADDRESS", MAIL_ADDRESS_PATTERN, &strings, false, |s| {
        channel_field_ok(&email("smtp.example.com", s), "from")
    });
    assert_states("DURATION", DURATION_PATTERN, &strings, false, |s| {
        humantime::parse_duration(s).is_ok()
    });
    assert_states("SCHEDULE", SCHEDULE_PATTERN, &strings, false, |s| {
        Schedule::parse(s).is_ok()
    });
    assert_states("INSTANT", INSTANT_PATTERN, &strings, false, |s| {
        chrono::DateTime::parse_from_rfc3339(s).is_ok()
    });
    assert_states("COMMAND", COMMAND_PATTERN, &strings, true, |s| {
        !s.trim().is_empty() && !s.contains('\0')
    });
    assert_states("NO_CONTROL", NO_CONTROL_PATTERN, &strings, true, |s| {
        !s.chars().any(char::is_control)
    });
}

#[test]
fn formats_name_their_checks_and_families_parse() {
    let families: BTreeSet<&str> = FORMATS.iter().map(|(name, _)| *name).collect();
    assert_eq!(families.len(), FORMATS.len(), "each family once");
    for name in [
        duration_format("1s", "24h"),
        text_format(0, 255),
        bytes_format(1, 200),
    ] {
        let family = name.split(':').next().unwrap_or_default();
        assert!(families.contains(family), "{name}");
    }
    let rules: BTreeSet<&str> = JOB_RULES.iter().map(|(name, _)| *name).collect();
    assert_eq!(rules.len(), JOB_RULES.len());
}
