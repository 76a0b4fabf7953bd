//! A stored definition and its revisions as the API shows them
//! ([`StoredJob`], [`Revision`]), each able to hide its secrets for an
//! open read (`redacted`), as a channel does
//! ([`jetcron_core::channel::Channel::redacted`]).
//!
//! A stored value is shown as written (it may be a definition that does
//! not validate, or not even decode as one), so it is kept as JSON, and
//! hidden as [`jetcron_core::job::redact_written`] says (the same values
//! as [`jetcron_core::job::JobSpec::redacted`]); its problems, if any, are
//! listed beside it.

use async_nats::jetstream::kv::{self, Operation};
use jetcron_core::audit::Author;
use jetcron_core::job::{parse_written, redact_written, FieldError, ValidJob};
use serde::Serialize;

/// A stored definition as the API shows it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct StoredJob {
    pub id: String,
    pub revision: u64,
    /// When this revision was written.
    pub updated_at: String,
    /// The definition, when it parses as JSON.
    pub job: Option<serde_json::Value>,
    /// Whether the definition validates (only valid ones are scheduled).
    pub valid: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<FieldError>,
}

impl StoredJob {
    pub(super) fn from_entry(entry: kv::Entry) -> (Self, Option<ValidJob>) {
        let parsed = parse_written(&entry.value, Some(&entry.key), entry.created);
        let (valid, problems) = match &parsed {
            Ok(_) => (true, Vec::new()),
            Err(p) => (false, p.clone()),
        };
        let stored = StoredJob {
            id: entry.key,
            revision: entry.revision,
            updated_at: jetcron_core::time_format::rfc3339_millis(entry.created),
            job: serde_json::from_slice(&entry.value).ok(),
            valid,
            problems,
        };
        (stored, parsed.ok())
    }

    /// This definition with its secrets hidden.
    pub fn redacted(mut self) -> Self {
        if let Some(definition) = &mut self.job {
            redact_written(definition);
        }
        self
    }
}

/// One revision of a key, as `GET /v1/jobs/{id}/history` shows it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Revision {
    pub revision: u64,
    /// `put`, `delete` or `purge`.
    pub operation: &'static str,
    /// When the server stored it.
    pub at: String,
    /// The definition written (puts that parse as JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<serde_json::Value>,
    /// Whether that definition validates (puts only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<FieldError>,
    /// Who wrote it and through which door (`kv`: straight into the
    /// bucket); absent when its message could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub author: Option<Author>,
}

impl Revision {
    pub(super) fn from_entry(entry: kv::Entry) -> Self {
        let at = jetcron_core::time_format::rfc3339_millis(entry.created);
        let operation = match entry.operation {
            Operation::Put => "put",
            Operation::Delete => "delete",
            Operation::Purge => "purge",
        };
        if entry.operation != Operation::Put {
            return Self {
                revision: entry.revision,
                operation,
                at,
                job: None,
                valid: None,
                problems: Vec::new(),
                author: None,
            };
        }
        let problems = parse_written(&entry.value, Some(&entry.key), entry.created)
            .err()
            .unwrap_or_default();
        Self {
            revision: entry.revision,
            operation,
            at,
            job: serde_json::from_slice(&entry.value).ok(),
            valid: Some(problems.is_empty()),
            problems,
            author: None,
        }
    }

    /// This revision with its secrets hidden.
    pub fn redacted(mut self) -> Self {
        if let Some(definition) = &mut self.job {
            redact_written(definition);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use jetcron_core::job::REDACTED;
    use serde_json::json;

    use super::*;

    fn stored(definition: serde_json::Value) -> StoredJob {
        StoredJob {
            id: "a".into(),
            revision: 3,
            updated_at: "2026-01-01T00:00:00.000Z".into(),
            job: Some(definition),
            valid: true,
            problems: Vec::new(),
        }
    }

    #[test]
    fn header_and_env_values_are_hidden_names_and_the_rest_kept() {
        let jobs = [
            stored(json!({
                "id": "a",
                "target": { "type": "http", "url": "https://x", "headers": { "Authorization": "Bearer s3cret" } },
                "notify": { "webhook": "https://hook", "headers": { "X-Token": "t0ken" } }
            })),
            stored(json!({ "target": { "type": "shell", "command": "run", "env": { "DB_PASSWORD": "pa55" } } })),
            stored(json!({ "target": { "type": "nats", "subject": "s", "headers": { "Authorization": "n4ts" } } })),
        ]
        .map(StoredJob::redacted);
        let text = serde_json::to_string(&jobs).expect("encode");
        for secret in ["s3cret", "t0ken", "pa55", "n4ts"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        let [http, shell, _] = jobs.map(|j| j.job.expect("a definition"));
        assert_eq!(http["target"]["headers"]["Authorization"], REDACTED);
        assert_eq!(shell["target"]["env"]["DB_PASSWORD"], REDACTED);
        assert_eq!(http["target"]["url"], "https://x");
        let revision = Revision {
            revision: 4,
            operation: "put",
            at: "2026-01-01T00:00:00.000Z".into(),
            job: Some(json!("not an object")),
            valid: Some(false),
            problems: Vec::new(),
            author: None,
        }
        .redacted();
        assert_eq!(revision.job, Some(json!("not an object")));
    }
}
