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

pub mod ahead;
pub mod book;
pub mod definitions;
mod held;
pub mod held_job;
pub mod holding;
mod job_fires;
pub mod lease_options;
pub mod load;
pub mod millis;
pub mod ownership;
pub mod plan;
mod plan_queue;
pub mod pool_name;
pub mod publish;
pub mod revoke;
pub mod shards;
pub mod share;
pub mod snapshot;
mod snapshot_coverage;
pub mod snapshots;
pub mod tidy;
pub mod verify;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use jetcron_core::clock::Clock;
use jetcron_io::clock_check::ClockCheck;
use jetcron_io::job_feed::JobFeed;
use jetcron_io::nats_connect::OwnThreadConnection;
use jetcron_io::readiness::Readiness;
use jetcron_io::retry::LogLimiter;
use jetcron_io::topology::{self, Need, TopologyOptions};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::book::Book;
use crate::definitions::{Definitions, Resolved};
use crate::held::{Held, Loader, Recovery};
use crate::holding::Holdings;
use crate::load::ShardPass;
use crate::ownership::{LeaseOptions, Leases, Ownership};
use crate::shards::shard_of;
use crate::tidy::Tidying;

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
    /// instead of the whole bucket ([`snapshot`]). Zero: none written or
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
            snapshot_every: snapshots::DEFAULT_EVERY,
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

/// The streams and buckets a ticker needs beside its own lease bucket,
/// made or verified in this order.
const TOPOLOGY: &[Need] = &[
    Need::JobsBucket,
    Need::DueStream,
    Need::RunsStream,
    Need::RunningBucket,
];

