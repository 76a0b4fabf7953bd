//! A stored definition and its revisions as the API shows them
//! ([`StoredJob`], [`Revision`]), and the answers that carry them hiding
//! their secrets.
//!
//! A stored value is shown as written (it may be a definition that does
//! not validate, or not even decode as one), so it is kept as JSON; its
//! problems, if any, are listed beside it.

use async_nats::jetstream::kv::{self, Operation};
use jetcron_core::job::{parse_written, FieldError, ValidJob};
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
        }
    }
}
