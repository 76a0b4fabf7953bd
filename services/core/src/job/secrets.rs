//! Putting a redacted read back without losing its secrets.
//!
//! Reads hide the values of `target.headers`, `target.env` and
//! `notify.headers` ([`super::redact_written`]), so a definition that was
//! read, edited and put back, or exported and applied again, holds
//! [`REDACTED`] where the secrets were. Storing that would replace each
//! secret with the placeholder. [`restore_redacted`] puts the stored value
//! back in place of each placeholder, as channels do
//! ([`crate::channel::restore_redacted`]). A placeholder with nothing stored
//! under the same name is refused by name: the caller meant a value it
//! never had.
//!
//! A secret goes back only to where it was going: the same target type and
//! destination (`url`, `subject`, `command`) for the target's maps, the same
//! `notify.webhook` for its headers. Someone who may write a job but reads
//! it redacted could otherwise point the job elsewhere (their own URL, a
//! command that prints its environment) and have the gateway hand the
//! stored secret to it.

use super::{is_secret_field, FieldError, REDACTED, SECRET_MAPS};
use serde_json::Value;

/// Replace every [`REDACTED`] value of `incoming`'s secret maps with the one
/// `stored` (the definition in the bucket, if any) holds under the same
/// name, where both send to the same destination ([`DESTINATION`]). Every
/// placeholder left without a value is one problem, coded
/// `redacted_placeholder`; `incoming` is then partly restored and must not
/// be stored.
pub fn restore_redacted(
    incoming: &mut Value,
    stored: Option<&Value>,
) -> Result<(), Vec<FieldError>> {
    let mut problems = Vec::new();
    for (object, field) in SECRET_MAPS {
        let same_destination = stored.is_some_and(|s| {
            DESTINATION
                .iter()
                .filter(|(o, _)| *o == object)
                .all(|(o, key)| {
                    s.get(o).and_then(|v| v.get(key)) == incoming.get(o).and_then(|v| v.get(key))
                })
        });
        let source = stored
            .filter(|_| same_destination)
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

/// What must be unchanged for a secret to come back: `(object, field)`.
const DESTINATION: [(&str, &str); 5] = [
    ("target", "type"),
    ("target", "url"),
    ("target", "subject"),
    ("target", "command"),
    ("notify", "webhook"),
];

/// `problems` with no secret value in their messages: serde names the value
/// it could not take (``invalid type: integer `84736251`, expected a
/// string``), and refusals are answered, logged and recorded as
/// `job.rejected`. A problem of a secret map (or of the map itself) keeps
/// the kind of value and what was expected, not the value.
pub(crate) fn hide_secret_values(mut problems: Vec<FieldError>) -> Vec<FieldError> {
    for problem in &mut problems {
        if is_secret_field(&problem.field) {
            problem.message = without_value(&problem.message);
        }
    }
    problems
}

/// serde's ``invalid type: string "x", expected …`` (or `invalid value`)
/// as `invalid type: string, expected …`; other messages unchanged.
fn without_value(message: &str) -> String {
    for lead in ["invalid type: ", "invalid value: "] {
        let Some(rest) = message.strip_prefix(lead) else {
            continue;
        };
        let Some((unexpected, expected)) = rest.rsplit_once(", expected ") else {
            return format!("{}(the value is not repeated: it may be a secret)", lead);
        };
        let kind = unexpected
            .split([' ', '`', '"'])
            .take_while(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        return format!("{lead}{kind}, expected {expected}");
    }
    message.to_string()
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
            "is \"{REDACTED}\", the placeholder of a redacted read, and the stored job has no value to put back here (none under this name, or it went to another destination: a secret is put back only where the type, url, subject, command or webhook is unchanged): give the real value"
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
    fn a_secret_is_not_put_back_for_another_destination() {
        let stored = http_job(json!({"Authorization": "Bearer s3cret"}));
        let mut elsewhere = http_job(json!({"Authorization": REDACTED}));
        elsewhere["target"]["url"] = json!("https://attacker.example/");
        let problems = restore_redacted(&mut elsewhere, Some(&stored)).expect_err("url changed");
        assert_eq!(problems[0].field, "target.headers.Authorization");
        let shell = json!({"id": "a", "schedule": "@daily",
            "target": {"type": "shell", "command": "backup", "env": {"TOKEN": "t"}},
            "notify": {"webhook": "https://h.example/", "headers": {"K": "k"}}});
        let mut printing = shell.clone();
        super::super::redact_written(&mut printing);
        printing["target"]["command"] = json!("env");
        let problems = restore_redacted(&mut printing, Some(&shell)).expect_err("command changed");
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        // The webhook did not change: its header comes back.
        assert_eq!(fields, ["target.env.TOKEN"]);
        assert_eq!(printing["notify"]["headers"]["K"], "k");
        let mut hooked = shell.clone();
        super::super::redact_written(&mut hooked);
        hooked["notify"]["webhook"] = json!("https://other.example/");
        let problems = restore_redacted(&mut hooked, Some(&shell)).expect_err("webhook changed");
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["notify.headers.K"]);
    }

    #[test]
    fn a_target_of_another_type_gives_nothing_back() {
        let stored = json!({"id": "a", "schedule": "@daily",
            "target": {"type": "nats", "subject": "s", "headers": {"Authorization": "x"}}});
        let mut incoming = http_job(json!({"Authorization": REDACTED}));
        assert!(restore_redacted(&mut incoming, Some(&stored)).is_err());
    }

    #[test]
    fn secret_fields_are_the_maps_and_their_values_only() {
        for field in [
            "target.env",
            "target.headers.Authorization",
            "notify.headers.K",
        ] {
            assert!(is_secret_field(field), "{field}");
        }
        for field in [
            "target.url",
            "target.headersX",
            "notify.webhook",
            "headers.A",
            "target",
        ] {
            assert!(!is_secret_field(field), "{field}");
        }
    }

    #[test]
    fn refusals_of_secret_maps_do_not_repeat_the_value() {
        let refused = |body: &str| -> Vec<String> {
            crate::job::parse_job(body.as_bytes(), None)
                .expect_err("refused")
                .into_iter()
                .map(|p| format!("{}: {}", p.field, p.message))
                .collect()
        };
        assert_eq!(
            refused(
                r#"{"id":"a","schedule":"@daily","target":{"type":"shell","command":"x","env":{"DB_PASSWORD":84736251}}}"#
            ),
            ["target.env.DB_PASSWORD: invalid type: integer, expected a string"]
        );
        assert_eq!(
            refused(
                r#"{"id":"a","schedule":"@daily","target":{"type":"http","url":"https://x.example/","headers":"Bearer s3cretB"}}"#
            ),
            ["target.headers: invalid type: string, expected a map"]
        );
        assert_eq!(
            without_value("invalid type: floating point `1.5`, expected a string"),
            "invalid type: floating point, expected a string"
        );
        // Elsewhere serde's words stay: they help and hide nothing secret.
        let schedule = refused(r#"{"id":"a","schedule":7,"target":{"type":"nats","subject":"s"}}"#);
        assert!(schedule[0].contains("`7`"), "{schedule:?}");
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
