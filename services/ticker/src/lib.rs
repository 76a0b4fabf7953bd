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
pub mod held_job;
pub mod holding;
pub mod lease_options;
pub mod load;
pub mod ownership;
pub mod plan;
pub mod publish;
pub mod revoke;
pub mod shards;
pub mod share;
pub mod verify;
pub mod watch;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use jetcron_core::clock::Clock;
use jetcron_core::job::ValidJob;
use jetcron_io::job_feed::{FeedEvent, JobEntry, JobFeed, Written};
use jetcron_io::readiness::Readiness;
use jetcron_io::retry::LogLimiter;
use jetcron_io::topology::{self, TopologyOptions};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::book::Book;
use crate::definitions::{Definitions, Resolved};
use crate::holding::{Acquisition, Holdings, Route};
use crate::load::ShardPass;
use crate::ownership::{LeaseOptions, Leases, Ownership, OwnershipChange};
use crate::plan::FirePlan;
use crate::shards::shard_of;

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
/// Pause before retrying after a failed publish.
const PUBLISH_RETRY: Duration = Duration::from_millis(250);

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
    let Some(jobs) = converging
        .ensure(|| topology::ensure_jobs_bucket(&tjs, wanted))
        .await?
    else {
        return Ok(());
    };
    let definitions = Definitions::new(
        jobs.stream.clone(),
        config.keep_definitions_for,
        config.lines.clone(),
    );
    let Some(due_stream) = converging
        .ensure(|| topology::ensure_due_stream(&tjs, wanted))
        .await?
    else {
        return Ok(());
    };
    if converging
        .ensure(|| topology::ensure_runs_stream(&tjs, wanted))
        .await?
        .is_none()
    {
        return Ok(());
    }
    let Some(ticker_bucket) = converging
        .ensure(|| topology::ensure_ticker_bucket(&tjs, wanted))
        .await?
    else {
        return Ok(());
    };
    let Some(running) = converging
        .ensure(|| topology::ensure_running_bucket(&tjs, wanted))
        .await?
    else {
        return Ok(());
    };
    converging.ready();

    let watch_stop = CancellationToken::new();
    let (job_tx, mut job_changes) = tokio::sync::mpsc::channel(4096);
    let watcher = tokio::spawn(watch::watch_jobs(
        config.jobs_feed.subscribe(&js.client(), &config.lines),
        js.clone(),
        job_tx,
        watch_stop.clone(),
    ));

    let leases = Leases::default();
    let ownership_stop = CancellationToken::new();
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
    let owner_task = tokio::spawn(ownership.run(ready_rx, ownership_stop.clone()));

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
        plans: HashMap::new(),
        definitions,
        // Two TTLs without an ownership change: a cold start's
        // rebalancing is over.
        holdings: Holdings::new(config.leases.ttl * 2, std::time::Instant::now()),
    };
    let (passes_tx, mut passes) = tokio::sync::mpsc::channel::<ShardPass>(4);
    let loader = Loader {
        client: js.client(),
        lines: config.lines.clone(),
        done: passes_tx,
        stop: watch_stop.child_token(),
    };
    let mut in_flight = std::collections::VecDeque::new();
    let lookahead = chrono::Duration::from_std(config.lookahead).unwrap_or_default();
    let mut health = PublishHealth::default();
    let (revoke_tx, revoke_rx) = tokio::sync::mpsc::channel(REVOCATION_QUEUE);
    let revoker_task = tokio::spawn(revoke::kill_revoked(running, revoke_rx, clock.clone()));
    let mut revoker = revoke::Revoker::new(revoke_tx, !config.lookahead.is_zero());
    info!(replica_id = %config.replica_id, lookahead_ms = config.lookahead.as_millis() as u64, "ticker started");

    loop {
        // Apply what arrived without waiting. Every ownership change at
        // once: a shard lost and granted again must not be fired from its
        // old plan (or its old watermark recorded) in between.
        while let Ok(change) = ownership_changes.try_recv() {
            on_ownership(change, &mut held, &recovery, &loader, clock.now()).await;
        }
        while let Ok(change) = job_changes.try_recv() {
            on_job(
                change,
                &mut held,
                &mut revoker,
                &ready_tx,
                recovery.late_threshold,
                clock.now(),
            );
        }
        while let Ok(pass) = passes.try_recv() {
            on_loaded(pass, &mut held, &mut revoker, &recovery, clock.now()).await;
        }
        drop_shards_owned_elsewhere(&mut held);
        if held.plans.is_empty() {
            health.clear(&leases);
        }

        // Fires are taken `lookahead` before their publish instant.
        let horizon = clock.now() + lookahead;
        // Keep the server fed: send the next batch while the previous one's
        // acks are on their way (at most PIPELINE batches in flight).
        if in_flight.len() < PIPELINE {
            let batch = config.batch_size.clamp(1, MAX_BATCH / PIPELINE);
            let fires = take_due_fires(&mut held.plans, &leases, horizon, batch);
            if !fires.is_empty() {
                let resolved = held.definitions.resolve(&fires).await;
                // Reading back took time: publish only for shards still held.
                let (fires, resolved) = still_leased(&mut held.plans, &leases, fires, resolved);
                if !fires.is_empty() {
                    let acks = publish::send_batch(&js, &fires, &resolved, clock.now()).await;
                    in_flight.push_back((fires, resolved, acks));
                }
                continue;
            }
        }
        if let Some((fires, resolved, acks)) = in_flight.pop_front() {
            let stored = publish::collect_acks(acks, publish::ACK_DEADLINE).await;
            let now = clock.now();
            let failed = settle(&mut held.plans, &fires, &done(&stored, &resolved), now);
            revoker.stored(&fires, &stored, now);
            keep_definitions_of_soon_fires(&mut held, &fires, &resolved, now);
            record_watermarks(&held.plans, &leases, now + lookahead);
            if failed == fires.len() {
                health.failed(&leases, failed);
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
        record_watermarks(&held.plans, &leases, horizon);
        let idle = held
            .plans
            .values()
            .filter_map(FirePlan::next_fire_at)
            .min()
            .and_then(|at| (at - horizon).to_std().ok())
            .map_or(MAX_IDLE, |d| d.min(MAX_IDLE));
        tokio::select! {
            _ = shutdown.cancelled() => break,
            change = ownership_changes.recv() => {
                if let Some(change) = change {
                    on_ownership(change, &mut held, &recovery, &loader, clock.now()).await;
                }
            }
            change = job_changes.recv() => match change {
                Some(change) => on_job(
                    change,
                    &mut held,
                    &mut revoker,
                    &ready_tx,
                    recovery.late_threshold,
                    clock.now(),
                ),
                None => break,
            },
            Some(pass) = passes.recv() => {
                on_loaded(pass, &mut held, &mut revoker, &recovery, clock.now()).await;
            }
            _ = tokio::time::sleep(idle) => {}
        }
    }
    // Settle what is in flight, record final watermarks, then release the
    // shards so a standby resumes at once.
    while let Some((fires, resolved, acks)) = in_flight.pop_front() {
        let stored = publish::collect_acks(acks, publish::ACK_DEADLINE).await;
        settle(
            &mut held.plans,
            &fires,
            &done(&stored, &resolved),
            clock.now(),
        );
    }
    record_watermarks(&held.plans, &leases, clock.now() + lookahead);
    drop(revoker);
    let _ = tokio::time::timeout(Duration::from_secs(5), revoker_task).await;
    ownership_stop.cancel();
    watch_stop.cancel();
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

/// How a taken-over shard resumes.
struct Recovery {
    late_threshold: chrono::Duration,
    dedup_horizon: chrono::Duration,
    emitted: verify::EmittedFires,
}

/// What the loop holds: the jobs of the shards it holds, which shards
/// those are, the plans of the shards it owns, and the definitions kept
/// for fires coming soon.
struct Held {
    book: Book,
    plans: HashMap<u32, FirePlan>,
    definitions: Definitions,
    holdings: Holdings,
}

async fn on_ownership(
    change: OwnershipChange,
    held: &mut Held,
    recovery: &Recovery,
    loader: &Loader,
    now: DateTime<Utc>,
) {
    match change {
        OwnershipChange::Acquired {
            shard,
            done,
            emitted_before,
        } => {
            let acquisition = Acquisition {
                done,
                emitted_before,
                acquired_at: now,
            };
            match held
                .holdings
                .acquired(shard, acquisition, std::time::Instant::now())
            {
                Some(acquisition) => plan_shard(shard, acquisition, held, recovery, now).await,
                None => info!(shard, "shard acquired, its jobs to be loaded first"),
            }
        }
        OwnershipChange::Lost { shard } => {
            held.holdings.lost(shard, std::time::Instant::now());
            held.plans.remove(&shard);
            for job in held.book.shard(shard) {
                held.definitions.forget(&job.id);
            }
        }
        // One pass for every shard the round acquired without its jobs.
        OwnershipChange::RoundEnded => {
            if let Some((pass, shards)) = held.holdings.start_pass() {
                loader.start(pass, shards);
            }
        }
    }
}

/// What starts a pass that loads shards ([`load::load_shards`]).
struct Loader {
    client: async_nats::Client,
    lines: jetcron_core::schedule_lines::SharedLines,
    done: tokio::sync::mpsc::Sender<ShardPass>,
    stop: CancellationToken,
}

impl Loader {
    fn start(&self, pass: holding::PassId, shards: Vec<u32>) {
        info!(?shards, "loading the jobs of shards taken over");
        tokio::spawn(load::load_shards(
            self.client.clone(),
            self.lines.clone(),
            pass,
            shards,
            self.done.clone(),
            self.stop.clone(),
        ));
    }
}

/// Plan `shard`, whose jobs are held, from where `acquisition` says its
/// last owner left it.
async fn plan_shard(
    shard: u32,
    acquisition: Acquisition,
    held: &mut Held,
    recovery: &Recovery,
    now: DateTime<Utc>,
) {
    let Acquisition {
        done,
        emitted_before,
        acquired_at,
    } = acquisition;
    // A fire is late, not missed, by how long the shard had no owner: the
    // time its jobs took to load since it was acquired does not count.
    let late_threshold =
        recovery.late_threshold + (now - acquired_at).max(chrono::Duration::zero());
    let Held { book, plans, .. } = held;
    let mut plan = FirePlan::with_capacity(book.shard_len(shard));
    for job in book.shard(shard) {
        plan.recover(Arc::clone(job), done, now, late_threshold);
    }
    let mut verified = 0;
    if now - done > recovery.dedup_horizon {
        // The previous owner may have published fires in
        // (done, emitted_before] that dedup no longer remembers.
        let ids: Vec<Arc<str>> = plan.job_ids().cloned().collect();
        for id in ids {
            if plan.catch_up_between(&id, done, emitted_before).is_empty() {
                continue;
            }
            verified += 1;
            let Some(pool) = plan.get(&id).map(|p| p.job.pool.clone()) else {
                continue;
            };
            if let Some(last) = recovery.emitted.last_emitted(&pool, &id).await {
                plan.drop_emitted(&id, last);
            }
        }
    }
    info!(
        shard,
        jobs = plan.len(),
        pending = plan.pending_fires(),
        verified,
        "shard scheduling"
    );
    plans.insert(shard, plan);
}

/// A pass is in: its shards' jobs go into the book, the feed's entries
/// that came meanwhile after them, and the shards still owned are planned.
async fn on_loaded(
    pass: ShardPass,
    held: &mut Held,
    revoker: &mut revoke::Revoker,
    recovery: &Recovery,
    now: DateTime<Utc>,
) {
    let ShardPass {
        pass,
        shards,
        jobs: loaded_jobs,
        read_to,
        took,
    } = pass;
    let loaded = held
        .holdings
        .loaded(pass, read_to, std::time::Instant::now());
    let mut of_pass = [false; shards::SHARDS as usize];
    for shard in &loaded {
        of_pass[shard.shard as usize] = true;
    }
    let mut jobs = 0;
    for job in loaded_jobs {
        if of_pass[shard_of(&job.id) as usize] {
            // Paused since this replica last held it: the feed's entry
            // saying so may come later, and is stale then.
            if job.paused {
                revoker.revoke(&job.id, "job paused before this fire", now);
            }
            held.book.insert_held(job);
            jobs += 1;
        }
    }
    info!(
        ?shards,
        jobs,
        read_to,
        took_ms = took.as_millis() as u64,
        "shards loaded"
    );
    for shard in loaded {
        for entry in shard.waiting {
            apply_entry(&entry, held, revoker, recovery.late_threshold, now);
        }
        if let Some(acquisition) = shard.plan_from {
            plan_shard(shard.shard, acquisition, held, recovery, now).await;
        }
    }
}

/// Let go of the jobs of shards owned elsewhere once ownership has stood
/// still for a while ([`holding`]).
fn drop_shards_owned_elsewhere(held: &mut Held) {
    let Held {
        book,
        plans,
        definitions,
        holdings,
    } = held;
    let dropped = holdings.to_drop(std::time::Instant::now(), |shard| {
        plans.contains_key(&shard)
    });
    if dropped.is_empty() {
        return;
    }
    let mut jobs = 0;
    for shard in &dropped {
        for job in book.drop_shard(*shard) {
            definitions.forget(&job.id);
            jobs += 1;
        }
    }
    // The jobs kept were allocated in among those dropped: moved, they
    // leave whole pages to give back.
    for shard in 0..shards::SHARDS {
        if holdings.holds(shard) {
            book.compact_shard(shard);
            if let Some(plan) = plans.get_mut(&shard) {
                plan.rehome(|job| book.get(&job.id).cloned());
            }
        }
    }
    jetcron_allocator::give_back_freed_memory();
    info!(
        shards = ?dropped,
        jobs,
        held = book.len(),
        "jobs of shards owned elsewhere dropped"
    );
}

fn on_job(
    event: FeedEvent,
    held: &mut Held,
    revoker: &mut revoke::Revoker,
    ready: &tokio::sync::watch::Sender<bool>,
    late_threshold: chrono::Duration,
    now: DateTime<Utc>,
) {
    match event {
        FeedEvent::Entry(entry) => match held.holdings.route(&entry) {
            Route::Apply => apply_entry(&entry, held, revoker, late_threshold, now),
            // The job is not held here (or not yet): fires this replica
            // stored ahead of a job paused or deleted are still killed.
            Route::Waiting | Route::NotHeld => revoke_if_stopped(&entry, revoker, now),
            // Older than what a pass read; if the key is not held now, the
            // job is gone, and a pause or delete still kills its fires.
            Route::Stale if held.book.get(&entry.key).is_none() => {
                revoke_if_stopped(&entry, revoker, now)
            }
            Route::Stale => {}
        },
        FeedEvent::Opened { keys } => {
            let Held { book, holdings, .. } = held;
            book.reserve(keys, |shard| holdings.holds(shard));
        }
        FeedEvent::Synced => {
            info!(jobs = held.book.len(), "job bucket loaded");
            held.holdings.synced(std::time::Instant::now());
            let _ = ready.send(true);
        }
    }
}

/// Apply an entry of a held shard: a valid job is held, a delete or an
/// invalid value unschedules its key.
fn apply_entry(
    entry: &JobEntry,
    held: &mut Held,
    revoker: &mut revoke::Revoker,
    late_threshold: chrono::Duration,
    now: DateTime<Utc>,
) {
    match &entry.written {
        Written::Valid(job) => hold_job(
            job,
            entry.revision,
            entry.written_at,
            held,
            revoker,
            late_threshold,
            now,
        ),
        // An invalid value is not a runnable job: its key is unscheduled.
        Written::Removed | Written::Invalid { .. } => {
            unschedule_job(&entry.key, held, revoker, now);
        }
        // Not decoded: a feed for chain indexes only, never the ticker's.
        Written::NotChained => {}
    }
}

/// Kill the fires stored ahead of a job `entry` pauses or deletes.
fn revoke_if_stopped(entry: &JobEntry, revoker: &mut revoke::Revoker, now: DateTime<Utc>) {
    match &entry.written {
        Written::Valid(job) if job.spec.paused => {
            revoker.revoke(&entry.key, "job paused before this fire", now);
        }
        Written::Removed | Written::Invalid { .. } => {
            revoker.revoke(&entry.key, "job deleted before this fire", now);
        }
        Written::Valid(_) | Written::NotChained => {}
    }
}

/// Hold `job` at `revision` (written at `defined_at`) and plan it if its
/// shard is owned; an older revision than the one held changes nothing.
fn hold_job(
    job: &ValidJob,
    revision: u64,
    defined_at: DateTime<Utc>,
    held: &mut Held,
    revoker: &mut revoke::Revoker,
    late_threshold: chrono::Duration,
    now: DateTime<Utc>,
) {
    let Held {
        book,
        plans,
        definitions,
        ..
    } = held;
    let id = job.spec.id.as_str();
    if book.get(id).is_some_and(|held| held.revision >= revision) {
        return;
    }
    debug!(job_id = %id, revision, schedule = %job.spec.schedule_line(), paused = job.spec.paused, "job definition seen");
    if job.spec.paused {
        revoker.revoke(id, "job paused before this fire", now);
    }
    let held = book.insert(job, revision, defined_at);
    // Written a moment ago (a slow watch, a loaded machine): the
    // times since the write fire late. Older writes are recovery's.
    let written_at = (now - defined_at <= late_threshold).then_some(defined_at);
    let next_fire = plans.get_mut(&shard_of(id)).and_then(|plan| {
        plan.upsert(Arc::clone(&held), written_at, now);
        plan.get(id).and_then(|planned| planned.next_fire())
    });
    definitions.keep_if_soon(&held.id, revision, &job.spec, next_fire, now);
}

/// Forget `job_id` (deleted, or its value no longer valid) and kill its
/// fires already handed out.
fn unschedule_job(
    job_id: &str,
    held: &mut Held,
    revoker: &mut revoke::Revoker,
    now: DateTime<Utc>,
) {
    debug!(job_id, "job deleted or invalid");
    revoker.revoke(job_id, "job deleted before this fire", now);
    held.definitions.forget(job_id);
    held.book.remove(job_id);
    if let Some(plan) = held.plans.get_mut(&shard_of(job_id)) {
        if plan.remove(job_id) {
            info!(job_id = %job_id, "job unscheduled");
        }
    }
}

/// Take the earliest due fires of the shards this replica may publish for;
/// each shard contributes its share, so one batch stays bounded however many
/// fires are due at once (at most `limit` plus one per shard).
fn take_due_fires(
    plans: &mut HashMap<u32, FirePlan>,
    leases: &Leases,
    now: DateTime<Utc>,
    limit: usize,
) -> Vec<plan::Fire> {
    let per_shard = limit / plans.len().max(1) + 1;
    let mut fires: Vec<plan::Fire> = plans
        .iter_mut()
        .filter(|(shard, _)| leases.is_valid(**shard))
        .flat_map(|(_, plan)| plan.take_due(now, per_shard))
        .collect();
    fires.sort_by_key(|f| (f.fire_at, f.scheduled_at));
    fires
}

/// Apply a batch's acks to the plans; returns how many were not stored.
/// Record which fires were stored; returns how many were not. Metrics:
/// `jetcron_fires_total`, `jetcron_fire_publish_failures_total` and
/// `jetcron_fire_lag_seconds` (stored minus meant-to-publish instant).
fn settle(
    plans: &mut HashMap<u32, FirePlan>,
    fires: &[plan::Fire],
    stored: &[bool],
    now: DateTime<Utc>,
) -> usize {
    let mut failed = 0;
    let lag = metrics::histogram!("jetcron_fire_lag_seconds");
    for (fire, ok) in fires.iter().zip(stored.iter().copied()) {
        let Some(plan) = plans.get_mut(&shard_of(&fire.job.id)) else {
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
        plans, definitions, ..
    } = held;
    for (fire, resolved) in fires.iter().zip(resolved) {
        let next = plans
            .get(&shard_of(&fire.job.id))
            .and_then(|plan| plan.get(&fire.job.id))
            .and_then(plan::PlannedJob::next_fire);
        definitions.settled(fire, resolved, next, now);
    }
}

/// The fires (with their definitions) of shards whose lease is still
/// valid; the others go back to their plans untouched.
fn still_leased(
    plans: &mut HashMap<u32, FirePlan>,
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
        } else if let Some(plan) = plans.get_mut(&shard) {
            plan.unfired(&fire);
        }
    }
    kept
}

fn record_watermarks(plans: &HashMap<u32, FirePlan>, leases: &Leases, now: DateTime<Utc>) {
    for (shard, plan) in plans {
        leases.set_watermark(*shard, plan.watermark(now));
    }
}
