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
//! - the service: `ticking` (`run`: topology, start, the loop, the stop);
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

use chrono::{DateTime, Utc};
use jetcron_core::clock::Clock;
use jetcron_io::clock_check::ClockCheck;
use jetcron_io::job_feed::JobFeed;
use jetcron_io::nats_connect::OwnThreadConnection;
use jetcron_io::readiness::Readiness;
use jetcron_io::retry::LogLimiter;
use jetcron_io::topology::{self, TopologyOptions};
use tracing::{info, warn};

use crate::book::Book;
use crate::definitions::Resolved;
use crate::ownership::{LeaseOptions, Leases};
use crate::replica_changes::Held;
use crate::shards::shard_of;

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
    /// The process's one read of the jobs bucket (its own by default).
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

/// The snapshot store, if it can be used: a failure to open it leaves
/// snapshots off in this process (a shard taken over is then read from the
/// whole bucket, as before there were snapshots), not the ticker stopped.
async fn open_snapshot_store(
    js: &async_nats::jetstream::Context,
    wanted: &TopologyOptions,
    jobs: &async_nats::jetstream::kv::Store,
) -> Option<snapshot_store::SnapshotStore> {
    match topology::ensure_ticker_snapshots(js, wanted).await {
        Ok(store) => snapshot_store::SnapshotStore::new(store, jobs.stream.cached_info()),
        Err(e) => {
            warn!(error = %format!("{e:#}"), "shard snapshots off: cannot open their object store");
            None
        }
    }
}

/// A batch of due events sent, its definitions, and its acks to come.
type InFlight = (
    Vec<plan::Fire>,
    Vec<Resolved>,
    Vec<Option<async_nats::jetstream::context::PublishAckFuture>>,
);

/// How a batch in flight came out.
#[derive(Debug, Clone, Copy)]
struct Settled {
    fires: usize,
    failed: usize,
}

impl Settled {
    fn all_failed(self) -> bool {
        self.failed == self.fires
    }
}

/// Await the acks of the oldest batch in flight, if there is one, and
/// settle its fires: a stored fire is done (its job's next fire is queued)
/// and the rest are offered again.
async fn settle_oldest(
    in_flight: &mut std::collections::VecDeque<InFlight>,
    held: &mut Held,
    revoker: &mut revoke::Revoker,
    leases: &Leases,
    lookahead: chrono::Duration,
    clock: &dyn Clock,
) -> Option<Settled> {
    let (fires, resolved, acks) = in_flight.pop_front()?;
    let stored = publish::collect_acks(acks, publish::ACK_DEADLINE).await;
    let now = clock.now();
    let failed = settle(&mut held.book, &fires, &done(&stored, &resolved), now);
    revoker.stored(&fires, &stored, now);
    keep_definitions_of_soon_fires(held, &fires, &resolved, now);
    record_watermarks(&held.book, leases, now + lookahead);
    Some(Settled {
        fires: fires.len(),
        failed,
    })
}

/// Whether due events get stored, for the log (bounded) and for ownership
/// (which hands the shards over when it lasts).
#[derive(Debug)]
struct PublishHealth {
    failing_since: Option<std::time::Instant>,
    log: LogLimiter,
}

impl Default for PublishHealth {
    fn default() -> Self {
        Self {
            failing_since: None,
            log: LogLimiter::new(Duration::from_secs(5)),
        }
    }
}

impl PublishHealth {
    fn failed(&mut self, leases: &Leases, failed: usize) {
        let since = *self
            .failing_since
            .get_or_insert_with(std::time::Instant::now);
        leases.set_publish_failing_since(Some(since));
        if let Some(batches) = self.log.admit() {
            warn!(
                failed,
                batches,
                failing_ms = since.elapsed().as_millis() as u64,
                "due events not stored, retrying"
            );
        }
    }

    fn stored(&mut self, leases: &Leases) {
        if let Some(since) = self.failing_since.take() {
            info!(
                stalled_ms = since.elapsed().as_millis() as u64,
                "due events stored again"
            );
            leases.set_publish_failing_since(None);
            self.log.reset();
        }
    }

