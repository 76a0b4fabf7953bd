//! Secrets in definitions shown over open HTTP reads.
//!
//! Target and notification headers (`Authorization: Bearer …`) and shell
//! environment values are where definitions carry credentials. HTTP reads are
//! open unless the gateway runs with `--protect-reads`, so their answers show
//! those values as `"<redacted>"` (the names stay). With protected reads the
//! caller holds an API token, which already allows writing the job, and sees
//! everything; so does the NATS API, which NATS permissions guard.

use serde_json::Value;

/// What replaces a hidden value.
pub const REDACTED: &str = "<redacted>";

/// Hide secret-bearing values in every definition found in `answer` (any
/// object with a `target` object, at any depth).
pub fn redact_definitions(answer: &mut Value) {
    match answer {
        Value::Object(map) => {
            if map.get("target").is_some_and(Value::is_object) {
                redact_definition(answer);
            } else {
                map.values_mut().for_each(redact_definitions);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_definitions),
        _ => {}
    }
}

fn redact_definition(definition: &mut Value) {
    for path in [
        ["target", "headers"],
        ["target", "env"],
        ["notify", "headers"],
    ] {
        if let Some(Value::Object(values)) =
            definition.get_mut(path[0]).and_then(|v| v.get_mut(path[1]))
        {
            for value in values.values_mut() {
                *value = Value::String(REDACTED.into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn header_and_env_values_are_hidden_names_and_the_rest_kept() {
        let mut answer = json!({
            "ok": true,
            "jobs": [{ "id": "a", "job": {
                "id": "a",
                "target": { "type": "http", "url": "https://x", "headers": { "Authorization": "Bearer s3cret" } },
                "notify": { "webhook": "https://hook", "headers": { "X-Token": "t0ken" } }
            }}, { "id": "b", "job": {
                "target": { "type": "shell", "command": "run", "env": { "DB_PASSWORD": "pw" } }
            }}],
            "job": { "id": "c", "revision": 3, "job": {
                "target": { "type": "nats", "subject": "s", "headers": { "Authorization": "n4ts" } }
            }},
            "revisions": [{ "job": "not an object" }]
        });
        redact_definitions(&mut answer);
        let text = answer.to_string();
        for secret in ["s3cret", "t0ken", "\"pw\"", "n4ts"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(
            answer["jobs"][0]["job"]["target"]["headers"]["Authorization"],
            REDACTED
        );
        assert_eq!(
            answer["jobs"][1]["job"]["target"]["env"]["DB_PASSWORD"],
            REDACTED
        );
        assert_eq!(answer["jobs"][0]["job"]["target"]["url"], "https://x");
        assert_eq!(answer["revisions"][0]["job"], "not an object");
    }
}
