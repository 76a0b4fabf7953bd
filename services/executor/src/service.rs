//! The executor as a running service: its topology (declared as data),
//! the context its attempts share, its helpers (background tasks), one pull
//! loop per pool until the stop ([`crate::pulling`]), then its attempts
//! drained within the grace and its helpers stopped.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::pull, kv};
use jetcron_core::clock::Clock;
use jetcron_core::{job, subjects};
use jetcron_io::tasks::{ServiceTasks, TaskKind};
use jetcron_io::topology::{self, Need};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::fair_slots::FairSlots;
use crate::pulling::{deadlines, pull_loop, PoolPull, PullStops};
use crate::running::RunningAttempts;
use crate::{
    ack_replies, alerting, chains, completion_reports, instant_calls, kill_markers, running,
    runs_pulse, ExecutorConfig, ExecutorContext, PULL_BATCH,
};

/// The streams and buckets an executor needs, made or verified in this
/// order. (The jobs bucket is read through the process's job feed, once it
/// exists.)
const TOPOLOGY: &[Need] = &[
    Need::DueStream,
    Need::RunsStream,
    Need::JobsBucket,
    Need::NotifyStream,
    Need::RunningBucket,
    Need::IncidentsBucket,
    Need::ChannelsBucket,
    Need::PoliciesBucket,
];

/// Run the executor until `shutdown` is cancelled: its topology, its
/// context, its helpers, then one pull loop per pool until the stop, its
/// attempts drained within the grace, and its helpers stopped.
pub async fn run(
    config: ExecutorConfig,
    client: async_nats::Client,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let pools = served_pools(&config)?;
    let Some(topology) = ExecutorTopology::ensure(&config, &client, &pools, &shutdown).await?
    else {
        return Ok(());
    };
    let (ctx, feeds) = context(config, client, clock, &topology).await?;
    let ctx = Arc::new(ctx);
    let mut tasks = ServiceTasks::default();
    let helpers = Helpers {
        feeds,
        notifier: topology.notifier,
        chain_ends: topology.chain_ends,
        runs: topology.runs,
    };
    spawn_helpers(&ctx, &mut tasks, helpers, &shutdown);
    let policies = topology.policies.clone();
    let (c, s) = (ctx.clone(), tasks.background_stop());
    tasks.spawn(TaskKind::Background, "target policies", async move {
        c.policies.follow(&policies, &s).await;
        Ok(())
    });
    // No fire is checked against a policy before every policy is read.
    tokio::select! {
        _ = ctx.policies.loaded() => {}
        _ = shutdown.cancelled() => {}
    }
    info!(executor_id = %ctx.config.executor_id, ?pools, max_in_flight = ctx.config.max_in_flight, shell = ctx.config.shell.enabled, "executor started");
    pull_until_stopped(&ctx, &tasks, topology.consumers, &shutdown).await;
    drain(&ctx, &tasks).await;
    tasks.stop(Duration::from_secs(5)).await;
    // Acks are sent unconfirmed: let the last ones leave before the
    // process does.
    let _ = tokio::time::timeout(Duration::from_secs(5), ctx.nats.flush()).await;
    info!("executor stopped");
    Ok(())
}

/// The pools of `config`, each once, checked.
fn served_pools(config: &ExecutorConfig) -> anyhow::Result<Vec<String>> {
    let mut pools = config.pools.clone();
    pools.sort();
    pools.dedup();
    anyhow::ensure!(
        !pools.is_empty(),
        "an executor must serve at least one pool"
    );
    for pool in &pools {
        job::validate_token("pool", pool)
            .map_err(|e| anyhow::anyhow!("pool {pool:?}: {}", e.message))?;
    }
    // Each pool's loop reserves an intake permit for its open pull request
    // (so that a pulled event never waits in a buffer): with fewer than
    // pools, an idle pool's request held the only one for its whole
    // expiry, and a busy pool ran one event every few seconds.
    anyhow::ensure!(
        config.max_pulled() >= pools.len(),
        "--max-pulled {} is fewer than the {} pools served ({}): each pool's waiting pull reserves a permit, so give at least one per pool",
        config.max_pulled(),
        pools.len(),
        pools.join(", ")
    );
    anyhow::ensure!(
        config.max_in_flight >= 1,
        "--max-in-flight is 0: no target could ever be called"
    );
    Ok(pools)
}

/// What an executor works with of the topology, once made or verified.
struct ExecutorTopology {
    runs: jetstream::stream::Stream,
    running: kv::Store,
    incidents: kv::Store,
    channels: kv::Store,
    policies: kv::Store,
    /// Each pool's durable consumer.
    consumers: Vec<(String, jetstream::consumer::PullConsumer)>,
    notifier: jetstream::consumer::PullConsumer,
    /// `None` until a job names a parent (chains module docs).
    chain_ends: Option<jetstream::consumer::PullConsumer>,
}

