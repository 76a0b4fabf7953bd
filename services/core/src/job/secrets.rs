//! Putting a redacted read back without losing its secrets.
//!
//! Reads hide the values of `target.headers`, `target.env` and
//! `notify.headers` ([`super::redact_written`]), so a definition that was
//! read, edited and put back, or exported and applied again, holds
//! [`REDACTED`] where the secrets were. Storing that would replace each
//! secret with the placeholder. [`restore_redacted`] puts the stored value
//! back in place of each placeholder, as channels do
//! ([`crate::channel::restore_redacted`]). A placeholder with nothing stored
//! under the same name, or under a target of another type, is refused by
//! name: the caller meant a value it never had.

use super::{FieldError, REDACTED};
use serde_json::Value;

/// The maps whose values reads hide: `(object, field)` of the definition.
const SECRET_MAPS: [(&str, &str); 3] = [
    ("target", "headers"),
    ("target", "env"),
    ("notify", "headers"),
];

/// Replace every [`REDACTED`] value of `incoming`'s secret maps with the one
/// `stored` (the definition in the bucket, if any) holds under the same
/// name. A target's values come back only when both targets have the same
/// `type`. Every placeholder left without a value is one problem, coded
/// `redacted_placeholder`; `incoming` is then partly restored and must not
/// be stored.
pub fn restore_redacted(
    incoming: &mut Value,
    stored: Option<&Value>,
) -> Result<(), Vec<FieldError>> {
    let same_target_type = |stored: &Value| {
        let type_of = |v: &Value| v.get("target").and_then(|t| t.get("type")).cloned();
        type_of(stored) == type_of(incoming)
    };
    let target_source = stored.filter(|s| same_target_type(s));
    let mut problems = Vec::new();
    for (object, field) in SECRET_MAPS {
        let source = match object {
            "target" => target_source,
            _ => stored,
        }
        .and_then(|s| s.get(object))
        .and_then(|o| o.get(field));
        let Some(Value::Object(values)) = incoming.get_mut(object).and_then(|o| o.get_mut(field))
        else {
            continue;
        };
        for (name, value) in values.iter_mut().filter(|(_, v)| is_placeholder(v)) {
            match source.and_then(|s| s.get(name)).filter(|v| v.is_string()) {
                Some(original) => *value = original.clone(),
                None => problems.push(placeholder_problem(&format!("{object}.{field}.{name}"))),
            }
        }
    }
    match problems.is_empty() {
        true => Ok(()),
        false => Err(problems),
    }
}

/// Whether `body` may hold a placeholder at all (a cheap test before parsing).
pub fn mentions_redacted(body: &[u8]) -> bool {
    body.windows(REDACTED.len())
        .any(|w| w == REDACTED.as_bytes())
}

fn is_placeholder(value: &Value) -> bool {
    value.as_str() == Some(REDACTED)
}

fn placeholder_problem(field: &str) -> FieldError {
    FieldError::new(
        field,
        "redacted_placeholder",
        format!(
            "is \"{REDACTED}\", the placeholder of a redacted read, and the stored job has no value to put back here: give the real value"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn http_job(headers: Value) -> Value {
        json!({"id": "a", "schedule": "@daily",
               "target": {"type": "http", "url": "https://x.example/", "headers": headers}})
    }

    #[test]
    fn placeholders_take_the_stored_values_and_new_values_stay() {
        let stored = http_job(json!({"Authorization": "Bearer s3cret", "X-Old": "o"}));
        let mut incoming = http_job(json!({"Authorization": REDACTED, "X-New": "n"}));
        restore_redacted(&mut incoming, Some(&stored)).expect("restored");
        assert_eq!(
            incoming["target"]["headers"],
            json!({"Authorization": "Bearer s3cret", "X-New": "n"})
        );
    }

    #[test]
    fn env_and_notify_headers_are_restored_too() {
        let stored = json!({"id": "a", "schedule": "@daily",
            "target": {"type": "shell", "command": "x", "env": {"TOKEN": "t"}},
            "notify": {"webhook": "https://h.example/", "headers": {"K": "k"}}});
        let mut incoming = stored.clone();
        super::super::redact_written(&mut incoming);
        assert_eq!(incoming["target"]["env"]["TOKEN"], REDACTED);
        restore_redacted(&mut incoming, Some(&stored)).expect("restored");
        assert_eq!(incoming, stored);
    }

    #[test]
    fn a_placeholder_without_a_stored_value_is_refused_by_name() {
        let mut incoming = http_job(json!({"Authorization": REDACTED}));
        let problems = restore_redacted(&mut incoming, None).expect_err("nothing stored");
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].field, "target.headers.Authorization");
        assert_eq!(problems[0].code, "redacted_placeholder");
        let stored = http_job(json!({"Other": "v"}));
        let problems = restore_redacted(&mut incoming, Some(&stored)).expect_err("other name");
        assert_eq!(problems[0].field, "target.headers.Authorization");
    }

    #[test]
    fn a_target_of_another_type_gives_nothing_back() {
        let stored = json!({"id": "a", "schedule": "@daily",
            "target": {"type": "nats", "subject": "s", "headers": {"Authorization": "x"}}});
        let mut incoming = http_job(json!({"Authorization": REDACTED}));
        assert!(restore_redacted(&mut incoming, Some(&stored)).is_err());
    }

    #[test]
    fn a_body_that_is_no_object_is_left_alone() {
        for mut odd in [
            json!([1, 2]),
            json!("x"),
            json!({"target": 3}),
            json!({"target": {"headers": []}}),
        ] {
            let before = odd.clone();
            restore_redacted(&mut odd, None).expect("nothing to restore");
            assert_eq!(odd, before);
        }
    }
}
