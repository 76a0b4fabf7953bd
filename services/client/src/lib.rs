//! The client side of jetcron's API: what `jetcron jobs …`, `runs …`,
//! `apply`, `diff`, `export` and `import-crontab` do, as a library the
//! `jetcron` binary wires to its command line.
//!
//! Everything goes through the same API a user reaches with `nats req` or
//! `curl` ([`api`]): the gateway stays the one writer of the jobs bucket, so
//! a file applied here is checked, authored and audited as any other put,
//! and its refusals read the same. Nothing here talks to the bucket itself.
//!
//! Layout:
//! - [`api`]: one call (an endpoint and a JSON body) over NATS, through a
//!   namespace's door or not, or over HTTP; refusals as the API states them;
//! - [`output`]: tables for people, JSON for scripts;
//! - [`commands`]: `jetcron jobs …` and `jetcron runs …`;
//! - [`manifest`]: job files and folders (JSON or YAML) with where each job
//!   came from;
//! - [`plan`]: files against what is stored: creates, updates field by
//!   field, deletes;
//! - [`apply`]: a plan carried out with compare-and-swap, and `diff`;
//! - [`export`]: what is stored as files `apply` takes back unchanged;
//! - [`crontab_import`]: a crontab as a plan of jobs with shell targets.

pub mod api;
pub mod apply;
pub mod commands;
pub mod crontab_import;

pub mod export;
pub mod manifest;
pub mod output;
pub mod plan;

/// What a command that changes (or plans to change) jobs tells its caller,
/// for pipelines: nothing to do, changes made or planned, or an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0: the store already matches.
    NothingToDo,
    /// Exit 2: changes were applied, or would be (`--dry-run`, `diff`).
    Changes,
}

impl Outcome {
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::NothingToDo => 0,
            Outcome::Changes => 2,
        }
    }
}