impl ExecutorTopology {
    /// Make or verify the executor's streams, buckets and consumers; `None`
    /// when the stop came first.
    async fn ensure(
        config: &ExecutorConfig,
        client: &async_nats::Client,
        pools: &[String],
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Option<Self>> {
        let tjs = topology::context(client.clone());
        let mut converging = topology::Converging::start(
            jetcron_io::readiness::EXECUTOR,
            &config.readiness,
            shutdown,
        );
        let Some(ensured) = converging
            .ensure_needs(&tjs, &config.topology, TOPOLOGY)
            .await?
        else {
            return Ok(None);
        };
        let due = ensured.stream(Need::DueStream)?;
        let runs = ensured.stream(Need::RunsStream)?;
        let notify = ensured.stream(Need::NotifyStream)?;
        let mut consumers = Vec::new();
        for pool in pools {
            let Some(consumer) = converging
                .ensure(|| pool_consumer(&due, pool, config))
                .await?
            else {
                return Ok(None);
            };
            consumers.push((pool.clone(), consumer));
        }
        let Some(notifier) = converging
            .ensure(|| alerting::notifications::notifier_consumer(&notify))
            .await?
        else {
            return Ok(None);
        };
        // Made by the first executor that sees a chained job (chains module docs).
        let Some(chain_ends) = converging
            .ensure(|| chains::existing_chains_consumer(&runs))
            .await?
        else {
            return Ok(None);
        };
        converging.ready();
        Ok(Some(Self {
            runs,
            running: ensured.bucket(Need::RunningBucket)?,
            incidents: ensured.bucket(Need::IncidentsBucket)?,
            channels: ensured.bucket(Need::ChannelsBucket)?,
            policies: ensured.bucket(Need::PoliciesBucket)?,
            consumers,
            notifier,
            chain_ends,
        }))
    }
}

/// What the context's helpers read: completion reports, the calls booked
/// for their instants, and the answers of keep-alives.
struct ContextFeeds {
    completion_reports: async_nats::Subscriber,
    booked_calls: instant_calls::BookedCalls,
    ack_answers: async_nats::Subscriber,
}

/// The context every attempt shares, and what its helpers read.
async fn context(
    config: ExecutorConfig,
    client: async_nats::Client,
    clock: Arc<dyn Clock>,
    topology: &ExecutorTopology,
) -> anyhow::Result<(ExecutorContext, ContextFeeds)> {
    let http = reqwest::Client::builder()
        .user_agent(concat!("jetcron/", env!("CARGO_PKG_VERSION")))
        .build()
        .context("build HTTP client")?;
    let calls = config
        .calls_client
        .clone()
        .unwrap_or_else(|| client.clone());
    let completion_reports = completion_reports::CompletionReports::subscribe(&client).await?;
    let (instant_calls, booked_calls) = instant_calls::InstantCalls::new(&calls).await?;
    let (ack_replies, ack_answers) = ack_replies::AckReplies::subscribe(&client).await?;
    let kill_markers =
        kill_markers::KillMarkers::keeping_for(config.topology.running_max_age, clock.clone());
    let ctx = ExecutorContext {
        config,
        js: jetstream::new(client.clone()),
        nats: client,
        calls,
        http,
        running: topology.running.clone(),
        incidents: topology.incidents.clone(),
        channels: topology.channels.clone(),
        attempts: Arc::new(RunningAttempts::default()),
        interrupt: CancellationToken::new(),
        clock,
        kill_markers,
        completions: Default::default(),
        instant_calls,
        runs_pulse: runs_pulse::RunsPulse::default(),
        ack_replies,
        policies: Arc::default(),
        namespace_slots: Arc::default(),
    };
    let feeds = ContextFeeds {
        completion_reports,
        booked_calls,
        ack_answers,
    };
    Ok((ctx, feeds))
}

/// What the executor's helpers start from.
struct Helpers {
    feeds: ContextFeeds,
    notifier: jetstream::consumer::PullConsumer,
    chain_ends: Option<jetstream::consumer::PullConsumer>,
    runs: jetstream::stream::Stream,
}

/// Start the tasks that serve the attempts: the kill listener and the kill
/// markers' follower, the clock check, completion reports, the instant
/// calls' dispatcher and the chain index (stopped once the attempts are
/// drained), and the notifier and chain starter (which stop with
/// `shutdown`).
fn spawn_helpers(
    ctx: &Arc<ExecutorContext>,
    tasks: &mut ServiceTasks,
    helpers: Helpers,
    shutdown: &CancellationToken,
) {
    use TaskKind::Background;
    let stop = tasks.background_stop();
    let kills = running::listen_for_kills(
        ctx.nats.clone(),
        ctx.attempts.clone(),
        ctx.config.executor_id.clone(),
        stop.clone(),
    );
    tasks.spawn(Background, "kill listener", kills);
    let notifier =
        alerting::notifications::deliver(ctx.clone(), helpers.notifier, shutdown.clone());
    tasks.spawn(Background, "notifier", notifier);
    let (c, s) = (ctx.clone(), stop.clone());
    tasks.spawn(Background, "kill markers", async move {
        c.kill_markers.follow(&c.running, &s).await;
        Ok(())
    });
    let (c, s) = (ctx.clone(), stop.clone());
    tasks.spawn(Background, "namespace run slots", async move {
        c.namespace_slots.follow(&c.running, &s).await;
        Ok(())
    });
    let (check, js, s) = (ctx.config.clock_check.clone(), ctx.js.clone(), stop.clone());
    tasks.spawn(Background, "clock check", async move {
        check.follow(js, subjects::DUE_STREAM.to_string(), s).await;
        Ok(())
    });
    let (c, s, answers) = (ctx.clone(), stop.clone(), helpers.feeds.ack_answers);
    tasks.spawn(Background, "keep-alive answers", async move {
        c.ack_replies.route(answers, s).await;
        Ok(())
    });
    let (c, s, reports) = (ctx.clone(), stop.clone(), helpers.feeds.completion_reports);
    tasks.spawn(Background, "completion reports", async move {
        c.completions.route(reports, s).await;
        Ok(())
    });
    // Outside tokio's cooperative budget, so that the calls of one instant
    // go out in one go rather than 128 at a time between other tasks.
    let dispatch = instant_calls::dispatch(ctx.clone(), helpers.feeds.booked_calls, stop.clone());
    tasks.spawn(Background, "instant calls", async move {
        tokio::task::unconstrained(dispatch).await;
        Ok(())
    });
    let chain_index = Arc::new(chains::index::ChainIndex::default());
    let feed = ctx
        .config
        .jobs_feed
        .subscribe(&ctx.js.client(), &ctx.config.lines);
    let (index, s) = (chain_index.clone(), stop);
    tasks.spawn(Background, "chain index", async move {
        index.follow(feed, s).await;
        Ok(())
    });
    let starter = chains::start_children(
        ctx.clone(),
        chain_index,
        helpers.chain_ends,
        helpers.runs,
        shutdown.clone(),
    );
    tasks.spawn(Background, "chain starter", starter);
}

/// One pull loop per pool until `shutdown`, their attempts spawned as the
/// service's drained work; the fires held are handed back once every loop
/// ended.
async fn pull_until_stopped(
    ctx: &Arc<ExecutorContext>,
    tasks: &ServiceTasks,
    consumers: Vec<(String, jetstream::consumer::PullConsumer)>,
    shutdown: &CancellationToken,
) {
    let max_pulled = ctx.config.max_pulled();
    let permits = Arc::new(Semaphore::new(max_pulled));
    let slots = FairSlots::new(
        ctx.config.max_in_flight,
        ctx.config.slot_reserve(),
        ctx.config.slot_sharing,
    );
    let pullers = TaskTracker::new();
    // Held fires are handed back at a shutdown only once every pull loop has
    // ended, having read its open pull request to its end: a request still
    // open at the server took fires handed back, to be lost with this
    // process until `ack_wait`.
    let hand_back = CancellationToken::new();
    // Each pool's batch reserves at most its share of the free intake, so an
    // idle pool's open pull request never holds the permits another pool needs.
    let share = (max_pulled / consumers.len()).clamp(1, PULL_BATCH);
    for (pool, consumer) in consumers {
        pullers.spawn(pull_loop(
            ctx.clone(),
            PoolPull {
                pool,
                consumer,
                max_batch: share,
            },
            permits.clone(),
            slots.clone(),
            tasks.drained().clone(),
            PullStops {
                pulling: shutdown.clone(),
                hand_back: hand_back.clone(),
            },
        ));
    }
    pullers.close();
    pullers.wait().await;
    hand_back.cancel();
}

/// Let the attempts in flight finish within the shutdown grace; past it,
/// interrupt them (they hand their fires back) and wait a little more.
async fn drain(ctx: &ExecutorContext, tasks: &ServiceTasks) {
    info!(in_flight = tasks.draining(), "executor stopping");
    if tasks.drain(ctx.config.shutdown_grace).await {
        return;
    }
    warn!(
        in_flight = tasks.draining(),
        "grace period over, handing unfinished attempts back"
    );
    ctx.interrupt.cancel();
    if !tasks.drain(Duration::from_secs(10)).await {
        warn!(
            in_flight = tasks.draining(),
            "attempts did not hand back in time; JetStream redelivers them after ack_wait"
        );
    }
}

/// The durable consumer of one pool, with this executor's ack waits (an
/// older consumer's are changed to them: the default went from 30 s to the
/// lookahead and 3 s, and redeliveries have a shorter one).
async fn pool_consumer(
    stream: &jetstream::stream::Stream,
    pool: &str,
    config: &ExecutorConfig,
) -> topology::Result<jetstream::consumer::PullConsumer> {
    let name = subjects::executor_consumer(pool);
    let wanted = pull::Config {
        durable_name: Some(name),
        description: Some(format!("jetcron executors of pool {pool}")),
        filter_subject: subjects::due_pool_filter(pool),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: config.ack_wait,
        backoff: deadlines(config).backoff(),
        max_deliver: -1,
        max_ack_pending: 10_000,
        ..Default::default()
    };
    topology::ensure_consumer_acking_within(stream, wanted).await
}
