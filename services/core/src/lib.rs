//! The language of jetcron: what a job is, when it fires, what is said about its runs,
//! and where those words travel.
//!
//! Layout:
//! - [`job`]: the job definition (`JobSpec`), its targets, its validation
//!   and its JSON Schema; a job's name and namespace (`job::name`).
//! - [`binding`]: which person or group holds which role in a namespace.
//! - [`audit`]: who wrote a revision of a job, as headers on it.
//! - [`access`]: roles per namespace, and the refusal of what a role does
//!   not allow; [`nats_doors`]: the nats-server permissions of a team's
//!   role, for its namespace's door; [`policy`]: what a namespace's jobs
//!   may reach (subjects, URLs, pools, shell, chains).
//! - [`schedule`]: when jobs fire, in one folder: the schedule language
//!   (cron, `@every`, `@at`) and the pure `next_fire` maths, the DST rule
//!   (Vixie cron(8)'s) that reads a cron line on a zone's wall clock, a
//!   job's fire times (bounds, jitter, misfires), parsed lines shared by
//!   the jobs that use them, and the preview of a line (next fires, DST
//!   notes, the line in English). No I/O, no clock: callers pass the
//!   instant.
//! - [`backoff`]: the delay between attempts (exponential, capped, jittered).
//! - [`events`]: the due event (ticker → executor) and the run event
//!   (executor → projector), with the stable run id.
//! - [`job_events`]: `job.rejected`, for definitions refused with nobody to
//!   answer, and `fire.missed`, for scheduled times nothing ran for.
//! - [`run_summary`]: folds a run's events into the one view users query.
//! - [`chain`]: what chained jobs agree on (the run id of a chained run,
//!   which endings start it).
//! - [`control`]: kill requests, kill markers, completions of asynchronous
//!   targets and failure notices, as messages.
//! - [`channel`]: alert channels, defined once and named by jobs;
//!   [`alert`]: an alert and what each kind of channel receives for it.
//! - [`crontab`]: crontab files read as Debian's cron reads them, and each
//!   line as a job with a shell target (`jetcron import-crontab`).
//! - [`subjects`]: every subject, stream, bucket, consumer and table name.
//! - [`api`]: the request/reply envelope and the one table of error codes shared by
//!   the NATS service and the HTTP gateway.
//! - [`wire_schemas`]: the JSON Schemas in `schemas/`, generated from these types.
//! - [`clock`]: time as a dependency, so tests can control it.
//! - [`time_format`]: one textual form for instants and durations.
//! - [`id_index`]: an index from ids to the numbers of their holders.
//!
//! [`schedule_lines`] and [`schedule_preview`] are the paths the other
//! crates name for [`schedule::shared_lines`] and [`schedule::preview`],
//! from before the schedule had its folder.
//!
//! Nothing here does I/O or reads a clock by itself: the crate builds
//! without tokio, async-nats or clickhouse. Talking to NATS and ClickHouse
//! (topology, publishing, DDL, connection, telemetry) is `jetcron-io`.

pub mod access;
pub mod alert;
pub mod api;
pub mod audit;
pub mod backoff;
pub mod binding;
pub mod chain;
pub mod channel;
pub mod clock;
pub mod control;
/// Crontabs read as Debian's cron reads them, and turned into job definitions.
pub mod crontab;
pub mod events;
pub mod id_index;
pub mod job;
pub mod job_events;
pub mod nats_doors;
pub mod policy;
pub mod run_summary;
pub mod schedule;
pub mod subjects;
pub mod time_format;
pub mod wire_schemas;

pub use events::{DueEvent, RunEvent, RunEventKind, RunId, Trigger};
pub use job::{JobSpec, Target};
pub use schedule::{preview as schedule_preview, shared_lines as schedule_lines, Schedule};

#[cfg(test)]
mod tests {
    /// The domain crate stays free of I/O: nothing it depends on, directly
    /// or through another crate, is a runtime, NATS or ClickHouse crate
    /// (those belong in `jetcron-io`). Read from `cargo tree`, so a
    /// dependency that pulls one in indirectly is caught too.
    #[test]
    fn the_domain_crate_depends_on_no_io_crate() {
        let output = std::process::Command::new(env!("CARGO"))
            .args([
                "tree",
                "-p",
                "jetcron-core",
                "-e",
                "normal",
                "--prefix",
                "none",
                "--offline",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("run cargo tree");
        assert!(
            output.status.success(),
            "cargo tree: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let tree = String::from_utf8_lossy(&output.stdout);
        let names: std::collections::BTreeSet<&str> = tree
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert!(
            names.contains("serde"),
            "cargo tree listed no dependencies: {tree}"
        );
        for io_crate in [
            "tokio",
            "async-nats",
            "clickhouse",
            "tokio-util",
            "hyper",
            "mio",
        ] {
            assert!(
                !names.contains(io_crate),
                "jetcron-core depends on {io_crate}:\n{tree}"
            );
        }
    }
}
