//! The job definition: what users put into `jetcron_jobs`, and its validation.
//!
//! A definition arrives as JSON from three doors (the `jetcron.api.jobs.put`
//! endpoint, a fire-and-forget publish to it, or a raw `nats kv put`), so
//! parsing and validation live here, once, and every door gets the same
//! field-by-field errors. [`ValidJob`] is the only form the ticker and the
//! executor act on: a definition that does not validate is never scheduled.
//!
//! The files, imports going one way:
//! - [`patterns`]: the regular expressions of the JSON Schema (no imports);
//! - [`name`]: a job's name and its namespace (`billing.export`);
//! - `spec`: the definition's types ([`JobSpec`], targets, policies,
//!   [`FieldError`], [`ValidJob`]) with the schema's rules attached;
//! - [`schema`]: the JSON Schema at work, on the failure path;
//! - `validate`: the semantic checks of a decoded definition;
//! - `secrets`: the stored secrets back in place of a redacted read's
//!   placeholders;
//! - `parse`: bytes to [`ValidJob`], naming every problem at once (uses
//!   `schema` and `validate`).
//!
//! When a valid job fires (bounds, DST, jitter, misfires) is the schedule's
//! question: [`crate::schedule::fire_times`].

pub mod name;
mod parse;
pub mod patterns;
pub mod schema;
mod secrets;
mod spec;
mod validate;

pub use name::{
    job_name, namespace_of, validate_job_name, validate_namespace, validate_token, JobName,
    DEFAULT_NAMESPACE,
};
pub use parse::{parse_job, parse_job_with, parse_written, parse_written_with};
pub use secrets::{mentions_redacted, restore_redacted};
pub use spec::*;
pub use validate::*;

#[cfg(test)]
mod tests;
