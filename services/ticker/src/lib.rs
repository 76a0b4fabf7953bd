//! The ticker: watches `jetcron_jobs`, decides when each job is due, and
//! publishes one due event per (job, scheduled time) on `jetcron.due.<pool>.<job>`
//! in stream `JETCRON_DUE`.
//!
//! Shape: jobs are split into [`shards::SHARDS`] shards; [`ownership`] leases
//! each shard to one replica through the `jetcron_ticker` bucket, and the owner
//! keeps a pure [`plan::FirePlan`] per shard, fed by the KV watch ([`watch`])
//! and drained by the clock. [`publish`] stores due events in pipelined batches
//! with `Nats-Msg-Id` = run id. A fire is advanced past only after JetStream
//! acknowledged it, and each shard's watermark (every fire up to it is stored)
//! is written with every lease renewal: a replica taking a shard over resumes
//! from it, firing late times after a failover and applying the job's misfire
//! policy after an outage. `docs/architecture.md` has the full argument for
//! "exactly once".
//!
//! Owns: the `jetcron_ticker` bucket; creates `jetcron_jobs` and `JETCRON_DUE`
//! if missing.
//!
//! Layout, by what each part does (every module is named here):
//! - the service: `ticking` (`run`: topology, start, the loop, the stop)
//!   and `batches` (a batch of fires taken from the plans, sent, and
//!   settled with its acks);
//! - which shards this replica owns and holds: [`shards`] (the split),
//!   [`ownership`] (lease rounds, with [`lease_options`]), [`share`] (what
//!   a round takes and gives up, pure), [`shard_holdings`] (which shards'
//!   jobs are held), [`load`] (the pass that loads a shard taken over),
//!   [`snapshot_format`] and [`snapshot_store`] (a shard's jobs as one
//!   object, and where it is kept), `snapshot_coverage` (whether every
//!   shard has one), [`tidy`] (letting go of jobs owned elsewhere);
//! - what is held: [`compact_job`] (a job in a few dozen bytes, with
//!   [`pool_name`] and [`millis`]), [`book`] (the held jobs and their
//!   plans, per shard), [`definitions`] (the definitions fires carry),
//!   [`watch`] (the job feed's entries), `replica_changes` (what ownership,
//!   the feed and loaded passes change), `plan_queue` (shards waiting to be
//!   planned);
//! - when jobs fire: [`plan`] (the pure fire plan of a shard), `job_fires`
//!   (one job's queued fires), [`ahead`] (fires stored ahead of their
//!   time), [`verify`] (fires a previous owner may have emitted);
//! - what goes out: [`publish`] (due events, exactly once per fire),
//!   [`revoke`] (killing fires handed out ahead when their job changes).

pub mod ahead;
mod batches;
pub mod book;
pub mod compact_job;
pub mod definitions;
mod job_fires;
pub mod lease_options;
pub mod load;
pub mod millis;
pub mod ownership;
pub mod plan;
mod plan_queue;
pub mod pool_name;
pub mod publish;
mod replica_changes;
pub mod revoke;
pub mod shard_holdings;
pub mod shards;
pub mod share;
mod snapshot_coverage;
pub mod snapshot_format;
pub mod snapshot_store;
mod ticking;
pub mod tidy;
pub mod verify;
pub mod watch;

use std::time::Duration;

use jetcron_io::clock_check::ClockCheck;
use jetcron_io::job_feed::JobFeed;
use jetcron_io::nats_connect::OwnThreadConnection;
use jetcron_io::readiness::Readiness;
use jetcron_io::topology::TopologyOptions;

use crate::ownership::LeaseOptions;

pub use ticking::run;

/// Ticker settings.
#[derive(Debug, Clone)]
pub struct TickerConfig {
    /// This replica's name in the lease records (unique per process).
    pub replica_id: String,
    pub leases: LeaseOptions,
    /// Fires at most this late after a failover or restart are all emitted;
    /// older missed fires follow the job's misfire policy.
    pub late_threshold: Duration,
    /// Most due events per batch (capped at `MAX_BATCH / PIPELINE`).
    pub batch_size: usize,
    /// Publish each fire this long before its time; executors hold it until
    /// then. A leader election of `JETCRON_DUE` (4–9 s on nats-server) at the
    /// scheduled instant then delays nothing. Changes to a job apply to fires
    /// more than this far away; a delete or pause kills the fires already
    /// handed out.
    pub lookahead: Duration,
    /// A job firing again within this keeps its definition in memory;
    /// others read theirs back by revision when they fire
    /// ([`definitions`]). Tests set zero to read back every fire.
    pub keep_definitions_for: Duration,
    /// Parsed schedule lines, shared with the other services of the process.
    pub lines: jetcron_core::schedule_lines::SharedLines,
    /// The ticker's read of the jobs bucket (its own by default; in `jetcron
    /// all` the first, which the others' read waits for).
    pub jobs_feed: JobFeed,
    pub topology: TopologyOptions,
    /// Told when the topology is verified (`/readyz`).
    pub readiness: Readiness,
    /// Where lease rounds run: the loop plans or drops a shard of hundreds
    /// of thousands of jobs in one go (seconds at ten million jobs), and
    /// renewals that wait for it let the other replicas take the shards.
    /// `None`: on this runtime, through the ticker's own client.
    pub lease_thread: Option<OwnThreadConnection>,
    /// A planned shard that changed is written to its snapshot at most
    /// this often; a replica taking a shard over reads the snapshot
    /// instead of the whole bucket ([`snapshot_format`]). Zero: none written or
    /// read.
    pub snapshot_every: Duration,
    /// This host's clock against the NATS servers': while it is not
    /// trusted the replica holds no shard (off by default, for tests that
    /// drive time by hand).
    pub clock_check: ClockCheck,
}

impl Default for TickerConfig {
    fn default() -> Self {
        Self {
            replica_id: default_replica_id(),
            leases: LeaseOptions::default(),
            late_threshold: Duration::from_secs(60),
            batch_size: MAX_BATCH,
            lookahead: Duration::ZERO,
            keep_definitions_for: definitions::KEEP_FOR,
            lines: Default::default(),
            jobs_feed: JobFeed::default(),
            topology: TopologyOptions::default(),
            readiness: Readiness::default(),
            lease_thread: None,
            snapshot_every: snapshot_store::DEFAULT_EVERY,
            clock_check: ClockCheck::off(),
        }
    }
}

/// `<hostname>-<pid>-<random>`: unique per process start.
pub fn default_replica_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "ticker".into());
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &random[..8])
}

/// Most due events sent and not yet acknowledged: async-nats lets at most
/// 5000 acks be outstanding on one JetStream context.
pub const MAX_BATCH: usize = 4096;

/// Batches in flight at once (each `MAX_BATCH / PIPELINE` fires at most).
pub const PIPELINE: usize = 2;

/// Fires waiting to be killed after a delete or pause (beyond it, a
/// revocation is dropped with a warning: the fires then run).
const REVOCATION_QUEUE: usize = 4096;

/// Longest the loop sleeps without looking at the clock again.
const MAX_IDLE: Duration = Duration::from_millis(250);
/// Longest a queued shard waits for a moment with no fire due within the
/// lookahead before it is planned anyway.
const PLAN_AT_LEAST_EVERY: Duration = Duration::from_secs(1);
/// Pause before retrying after a failed publish.
const PUBLISH_RETRY: Duration = Duration::from_millis(250);

/// How long a graceful stop may spend writing the snapshots of changed
/// shards before it releases them (sixteen shards of a million jobs take
/// about a second here).
const SNAPSHOTS_AT_STOP_WITHIN: Duration = Duration::from_secs(5);