    /// Nothing to publish: nothing is failing.
    fn clear(&mut self, leases: &Leases) {
        if self.failing_since.take().is_some() {
            leases.set_publish_failing_since(None);
        }
    }
}

/// Take the earliest due fires of the shards this replica may publish for;
/// each shard contributes its share, so one batch stays bounded however many
/// fires are due at once (at most `limit` plus one per shard).
fn take_due_fires(
    book: &mut Book,
    leases: &Leases,
    now: DateTime<Utc>,
    limit: usize,
) -> Vec<plan::Fire> {
    let per_shard = limit / book.plans().count().max(1) + 1;
    let mut fires: Vec<plan::Fire> = book
        .plans_mut()
        .filter(|(shard, _)| leases.is_valid(*shard))
        .flat_map(|(_, plan)| plan.take_due(now, per_shard))
        .collect();
    fires.sort_by_key(|f| (f.fire_at, f.scheduled_at));
    fires
}

/// Apply a batch's acks to the plans; returns how many were not stored.
/// Record which fires were stored; returns how many were not. Metrics:
/// `jetcron_fires_total`, `jetcron_fire_publish_failures_total` and
/// `jetcron_fire_lag_seconds` (stored minus meant-to-publish instant).
fn settle(book: &mut Book, fires: &[plan::Fire], stored: &[bool], now: DateTime<Utc>) -> usize {
    let mut failed = 0;
    let lag = metrics::histogram!("jetcron_fire_lag_seconds");
    for (fire, ok) in fires.iter().zip(stored.iter().copied()) {
        let Some(plan) = book.plan_mut(shard_of(&fire.job.id)) else {
            continue;
        };
        if ok {
            lag.record((now - fire.fire_at).num_milliseconds().max(0) as f64 / 1000.0);
            plan.fired(fire);
        } else {
            failed += 1;
            plan.unfired(fire);
        }
    }
    metrics::counter!("jetcron_fires_total").increment((fires.len() - failed) as u64);
    if failed > 0 {
        metrics::counter!("jetcron_fire_publish_failures_total").increment(failed as u64);
    }
    failed
}

/// Which fires are done with: stored, or with no job left to run
/// ([`Resolved::Gone`], nothing to store).
fn done(stored: &[bool], resolved: &[Resolved]) -> Vec<bool> {
    stored
        .iter()
        .zip(resolved)
        .map(|(ok, resolved)| *ok || matches!(resolved, Resolved::Gone))
        .collect()
}

/// After a batch: definitions of jobs that fire again soon stay in
/// memory, the others leave it.
fn keep_definitions_of_soon_fires(
    held: &mut Held,
    fires: &[plan::Fire],
    resolved: &[Resolved],
    now: DateTime<Utc>,
) {
    let Held {
        book, definitions, ..
    } = held;
    for (fire, resolved) in fires.iter().zip(resolved) {
        let next = book
            .plan(shard_of(&fire.job.id))
            .and_then(|plan| plan.get(&fire.job.id))
            .and_then(plan::PlannedJob::next_fire);
        definitions.settled(fire, resolved, next, now);
    }
}

/// The fires (with their definitions) of shards whose lease is still
/// valid; the others go back to their plans untouched.
fn still_leased(
    book: &mut Book,
    leases: &Leases,
    fires: Vec<plan::Fire>,
    resolved: Vec<Resolved>,
) -> (Vec<plan::Fire>, Vec<Resolved>) {
    let mut kept = (
        Vec::with_capacity(fires.len()),
        Vec::with_capacity(fires.len()),
    );
    for (fire, resolved) in fires.into_iter().zip(resolved) {
        let shard = shard_of(&fire.job.id);
        if leases.is_valid(shard) {
            kept.0.push(fire);
            kept.1.push(resolved);
        } else if let Some(plan) = book.plan_mut(shard) {
            plan.unfired(&fire);
        }
    }
    kept
}

fn record_watermarks(book: &Book, leases: &Leases, now: DateTime<Utc>) {
    for (shard, plan) in book.plans() {
        leases.set_watermark(shard, plan.watermark(now));
    }
}
