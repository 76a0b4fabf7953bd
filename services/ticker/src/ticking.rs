//! The ticker as a running service: [`run`] makes or verifies its topology,
//! starts a [`Ticker`] (its job watch, its lease rounds, its book of
//! plans), turns the loop until the stop, and stops it in order.
//!
//! Each pass of the loop applies what arrived (ownership changes first, then
//! job changes and loaded shards), sends the next batch of due fires while
//! earlier batches' acks are on their way, settles the oldest batch, plans
//! one queued shard when every fire within the lookahead is out, and
//! otherwise waits for news or the next fire.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, kv, stream};
use jetcron_core::clock::Clock;
use jetcron_io::job_feed::FeedEvent;
use jetcron_io::policy_book::PolicyBook;
use jetcron_io::tasks::{ServiceTasks, TaskKind};
use jetcron_io::topology::{self, Need, TopologyOptions};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{info, warn};

use crate::batches::{
    done, record_watermarks, settle, settle_oldest, still_leased, take_due_fires, InFlight,
    PublishHealth,
};
use crate::book::Book;
use crate::load::ShardPass;
use crate::ownership::{Leases, Ownership, ReplicaLeasing};
use crate::replica_changes::{self, Held, Loader, Recovery};
use crate::shard_holdings::Holdings;
use crate::tidy::{self, Tidying};
use crate::{
    plan_queue, publish, revoke, snapshot_coverage, snapshot_store, verify, watch as job_watch,
    TickerConfig, MAX_BATCH, MAX_IDLE, PIPELINE, PLAN_AT_LEAST_EVERY, PUBLISH_RETRY,
    REVOCATION_QUEUE, SNAPSHOTS_AT_STOP_WITHIN,
};

/// The streams and buckets a ticker needs beside its own lease bucket,
/// made or verified in this order.
const TOPOLOGY: &[Need] = &[
    Need::JobsBucket,
    Need::DueStream,
    Need::RunsStream,
    Need::RunningBucket,
    Need::PoliciesBucket,
];

/// Run the ticker until `shutdown` is cancelled.
pub async fn run(
    config: TickerConfig,
    client: async_nats::Client,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let tjs = topology::context(client.clone());
    let js = jetstream::new(client);
    let Some(parts) = TickerTopology::ensure(&config, &tjs, &shutdown).await? else {
        return Ok(());
    };
    let mut ticker = Ticker::start(&config, js, clock, parts, &tjs, &shutdown).await?;
    info!(replica_id = %config.replica_id, lookahead_ms = config.lookahead.as_millis() as u64, "ticker started");
    ticker.turn_until(&shutdown).await;
    ticker.stop().await
}

/// What a ticker works with of the topology, once made or verified.
struct TickerTopology {
    jobs: kv::Store,
    due_stream: stream::Stream,
    running: kv::Store,
    policies: kv::Store,
    ticker_bucket: kv::Store,
}