/// Run the ticker until `shutdown` is cancelled.
pub async fn run(
    config: TickerConfig,
    client: async_nats::Client,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let tjs = topology::context(client.clone());
    let js = async_nats::jetstream::new(client);
    let wanted = &config.topology;
    let mut converging =
        topology::Converging::start(jetcron_io::readiness::TICKER, &config.readiness, &shutdown);
    let Some(ensured) = converging.ensure_needs(&tjs, wanted, TOPOLOGY).await? else {
        return Ok(());
    };
    let jobs = ensured.bucket(Need::JobsBucket)?;
    let due_stream = ensured.stream(Need::DueStream)?;
    let running = ensured.bucket(Need::RunningBucket)?;
    let definitions = Definitions::new(
        tjs.get_stream_no_info(&jobs.stream_name).await?,
        config.keep_definitions_for,
        config.lines.clone(),
    );
    let lease_js = config
        .lease_thread
        .as_ref()
        .map(|own| topology::context(own.client.clone()));
    let Some(ticker_bucket) = converging
        .ensure(|| topology::ensure_ticker_bucket(lease_js.as_ref().unwrap_or(&tjs), wanted))
        .await?
    else {
        return Ok(());
    };
    converging.ready();
    let snapshot_store = if config.snapshot_every.is_zero() {
        None
    } else {
        open_snapshot_store(&tjs, wanted, &jobs).await
    };

    let watch_stop = CancellationToken::new();
    let (job_tx, mut job_changes) = tokio::sync::mpsc::channel(4096);
    let watcher = tokio::spawn(watch::watch_jobs(
        config.jobs_feed.subscribe(&js.client(), &config.lines),
        js.clone(),
        job_tx,
        watch_stop.clone(),
    ));

    let leases = Leases::with_clock_check(config.clock_check.clone());
    let ownership_stop = CancellationToken::new();
    tokio::spawn({
        let (check, js, stop) = (
            config.clock_check.clone(),
            js.clone(),
            ownership_stop.clone(),
        );
        async move {
            check
                .follow(js, jetcron_core::subjects::DUE_STREAM.to_string(), stop)
                .await
        }
    });
    let (ready_tx, ready_rx) = tokio::sync::watch::channel(false);
    let (own_tx, mut ownership_changes) = tokio::sync::mpsc::channel(64);
    let ownership = Ownership::new(
        ticker_bucket,
        config.replica_id.clone(),
        config.leases,
        config.lookahead,
        Arc::clone(&clock),
        leases.clone(),
        own_tx,
    );
    let rounds = ownership.run(ready_rx, ownership_stop.clone());
    // However `run` ends (a later step of the start failing too), the
    // ownership task stops: it may run on another runtime.
    let _stop_ownership = ownership_stop.clone().drop_guard();
    let owner_task = match &config.lease_thread {
        Some(own) => own.runtime.spawn(rounds),
        None => tokio::spawn(rounds),
    };

    let recovery = Recovery {
        late_threshold: chrono::Duration::from_std(config.late_threshold).unwrap_or_default(),
        // Beyond this age a republished fire may outlive JetStream's dedup
        // memory (the window of the stream as it exists, with a margin).
        dedup_horizon: {
            let window =
                chrono::Duration::from_std(due_stream.cached_info().config.duplicate_window)
                    .unwrap_or_default();
            window - (window / 2).min(chrono::Duration::seconds(30))
        },
        emitted: verify::EmittedFires::open(&js).await?,
    };
    let mut held = Held {
        book: Book::default(),
        definitions,
        // Two TTLs without an ownership change: a cold start's
        // rebalancing is over.
        holdings: Holdings::new(config.leases.ttl * 2, std::time::Instant::now()),
        tidying: Tidying::default(),
        to_plan: plan_queue::PlanQueue::default(),
        leases: leases.clone(),
        snapshots: snapshots::SnapshotWriter::new(snapshot_store.clone(), config.snapshot_every),
    };
    let snapshot_coverage =
        snapshot_coverage::follow(snapshot_store.clone(), watch_stop.child_token());
    let (passes_tx, mut passes) = tokio::sync::mpsc::channel::<ShardPass>(4);
    let loader = Loader {
        client: js.client(),
        lines: config.lines.clone(),
        snapshots: snapshot_store,
        done: passes_tx,
        stop: watch_stop.child_token(),
    };
    let mut in_flight = std::collections::VecDeque::new();
    let lookahead = chrono::Duration::from_std(config.lookahead).unwrap_or_default();
    let mut health = PublishHealth::default();
    let (revoke_tx, revoke_rx) = tokio::sync::mpsc::channel(REVOCATION_QUEUE);
    let revoker_task = tokio::spawn(revoke::kill_revoked(running, revoke_rx, clock.clone()));
    let mut revoker = revoke::Revoker::new(revoke_tx, !config.lookahead.is_zero());
    // From the shards' snapshots when there are: shards are taken at once,
    // not after the feed's read of the whole bucket (which waits for this
    // ticker meanwhile, its queue full).
    let keys = usize::try_from(jobs.stream.cached_info().state.subjects_count).unwrap_or(0);
    if held::preload(&mut held, &loader, keys, &mut revoker, clock.now()).await {
        let _ = ready_tx.send(true);
    }
    let mut last_planning = std::time::Instant::now();
    info!(replica_id = %config.replica_id, lookahead_ms = config.lookahead.as_millis() as u64, "ticker started");

    loop {
        // Apply what arrived without waiting. Ownership first: a shard
        // just acquired is not dropped as owned elsewhere.
        while let Ok(change) = ownership_changes.try_recv() {
            held::on_ownership(change, &mut held, &loader, clock.now());
        }
        while let Ok(change) = job_changes.try_recv() {
            let now = clock.now();
            held::on_job(change, &mut held, &mut revoker, &ready_tx, &recovery, now).await;
        }
        while let Ok(pass) = passes.try_recv() {
            held::on_loaded(pass, &mut held, &mut revoker, &recovery, clock.now());
        }
        if *snapshot_coverage.borrow() {
            held.holdings.every_shard_snapshotted();
        }
        held::drop_shards_owned_elsewhere(&mut held);
        held.tidying.step(&mut held.book, tidy::STEP_BUDGET);
        // Every ownership change at once, and again last before taking
        // fires (planning a shard, a pass applied or a step of letting go
        // above may have taken a while): a shard lost and granted again
        // must not be fired from its old plan (or its old watermark
        // recorded) in between.
        while let Ok(change) = ownership_changes.try_recv() {
            held::on_ownership(change, &mut held, &loader, clock.now());
        }
        if !held.book.has_plans() {
            health.clear(&leases);
        }

        // Fires are taken `lookahead` before their publish instant.
        let horizon = clock.now() + lookahead;
        // A queued shard is planned below, once every fire due within the
        // lookahead is out and settled. When a second passes without such a
        // moment, no fire is taken until what is in flight is settled, so a
        // load that always has fires due still gets its shards planned.
        let planning_overdue =
            !held.to_plan.is_empty() && last_planning.elapsed() >= PLAN_AT_LEAST_EVERY;
        // Keep the server fed: send the next batch while the previous one's
        // acks are on their way (at most PIPELINE batches in flight).
        if in_flight.len() < PIPELINE && !planning_overdue {
            let batch = config.batch_size.clamp(1, MAX_BATCH / PIPELINE);
            let fires = take_due_fires(&mut held.book, &leases, horizon, batch);
            if !fires.is_empty() {
                let resolved = held.definitions.resolve(&fires).await;
                // Reading back took time: publish only for shards still held.
                let (fires, resolved) = still_leased(&mut held.book, &leases, fires, resolved);
                if !fires.is_empty() {
                    let acks = publish::send_batch(&js, &fires, &resolved, clock.now()).await;
                    in_flight.push_back((fires, resolved, acks));
                }
                continue;
            }
        }
        if let Some(settled) = settle_oldest(
            &mut in_flight,
            &mut held,
            &mut revoker,
            &leases,
            lookahead,
            clock.as_ref(),
        )
        .await
        {
            if settled.all_failed() {
                health.failed(&leases, settled.failed);
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(jetcron_io::retry::jittered(PUBLISH_RETRY)) => {}
                }
            } else {
                // Some were stored: the path to the stream works; the rest
                // are offered again at once.
                health.stored(&leases);
            }
            if shutdown.is_cancelled() {
                break;
            }
            continue;
        }
        record_watermarks(&held.book, &leases, horizon);
        // Every fire due within the lookahead is out and settled (or
        // planning is overdue and what was in flight is settled): plan one
        // shard now. Planning one holds this loop (0.2 s at ten million
        // jobs, a second before shards were planned in place), which the
        // lookahead covers. Planned before the fires were
        // out, a job due every second got one fire out per shard planned
        // and fell behind (a canary was called 2-4 s late while the shards
        // of a cold start were planned). A shard counts as planned at once
        // (a replica above its share hands on an unplanned one first); its
        // watermark is recorded once the changes of its jobs that came
        // while it was planned are applied, in the next pass.
        if !held.to_plan.is_empty() {
            held::plan_next(&mut held, &recovery, clock.now()).await;
            last_planning = std::time::Instant::now();
            continue;
        }
        // Nothing due within the lookahead, no shard to plan: a planned
        // shard that changed may be written to its snapshot.
        held.snapshots.step(&held.book);
        // Letting go of dropped jobs goes on at once, between fires.
        let idle = if held.tidying.is_idle() && held.to_plan.is_empty() {
            held.book
                .plans()
                .filter_map(|(_, plan)| plan.next_fire_at())
                .min()
                .and_then(|at| (at - horizon).to_std().ok())
                .map_or(MAX_IDLE, |d| d.min(MAX_IDLE))
        } else {
            Duration::ZERO
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            change = ownership_changes.recv() => {
                if let Some(change) = change {
                    held::on_ownership(change, &mut held, &loader, clock.now());
                }
            }
            change = job_changes.recv() => match change {
                Some(change) => {
                    let now = clock.now();
                    held::on_job(change, &mut held, &mut revoker, &ready_tx, &recovery, now).await;
                }
                None => break,
            },
            Some(pass) = passes.recv() => {
                held::on_loaded(pass, &mut held, &mut revoker, &recovery, clock.now());
            }
            _ = tokio::time::sleep(idle) => {}
        }
    }
    // Settle what is in flight, record final watermarks, then release the
    // shards so a standby resumes at once.
    while let Some((fires, resolved, acks)) = in_flight.pop_front() {
        let stored = publish::collect_acks(acks, publish::ACK_DEADLINE).await;
        settle(
            &mut held.book,
            &fires,
            &done(&stored, &resolved),
            clock.now(),
        );
    }
    record_watermarks(&held.book, &leases, clock.now() + lookahead);
    // While the shards are still held here: their next owner reads them
    // from snapshots with nothing after them to replay.
    held.snapshots
        .write_changed_before_stop(&held.book, SNAPSHOTS_AT_STOP_WITHIN)
        .await;
    drop(revoker);
    let _ = tokio::time::timeout(Duration::from_secs(5), revoker_task).await;
    ownership_stop.cancel();
    watch_stop.cancel();
    // A change the ownership task is still sending fails at once.
    drop(ownership_changes);
    owner_task
        .await
        .context("join ownership")?
        .context("ownership")?;
    watcher
        .await
        .context("join job watcher")?
        .context("job watcher")?;
    info!(jobs = held.book.len(), "ticker stopped");
    Ok(())
}

/// The snapshot store, if it can be used: a failure to open it leaves
/// snapshots off in this process (a shard taken over is then read from the
/// whole bucket, as before there were snapshots), not the ticker stopped.
async fn open_snapshot_store(
    js: &async_nats::jetstream::Context,
    wanted: &TopologyOptions,
    jobs: &async_nats::jetstream::kv::Store,
) -> Option<snapshots::SnapshotStore> {
    match topology::ensure_ticker_snapshots(js, wanted).await {
        Ok(store) => snapshots::SnapshotStore::new(store, jobs.stream.cached_info()),
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
