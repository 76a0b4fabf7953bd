//! The JSON Schema of a job definition (`schemas/job.schema.json`) at work.
//!
//! The schema is derived from [`JobSpec`] with the validator's rules attached
//! (the patterns of [`super::patterns`], ranges, lengths, the method enum), so people and other
//! languages can check a definition before sending it. It is as strict as
//! JSON Schema allows and never stricter than [`super::validate`]: what
//! it cannot say (a cron line that never fires, an unknown time zone, byte
//! lengths of non-ASCII text, `end_at` after `start_at`) only the validator
//! checks.
//!
//! jetcron itself uses the schema on the failure path alone: serde stops at
//! the first structural problem (a wrong type, an unknown field, a missing
//! field), the schema reports them all with their place in the document.
//! [`structural_problems`] names each like the validator names fields
//! (`target.url`, `retry.max_attempts`), and [`decodable`] takes the broken
//! fields out so the rest can still be decoded and validated.
//!
//! The files: `explain` turns the schema's errors into problems named like
//! the validator's; `repair` takes the broken fields out (or fills in a
//! placeholder) until the rest decodes; `published` states the validator's
//! other rules (formats, time zones, rules between fields) in the schema
//! people read (`schemas/job.schema.json`, `GET /openapi.json`).

use std::sync::LazyLock;

use serde_json::Value;

use super::spec::{FieldError, JobSpec, MAX_PROBLEMS};

mod explain;
mod published;
mod repair;

pub use published::{job_schema, tighten, time_zone_schema, TIME_ZONE};
pub use repair::{covered, decodable};

/// The job schema and its validator, built once, on the first refused
/// definition. `None` only if the generated schema did not compile (a test
/// guards against that); structural problems then stay at serde's first.
static JOB_SCHEMA: LazyLock<Option<(Value, jsonschema::Validator)>> = LazyLock::new(|| {
    let schema = serde_json::to_value(schemars::schema_for!(JobSpec)).ok()?;
    let validator = jsonschema::validator_for(&schema).ok()?;
    Some((schema, validator))
});

/// The compiled job schema.
pub fn validator() -> Option<&'static jsonschema::Validator> {
    JOB_SCHEMA.as_ref().map(|(_, validator)| validator)
}

/// A structural problem and where it is: the JSON pointer's segments, which
/// the field name (dotted, keys escaped) cannot always give back.
#[derive(Debug, Clone, PartialEq)]
pub struct Structural {
    pub problem: FieldError,
    pub path: Vec<String>,
}

/// Every structural problem of `value`: wrong types, unknown fields, missing
/// fields, unknown variants. Rules the validator checks itself (patterns,
/// ranges, lengths, enums) are left to it, so each problem is reported once,
/// with the validator's code.
pub fn structural_problems(value: &Value) -> Vec<Structural> {
    let Some((schema, validator)) = JOB_SCHEMA.as_ref() else {
        return Vec::new();
    };
    // Enough to fill an answer (the list is capped at MAX_PROBLEMS); more
    // would only cost time on a definition made of thousands of bad fields.
    let mut out = Vec::new();
    for error in validator.iter_errors(value).take(2 * MAX_PROBLEMS) {
        explain::explain(schema, &error, &mut out);
    }
    out
}

/// A field name as the validator writes it: dotted, keys escaped.
pub fn field_name(path: &[String]) -> String {
    path.iter()
        .map(|segment| segment.escape_debug().to_string())
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests;