impl TickerTopology {
    /// Make or verify the ticker's streams and buckets (its lease bucket
    /// through the lease thread's connection when it has one); `None` when
    /// the stop came first.
    async fn ensure(
        config: &TickerConfig,
        tjs: &jetstream::Context,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Option<Self>> {
        let wanted = &config.topology;
        let mut converging =
            topology::Converging::start(jetcron_io::readiness::TICKER, &config.readiness, shutdown);
        let Some(ensured) = converging.ensure_needs(tjs, wanted, TOPOLOGY).await? else {
            return Ok(None);
        };
        let lease_js = config
            .lease_thread
            .as_ref()
            .map(|own| topology::context(own.client.clone()));
        let Some(ticker_bucket) = converging
            .ensure(|| topology::ensure_ticker_bucket(lease_js.as_ref().unwrap_or(tjs), wanted))
            .await?
        else {
            return Ok(None);
        };
        converging.ready();
        Ok(Some(Self {
            jobs: ensured.bucket(Need::JobsBucket)?,
            due_stream: ensured.stream(Need::DueStream)?,
            running: ensured.bucket(Need::RunningBucket)?,
            policies: ensured.bucket(Need::PoliciesBucket)?,
            ticker_bucket,
        }))
    }
}

/// A running ticker: its book of plans and what feeds it.
struct Ticker {
    js: jetstream::Context,
    clock: Arc<dyn Clock>,
    batch_size: usize,
    lookahead: chrono::Duration,
    held: Held,
    leases: Leases,
    recovery: Recovery,
    loader: Loader,
    revoker: revoke::Revoker,
    health: PublishHealth,
    in_flight: VecDeque<InFlight>,
    last_planning: std::time::Instant,
    /// Told once this replica's shards are loaded (the lease rounds wait).
    ready: watch::Sender<bool>,
    job_changes: mpsc::Receiver<FeedEvent>,
    ownership_changes: mpsc::Receiver<crate::ownership::OwnershipChange>,
    passes: mpsc::Receiver<ShardPass>,
    snapshot_coverage: watch::Receiver<bool>,
    feeds: Feeds,
}

/// The tasks that feed a ticker, stopped after its loop.
struct Feeds {
    watcher: JoinHandle<anyhow::Result<()>>,
    watch_stop: CancellationToken,
    owner_task: JoinHandle<anyhow::Result<()>>,
    ownership_stop: CancellationToken,
    /// However the ticker ends (a later step of the start failing too),
    /// the lease rounds stop: they may run on another runtime.
    _stop_ownership: DropGuard,
    revoker_task: JoinHandle<()>,
    tasks: ServiceTasks,
}

impl Ticker {
    /// Start the job watch, the clock check, the lease rounds and the
    /// revoker, and preload the shards from their snapshots.
    async fn start(
        config: &TickerConfig,
        js: jetstream::Context,
        clock: Arc<dyn Clock>,
        parts: TickerTopology,
        tjs: &jetstream::Context,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Self> {
        let definitions = crate::definitions::Definitions::new(
            tjs.get_stream_no_info(&parts.jobs.stream_name).await?,
            config.keep_definitions_for,
            config.lines.clone(),
        );
        let snapshot_store = if config.snapshot_every.is_zero() {
            None
        } else {
            open_snapshot_store(tjs, &config.topology, &parts.jobs).await
        };
        let mut tasks = ServiceTasks::default();
        let policies = follow_policies(&mut tasks, parts.policies, shutdown).await;
        let watch_stop = CancellationToken::new();
        let (job_tx, job_changes) = mpsc::channel(jetcron_io::job_feed::READER_EVENTS);
        let watcher = tokio::spawn(job_watch::watch_jobs(
            config.jobs_feed.subscribe(&js.client(), &config.lines),
            js.clone(),
            policies,
            job_tx,
            watch_stop.clone(),
        ));
        let (check, check_js, stop) = (
            config.clock_check.clone(),
            js.clone(),
            tasks.background_stop(),
        );
        tasks.spawn(TaskKind::Background, "clock check", async move {
            let due = jetcron_core::subjects::DUE_STREAM.to_string();
            check.follow(check_js, due, stop).await;
            Ok(())
        });
        let leases = Leases::with_clock_check(config.clock_check.clone());
        let (ready, ready_rx) = watch::channel(false);
        let (own_tx, ownership_changes) = mpsc::channel(64);
        let replica = ReplicaLeasing {
            replica_id: config.replica_id.clone(),
            options: config.leases,
            lookahead: config.lookahead,
        };
        let ownership = Ownership::new(
            parts.ticker_bucket,
            replica,
            Arc::clone(&clock),
            leases.clone(),
            own_tx,
        );
        let ownership_stop = CancellationToken::new();
        let rounds = ownership.run(ready_rx, ownership_stop.clone());
        let stop_ownership = ownership_stop.clone().drop_guard();
        let owner_task = match &config.lease_thread {
            Some(own) => own.runtime.spawn(rounds),
            None => tokio::spawn(rounds),
        };
        let recovery = recovery(config, &parts.due_stream, &js).await?;
        let held = Held {
            book: Book::default(),
            definitions,
            // Two TTLs without an ownership change: a cold start's
            // rebalancing is over.
            holdings: Holdings::new(config.leases.ttl * 2, std::time::Instant::now()),
            tidying: Tidying::default(),
            to_plan: plan_queue::PlanQueue::default(),
            leases: leases.clone(),
            snapshots: snapshot_store::SnapshotWriter::new(
                snapshot_store.clone(),
                config.snapshot_every,
            ),
        };
        let snapshot_coverage =
            snapshot_coverage::follow(snapshot_store.clone(), watch_stop.child_token());
        let (passes_tx, passes) = mpsc::channel::<ShardPass>(4);
        let loader = Loader {
            client: js.client(),
            lines: config.lines.clone(),
            snapshots: snapshot_store,
            done: passes_tx,
            stop: watch_stop.child_token(),
        };
        let (revoke_tx, revoke_rx) = mpsc::channel(REVOCATION_QUEUE);
        let revoker_task = tokio::spawn(revoke::kill_revoked(
            parts.running,
            revoke_rx,
            clock.clone(),
        ));
        let revoker = revoke::Revoker::new(revoke_tx, !config.lookahead.is_zero());
        let mut ticker = Ticker {
            js,
            clock,
            batch_size: config.batch_size,
            lookahead: chrono::Duration::from_std(config.lookahead).unwrap_or_default(),
            held,
            leases,
            recovery,
            loader,
            revoker,
            health: PublishHealth::default(),
            in_flight: VecDeque::new(),
            last_planning: std::time::Instant::now(),
            ready,
            job_changes,
            ownership_changes,
            passes,
            snapshot_coverage,
            feeds: Feeds {
                watcher,
                watch_stop,
                owner_task,
                ownership_stop,
                _stop_ownership: stop_ownership,
                revoker_task,
                tasks,
            },
        };
        ticker.preload(&parts.jobs).await;
        Ok(ticker)
    }

    /// Take shards from their snapshots when there are: at once, not after
    /// the feed's read of the whole bucket (which waits for this ticker
    /// meanwhile, its queue full).
    async fn preload(&mut self, jobs: &kv::Store) {
        let keys = usize::try_from(jobs.stream.cached_info().state.subjects_count).unwrap_or(0);
        let now = self.clock.now();
        if replica_changes::preload(&mut self.held, &self.loader, keys, &mut self.revoker, now)
            .await
        {
            let _ = self.ready.send(true);
        }
    }

    /// The loop, until `shutdown`.
    async fn turn_until(&mut self, shutdown: &CancellationToken) {
        loop {
            self.apply_arrivals().await;
            // Fires are taken `lookahead` before their publish instant.
            let horizon = self.clock.now() + self.lookahead;
            if self.send_next_batch(horizon).await {
                continue;
            }
            match self.settle_oldest_batch(shutdown).await {
                Some(true) => break,
                Some(false) => continue,
                None => {}
            }
            record_watermarks(&self.held.book, &self.leases, horizon);
            if self.plan_next_shard().await {
                continue;
            }
            if self.wait_for_news(horizon, shutdown).await {
                break;
            }
        }
    }

    /// Apply what arrived without waiting. Ownership first: a shard just
    /// acquired is not dropped as owned elsewhere.
    async fn apply_arrivals(&mut self) {
        self.apply_ownership_changes();
        while let Ok(change) = self.job_changes.try_recv() {
            self.on_job(change).await;
        }
        while let Ok(pass) = self.passes.try_recv() {
            self.on_loaded(pass);
        }
        if *self.snapshot_coverage.borrow() {
            self.held.holdings.every_shard_snapshotted();
        }
        replica_changes::drop_shards_owned_elsewhere(&mut self.held);
        self.held
            .tidying
            .step(&mut self.held.book, tidy::STEP_BUDGET);
        // Every ownership change at once, and again last before taking
        // fires (planning a shard, a pass applied or a step of letting go
        // above may have taken a while): a shard lost and granted again
        // must not be fired from its old plan (or its old watermark
        // recorded) in between.
        self.apply_ownership_changes();
        if !self.held.book.has_plans() {
            self.health.clear(&self.leases);
        }
    }

    fn apply_ownership_changes(&mut self) {
        while let Ok(change) = self.ownership_changes.try_recv() {
            replica_changes::on_ownership(change, &mut self.held, &self.loader, self.clock.now());
        }
    }

    async fn on_job(&mut self, change: FeedEvent) {
        let now = self.clock.now();
        let Ticker {
            held,
            revoker,
            ready,
            recovery,
            ..
        } = self;
        replica_changes::on_job(change, held, revoker, ready, recovery, now).await;
    }

    fn on_loaded(&mut self, pass: ShardPass) {
        let now = self.clock.now();
        replica_changes::on_loaded(pass, &mut self.held, &mut self.revoker, &self.recovery, now);
    }

    /// Keep the server fed: send the next batch of fires due by `horizon`
    /// while earlier batches' acks are on their way (at most `PIPELINE`
    /// batches in flight); whether fires were taken.
    async fn send_next_batch(&mut self, horizon: chrono::DateTime<chrono::Utc>) -> bool {
        // A queued shard is planned once every fire due within the lookahead
        // is out and settled. When a second passes without such a moment,
        // no fire is taken until what is in flight is settled, so a load
        // that always has fires due still gets its shards planned.
        let planning_overdue =
            !self.held.to_plan.is_empty() && self.last_planning.elapsed() >= PLAN_AT_LEAST_EVERY;
        if self.in_flight.len() >= PIPELINE || planning_overdue {
            return false;
        }
        let batch = self.batch_size.clamp(1, MAX_BATCH / PIPELINE);
        let fires = take_due_fires(&mut self.held.book, &self.leases, horizon, batch);
        if fires.is_empty() {
            return false;
        }
        let resolved = self.held.definitions.resolve(&fires).await;
        // Reading back took time: publish only for shards still held.
        let (fires, resolved) = still_leased(&mut self.held.book, &self.leases, fires, resolved);
        if !fires.is_empty() {
            let acks = publish::send_batch(&self.js, &fires, &resolved, self.clock.now()).await;
            self.in_flight.push_back((fires, resolved, acks));
        }
        true
    }

    /// Settle the oldest batch in flight, if there is one: `Some(stop)`
    /// when one was, where a batch of which nothing was stored waits before
    /// its fires are offered again.
    async fn settle_oldest_batch(&mut self, shutdown: &CancellationToken) -> Option<bool> {
        let settled = settle_oldest(
            &mut self.in_flight,
            &mut self.held,
            &mut self.revoker,
            &self.leases,
            self.lookahead,
            self.clock.as_ref(),
        )
        .await?;
        if settled.all_failed() {
            self.health.failed(&self.leases, settled.failed);
            tokio::select! {
                _ = shutdown.cancelled() => return Some(true),
                _ = tokio::time::sleep(jetcron_io::retry::jittered(PUBLISH_RETRY)) => {}
            }
        } else {
            // Some were stored: the path to the stream works; the rest are
            // offered again at once.
            self.health.stored(&self.leases);
        }
        Some(shutdown.is_cancelled())
    }

    /// Every fire due within the lookahead is out and settled (or planning
    /// is overdue and what was in flight is settled): plan one queued shard
    /// now; whether there was one. Planning one holds this loop (0.2 s at
    /// ten million jobs, a second before shards were planned in place),
    /// which the lookahead covers. Planned before the fires were out, a job
    /// due every second got one fire out per shard planned and fell behind
    /// (a canary was called 2-4 s late while the shards of a cold start
    /// were planned). A shard counts as planned at once (a replica above
    /// its share hands on an unplanned one first); its watermark is
    /// recorded once the changes of its jobs that came while it was planned
    /// are applied, in the next pass.
    async fn plan_next_shard(&mut self) -> bool {
        if self.held.to_plan.is_empty() {
            return false;
        }
        replica_changes::plan_next(&mut self.held, &self.recovery, self.clock.now()).await;
        self.last_planning = std::time::Instant::now();
        true
    }

    /// Nothing due within the lookahead, no shard to plan: write a changed
    /// shard's snapshot, then wait for news (ownership, jobs, a loaded
    /// shard) or the next fire; whether to stop.
    async fn wait_for_news(
        &mut self,
        horizon: chrono::DateTime<chrono::Utc>,
        shutdown: &CancellationToken,
    ) -> bool {
        self.held.snapshots.step(&self.held.book);
        // Letting go of dropped jobs goes on at once, between fires.
        let idle = if self.held.tidying.is_idle() && self.held.to_plan.is_empty() {
            self.held
                .book
                .plans()
                .filter_map(|(_, plan)| plan.next_fire_at())
                .min()
                .and_then(|at| (at - horizon).to_std().ok())
                .map_or(MAX_IDLE, |d| d.min(MAX_IDLE))
        } else {
            Duration::ZERO
        };
        tokio::select! {
            _ = shutdown.cancelled() => return true,
            change = self.ownership_changes.recv() => {
                if let Some(change) = change {
                    replica_changes::on_ownership(change, &mut self.held, &self.loader, self.clock.now());
                }
            }
            change = self.job_changes.recv() => match change {
                Some(change) => self.on_job(change).await,
                None => return true,
            },
            Some(pass) = self.passes.recv() => self.on_loaded(pass),
            _ = tokio::time::sleep(idle) => {}
        }
        false
    }

    /// Settle what is in flight, record final watermarks and write the
    /// changed shards' snapshots, then stop the revoker, the lease rounds
    /// (releasing the shards so a standby resumes at once) and the watch.
    async fn stop(mut self) -> anyhow::Result<()> {
        while let Some((fires, resolved, acks)) = self.in_flight.pop_front() {
            let stored = publish::collect_acks(acks, publish::ACK_DEADLINE).await;
            let now = self.clock.now();
            settle(&mut self.held.book, &fires, &done(&stored, &resolved), now);
        }
        let horizon = self.clock.now() + self.lookahead;
        record_watermarks(&self.held.book, &self.leases, horizon);
        // While the shards are still held here: their next owner reads them
        // from snapshots with nothing after them to replay.
        self.held
            .snapshots
            .write_changed_before_stop(&self.held.book, SNAPSHOTS_AT_STOP_WITHIN)
            .await;
        let Ticker {
            revoker,
            ownership_changes,
            feeds,
            held,
            ..
        } = self;
        drop(revoker);
        let _ = tokio::time::timeout(Duration::from_secs(5), feeds.revoker_task).await;
        feeds.ownership_stop.cancel();
        feeds.watch_stop.cancel();
        // A change the ownership task is still sending fails at once.
        drop(ownership_changes);
        feeds
            .owner_task
            .await
            .context("join ownership")?
            .context("ownership")?;
        feeds
            .watcher
            .await
            .context("join job watcher")?
            .context("job watcher")?;
        feeds.tasks.stop(Duration::from_secs(5)).await;
        info!(jobs = held.book.len(), "ticker stopped");
        Ok(())
    }
}

/// How the ticker recovers fires missed while no replica held their shard.
async fn recovery(
    config: &TickerConfig,
    due_stream: &stream::Stream,
    js: &jetstream::Context,
) -> anyhow::Result<Recovery> {
    Ok(Recovery {
        late_threshold: chrono::Duration::from_std(config.late_threshold).unwrap_or_default(),
        // Beyond this age a republished fire may outlive JetStream's dedup
        // memory (the window of the stream as it exists, with a margin).
        dedup_horizon: {
            let window =
                chrono::Duration::from_std(due_stream.cached_info().config.duplicate_window)
                    .unwrap_or_default();
            window - (window / 2).min(chrono::Duration::seconds(30))
        },
        emitted: verify::EmittedFires::open(js).await?,
    })
}

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

/// Follow the target policies (a background task of `tasks`) and wait for
/// their first read (or the stop), so that no definition is checked
/// before it.
async fn follow_policies(
    tasks: &mut ServiceTasks,
    bucket: kv::Store,
    shutdown: &CancellationToken,
) -> Arc<PolicyBook> {
    let book = Arc::new(PolicyBook::default());
    let (followed, stop) = (book.clone(), tasks.background_stop());
    tasks.spawn(TaskKind::Background, "target policies", async move {
        followed.follow(&bucket, &stop).await;
        Ok(())
    });
    tokio::select! {
        _ = book.loaded() => {}
        _ = shutdown.cancelled() => {}
    }
    book
}
