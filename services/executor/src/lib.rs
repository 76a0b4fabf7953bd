//! The executor: pulls due events from `JETCRON_DUE` (durable consumer
//! `executor-default`), runs their target, and records every step as a run
//! event in `JETCRON_RUNS`.
//!
//! Executors are stateless: any number may share the consumer, JetStream hands
//! each due event to one of them, and retries are JetStream redeliveries (a nak
//! with a delay), so a crashed executor's work comes back after `ack_wait`.
//! In-flight work is bounded by a semaphore; shutdown stops pulling and lets
//! in-flight attempts finish within a grace period.
//!
//! Each executor serves the pools it is started with (durable consumer
//! `executor-<pool>` on `jetcron.due.<pool>.>`), hears kill requests on
//! `jetcron.control.kill.*`, takes overlap claims in `jetcron_running`, and
//! delivers failure notifications from `JETCRON_NOTIFY`.
//!
//! Layout, by what each part does (every module is named here):
//! - a delivery: [`attempt`] runs one as a pipeline of stages (admit, start,
//!   call, settle), [`hold`] keeps one stored ahead until its instant,
//!   [`instant_calls`] sends the calls of an instant together (with
//!   `instant_replies` pairing their answers), [`fanout`] splits a sharded
//!   fire;
//! - how long a delivery is ours: [`lease`] (its lease, checked before every
//!   act), [`ack_deadlines`] (the ack wait of first deliveries and
//!   redeliveries), `kept_alive` (keep-alives while it waits), [`tries`]
//!   (which attempts count against `max_attempts`);
//! - whether to call: [`call_gate`] (no call through a server that stopped
//!   answering), [`run_end_lookup`] (did the run already end?),
//!   [`runs_pulse`] (is `JETCRON_RUNS` storing at all), [`kill_markers`]
//!   (kill requests followed in memory), [`claims`] with the pure
//!   `claim_rules` (`concurrency: forbid | replace`), [`running`]
//!   (attempts registered so kills and probes reach them);
//! - what follows a call: [`targets`] runs the three target types,
//!   [`completion_reports`] hears asynchronous completions,
//!   [`end_decision`] decides what follows an attempt's end (a pure
//!   function), [`run_events`] publishes run events;
//! - after a run: [`alerting`] (the job's webhook and its alert channels:
//!   notifications, incidents, mail), [`chains`] starts the jobs that follow
//!   a run's job when the run ends; both take their work queues through
//!   `consumer_loop`.
//!
//! The service itself ([`run`]): its topology declared as data
//! ([`jetcron_io::topology::Need`]), its tasks by what stopping means
//! ([`jetcron_io::tasks`]): attempts drained within the grace, helpers
//! stopped after them.

pub mod ack_deadlines;
pub mod alerting;
pub mod attempt;
pub mod call_gate;
pub mod chains;
mod claim_rules;
pub mod claims;
pub mod completion_reports;
mod consumer_loop;
pub mod end_decision;
pub mod fanout;
pub mod hold;
pub mod instant_calls;
mod instant_replies;
mod kept_alive;
pub mod kill_markers;
pub mod lease;
pub mod run_end_lookup;
pub mod run_events;
pub mod running;
pub mod runs_pulse;
pub mod targets;
pub mod tries;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::kv;
use async_nats::jetstream::{self, consumer::pull};
use futures::StreamExt as _;
use jetcron_core::clock::Clock;
use jetcron_core::job;
use jetcron_core::subjects;
use jetcron_io::readiness::Readiness;
use jetcron_io::retry::{LogLimiter, RetryDelay};
use jetcron_io::tasks::{ServiceTasks, TaskKind};
use jetcron_io::topology::{self, Need, TopologyOptions};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

pub use targets::shell::ShellOptions;

use running::RunningAttempts;

/// Executor settings.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Name recorded in run events.
    pub executor_id: String,
    /// Most attempts running at once in this process.
    pub max_in_flight: usize,
    /// Largest output kept per attempt, in bytes.
    pub output_limit: usize,
    pub shell: ShellOptions,
    /// Consumer `ack_wait`: how long a silent executor keeps a due event
    /// delivered the first time.
    pub ack_wait: Duration,
    /// How long it keeps one delivered again (the consumer's `backoff`,
    /// [`ack_deadlines`]); at most `ack_wait`.
    pub redelivery_ack_wait: Duration,
    /// How often a running attempt tells JetStream it is still alive.
    pub progress_interval: Duration,
    /// How long shutdown waits for in-flight attempts before handing them back.
    pub shutdown_grace: Duration,
    /// Pools served (one durable consumer each).
    pub pools: Vec<String>,
    /// Delay before the second try of a failed notification, doubled per try.
    pub notify_backoff: Duration,
    /// Tries of a notification before it is recorded as `notify_failed`.
    pub notify_max_attempts: u32,
    /// Base URL of the console, for the run link in alerts
    /// (`<url>/ui/runs/<run id>`); none: alerts carry no link.
    pub console_url: Option<String>,
    /// A PEM file of CA certificates trusted for SMTP besides the public
    /// roots (a mail relay with a private CA).
    pub smtp_ca_file: Option<std::path::PathBuf>,
    pub topology: TopologyOptions,
    /// Told when the topology is verified (`/readyz`).
    pub readiness: Readiness,
    /// The connection `nats` targets are called on (the executor's own when
    /// `None`); `jetcron executor` opens a second one, so that calls never
    /// queue behind run events and acks.
    pub calls_client: Option<async_nats::Client>,
    /// Parsed schedule lines, shared with the other services of the
    /// process (`jetcron all`). Every due event carries its job's
    /// definition, validated before anything runs; parsing its cron line
    /// again for every run was about 7 % of the executor's CPU at 10,000
    /// runs/s (perf), while jobs share few distinct lines.
    pub lines: jetcron_core::schedule_lines::SharedLines,
    /// The process's one read of the jobs bucket, for the chain index (by
    /// default its own, which decodes only chained jobs).
    pub jobs_feed: jetcron_io::job_feed::JobFeed,
    /// What the watch of the calls' connection hears: a call goes out only
    /// through a server that answered a moment ago (a hung server would
    /// deliver it when it wakes, after another attempt's).
    pub calls_health: jetcron_io::nats_failover::ConnectionHealth,
    /// What the watch of the executor's own connection hears: a target
    /// whose start could not be recorded in time is not called meanwhile
    /// while its server has been cut off from JetStream for seconds.
    pub jetstream_health: jetcron_io::nats_failover::ConnectionHealth,
    /// Whether jetcron connections on other servers still answer through the
    /// executor's own connection: not called meanwhile either once they
    /// stopped answering (its server is cut off; unwatched by default).
    pub peer_reach: jetcron_io::peer_reach::PeerReach,
    /// This host's clock against the NATS servers': while it is not
    /// trusted the executor pulls nothing and calls no held fire (off by
    /// default, for tests that drive time by hand).
    pub clock_check: jetcron_io::clock_check::ClockCheck,
}

/// Default of the most attempts running at once: a burst of 1,000 held
/// `nats` calls at one instant books its calls ahead with a slot each
/// ([`instant_calls`]). Shell targets are processes: lower it where many
/// shell jobs are due at once.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 2048;

/// Most messages one pull asks for: the slots a pull reserves for messages
/// still to come are not free for held fires to book their calls with.
const PULL_BATCH: usize = 256;

/// Default consumer ack wait on one node: the lookahead there (1.5 s) and
/// 3 s (`jetcron executor` takes 13 s on a cluster, `--ack-wait`).
pub const DEFAULT_ACK_WAIT: Duration = Duration::from_millis(4_500);

/// Default wait of a redelivered due event: a redelivery lost on its way
/// costs its fire this much more ([`ack_deadlines`]); keep-alives of a
/// redelivery go out every 2 s.
pub const DEFAULT_REDELIVERY_ACK_WAIT: Duration = Duration::from_secs(4);

/// Default cap on kept output: 64 KiB.
pub const DEFAULT_OUTPUT_LIMIT: usize = 64 * 1024;

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            executor_id: default_executor_id(),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            shell: ShellOptions::default(),
            ack_wait: DEFAULT_ACK_WAIT,
            redelivery_ack_wait: DEFAULT_REDELIVERY_ACK_WAIT,
            progress_interval: DEFAULT_ACK_WAIT / 3,
            shutdown_grace: Duration::from_secs(30),
            pools: vec![subjects::DEFAULT_POOL.to_string()],
            notify_backoff: Duration::from_secs(1),
            notify_max_attempts: 5,
            console_url: None,
            smtp_ca_file: None,
            topology: TopologyOptions::default(),
            readiness: Readiness::default(),
            calls_client: None,
            lines: Default::default(),
            jobs_feed: jetcron_io::job_feed::JobFeed::chains_only(),
            clock_check: jetcron_io::clock_check::ClockCheck::off(),
            calls_health: Default::default(),
            jetstream_health: Default::default(),
            peer_reach: Default::default(),
        }
    }
}

/// `<hostname>-<pid>`.
pub fn default_executor_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "executor".into());
    format!("{host}-{}", std::process::id())
}

/// What every attempt of this executor shares.
pub struct ExecutorContext {
    pub config: ExecutorConfig,
    pub nats: async_nats::Client,
    /// Where `nats` targets are called ([`ExecutorConfig::calls_client`]).
    pub calls: async_nats::Client,
    pub js: jetstream::Context,
    pub http: reqwest::Client,
    /// `jetcron_running`: overlap claims and kill requests.
    pub running: kv::Store,
    /// `jetcron_incidents`: open alert incidents ([`alerts`]).
    pub incidents: kv::Store,
    /// `jetcron_channels`: where alerts go.
    pub channels: kv::Store,
    /// Attempts in progress here, for kill requests.
    pub attempts: Arc<RunningAttempts>,
    /// Cancelled when the grace period of a shutdown is over: attempts still
    /// running hand their message back.
    pub interrupt: CancellationToken,
    /// Every "now" of the executor (run event times, claim expiries, holds).
    pub clock: Arc<dyn Clock>,
    /// The kill requests of `jetcron_running`, followed in memory.
    pub kill_markers: kill_markers::KillMarkers,
    /// Completion reports of asynchronous targets, by run.
    pub completions: Arc<completion_reports::CompletionReports>,
    /// Calls of held fires, sent together at their instant.
    pub instant_calls: instant_calls::InstantCalls,
    /// When `JETCRON_RUNS` last stored a run event of this executor.
    pub runs_pulse: runs_pulse::RunsPulse,
}

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
    let completion_subscription = completion_reports::CompletionReports::subscribe(&client).await?;
    let (ctx, booked_calls) = context(config, client, clock, &topology).await?;
    let ctx = Arc::new(ctx);
    let mut tasks = ServiceTasks::default();
    let helpers = Helpers {
        completion_subscription,
        booked_calls,
        notifier: topology.notifier,
        chain_ends: topology.chain_ends,
        runs: topology.runs,
    };
    spawn_helpers(&ctx, &mut tasks, helpers, &shutdown);
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
    // Each pool's loop reserves a slot for its open pull request (so that
    // a pulled event never waits for one): with fewer slots than pools, an
    // idle pool's request held the only slot for its whole expiry, and a
    // busy pool ran one event every few seconds.
    anyhow::ensure!(
        config.max_in_flight >= pools.len(),
        "--max-in-flight {} is fewer than the {} pools served ({}): each pool's waiting pull reserves a slot, so give at least one slot per pool",
        config.max_in_flight,
        pools.len(),
        pools.join(", ")
    );
    Ok(pools)
}

/// What an executor works with of the topology, once made or verified.
struct ExecutorTopology {
    runs: jetstream::stream::Stream,
    running: kv::Store,
    incidents: kv::Store,
    channels: kv::Store,
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
            consumers,
            notifier,
            chain_ends,
        }))
    }
}

/// The context every attempt shares, and the queue of the calls booked for
/// their instants.
async fn context(
    config: ExecutorConfig,
    client: async_nats::Client,
    clock: Arc<dyn Clock>,
    topology: &ExecutorTopology,
) -> anyhow::Result<(ExecutorContext, instant_calls::BookedCalls)> {
    let http = reqwest::Client::builder()
        .user_agent(concat!("jetcron/", env!("CARGO_PKG_VERSION")))
        .build()
        .context("build HTTP client")?;
    let calls = config
        .calls_client
        .clone()
        .unwrap_or_else(|| client.clone());
    let (instant_calls, booked_calls) = instant_calls::InstantCalls::new(&calls).await?;
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
    };
    Ok((ctx, booked_calls))
}

/// What the executor's helpers start from.
struct Helpers {
    completion_subscription: async_nats::Subscriber,
    booked_calls: instant_calls::BookedCalls,
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
    let (check, js, s) = (ctx.config.clock_check.clone(), ctx.js.clone(), stop.clone());
    tasks.spawn(Background, "clock check", async move {
        check.follow(js, subjects::DUE_STREAM.to_string(), s).await;
        Ok(())
    });
    let (c, s, reports) = (ctx.clone(), stop.clone(), helpers.completion_subscription);
    tasks.spawn(Background, "completion reports", async move {
        c.completions.route(reports, s).await;
        Ok(())
    });
    // Outside tokio's cooperative budget, so that the calls of one instant
    // go out in one go rather than 128 at a time between other tasks.
    let dispatch = instant_calls::dispatch(ctx.clone(), helpers.booked_calls, stop.clone());
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
    let max_in_flight = ctx.config.max_in_flight;
    let permits = Arc::new(Semaphore::new(max_in_flight));
    let pullers = TaskTracker::new();
    // Held fires are handed back at a shutdown only once every pull loop has
    // ended, having read its open pull request to its end: a request still
    // open at the server took fires handed back, to be lost with this
    // process until `ack_wait`.
    let hand_back = CancellationToken::new();
    // Each pool's batch reserves at most its share of the free slots, so an
    // idle pool's open pull request never holds the slots another pool needs.
    let share = (max_in_flight / consumers.len()).clamp(1, PULL_BATCH);
    for (pool, consumer) in consumers {
        pullers.spawn(pull_loop(
            ctx.clone(),
            PoolPull {
                pool,
                consumer,
                max_batch: share,
            },
            permits.clone(),
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

/// How often a pull loop looks again at a closed call gate.
const CLOCK_RECHECK: Duration = Duration::from_millis(250);

/// How long a pull request waits at the server for due events. A loop
/// that stops reads its open request to its end, so this bounds what a
/// stop waits for; an idle executor asks again this often. (1 s made
/// `executor_failover::an_executor_killed_mid_run_…` fail 2 of 8 runs beside
/// another test, an orphaned shell finishing its command, for a reason not
/// found; it passed 10 of 10 with 5 s.)
const PULL_EXPIRES: Duration = Duration::from_secs(5);

/// How long a pull request waits with leases counted at `ack_wait` (the
/// shortest a delivery has): at most a third of it. A delivery's lease
/// counts from when its request was sent ([`lease`]), so a message that
/// came at the end of a request waiting longer (5 s, with a 3 s ack wait)
/// was born with its lease run out.
fn pull_expires(ack_wait: Duration) -> Duration {
    PULL_EXPIRES.min(ack_wait / 3)
}

/// This executor's waits.
fn deadlines(config: &ExecutorConfig) -> ack_deadlines::AckDeadlines {
    ack_deadlines::AckDeadlines::new(config.ack_wait, config.redelivery_ack_wait)
}

/// What one pull loop pulls: a pool's consumer, at most `max_batch` at a
/// time.
struct PoolPull {
    pool: String,
    consumer: jetstream::consumer::PullConsumer,
    max_batch: usize,
}

/// When a pull loop stops, and when the fires it holds are handed back:
/// only after every pull loop stopped (see [`run`]).
struct PullStops {
    pulling: CancellationToken,
    hand_back: CancellationToken,
}

/// Pull due events of one pool and start an attempt for each, within the
/// executor's in-flight limit, until `shutdown`.
///
/// A batch asks for exactly as many messages as it holds free permits (at
/// most `max_batch`), so a pulled message never waits in a buffer (where its
/// `ack_wait` would run out and JetStream would hand it to another executor).
/// A due event stored ahead of its time ([`hold`]) gives its permit back at
/// once and waits without one, until `stops.hand_back` hands it back.
async fn pull_loop(
    ctx: Arc<ExecutorContext>,
    pulled: PoolPull,
    permits: Arc<Semaphore>,
    tasks: TaskTracker,
    stops: PullStops,
) {
    let PoolPull {
        pool,
        mut consumer,
        max_batch,
    } = pulled;
    let PullStops {
        pulling: shutdown,
        hand_back,
    } = stops;
    let mut delay = RetryDelay::nats();
    let mut failures = LogLimiter::per_10s();
    let waits = pool_waits(&mut consumer, &ctx.config, &pool);
    while !shutdown.is_cancelled() {
        if crate::call_gate::closed(&ctx).is_some() {
            // Nothing is pulled that could not be called: another executor
            // holds the fires meanwhile.
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(CLOCK_RECHECK) => continue,
            }
        }
        let first = tokio::select! {
            _ = shutdown.cancelled() => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let mut reserved = vec![first];
        while reserved.len() < max_batch {
            match permits.clone().try_acquire_owned() {
                Ok(p) => reserved.push(p),
                Err(_) => break,
            }
        }
        // Raced against the stop: sending the request waits for room in
        // the client's command queue, which stays full while the connection
        // is away, and a stop must not wait for NATS to come back. Given up
        // there, the request was not sent (the queue's send is cancel-safe),
        // so no due event goes to a subscription nobody reads.
        // The server hands nothing out for this request before it is sent:
        // the leases of what it brings count from here.
        let requested_at = tokio::time::Instant::now();
        let batch = tokio::select! {
            _ = shutdown.cancelled() => break,
            batch = consumer
                .batch()
                .max_messages(reserved.len())
                .expires(pull_expires(waits.leases.shortest()))
                .messages() => batch,
        };
        let mut messages = match batch {
            Ok(messages) => messages,
            Err(e) => {
                // No leader for the consumer (an election), or NATS away.
                if let Some(failures) = failures.admit() {
                    warn!(pool, failures, error = %e, "cannot pull due events, retrying");
                }
                drop(reserved);
                if delay.sleep(&shutdown).await {
                    break;
                }
                continue;
            }
        };
        // At a shutdown the open request is read to its end (filled or
        // expired): what the server sends it meanwhile is handled as usual
        // (started, or held and handed back once every loop ended). Dropped
        // unread, those messages were lost with this process until
        // `ack_wait`.
        let mut stopping = false;
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled(), if !stopping => {
                    stopping = true;
                    continue;
                }
                next = messages.next() => next,
            };
            match next {
                Some(Ok(message)) => {
                    delay.reset();
                    failures.reset();
                    let message = lease::Delivery::pulled(
                        message,
                        requested_at,
                        waits,
                        ctx.nats.clone(),
                        ctx.config.jetstream_health.clone(),
                    );
                    let Some(permit) = reserved.pop() else {
                        // More than asked for: hand it straight back.
                        message.settle(jetstream::AckKind::Nak(None)).await;
                        continue;
                    };
                    let ctx = ctx.clone();
                    // Stored ahead: held without a slot, prepared meanwhile.
                    let slot = match hold::until(&ctx, message.message()) {
                        Some(fire_at) => attempt::Slot::At {
                            fire_at,
                            permits: permits.clone(),
                            hand_back: hand_back.clone(),
                        },
                        None => attempt::Slot::Now(permit),
                    };
                    // The attempt's future (about 20 KB) is built on the
                    // heap once; spawned by value, it was copied whole two
                    // or three times per fire (perf: `memcpy` under
                    // `tokio::spawn`, docs/benchmarks.md).
                    tasks.spawn(async move {
                        Box::pin(run_attempt(&ctx, message, slot)).await;
                    });
                }
                Some(Err(e)) => {
                    if let Some(failures) = failures.admit() {
                        warn!(pool, failures, error = %e, "pulling due events failed");
                    }
                    if delay.sleep(&shutdown).await {
                        break;
                    }
                    break;
                }
                None => break,
            }
        }
    }
}

/// The waits of `consumer`: its own, for naks, and the ones its deliveries'
/// leases count with, the consumer's (it may have been made by an executor
/// with another `--ack-wait`) or this executor's where those are shorter.
fn pool_waits(
    consumer: &mut jetstream::consumer::Consumer<pull::Config>,
    config: &ExecutorConfig,
    pool: &str,
) -> lease::PoolWaits {
    let info = &consumer.cached_info().config;
    let consumers = ack_deadlines::AckDeadlines::of_consumer(info.ack_wait, &info.backoff);
    let ours = deadlines(config);
    if consumers != ours {
        warn!(
            pool,
            consumer_ack_wait_ms = consumers.first.as_millis() as u64,
            consumer_redelivery_ack_wait_ms = consumers.redelivered.as_millis() as u64,
            ack_wait_ms = ours.first.as_millis() as u64,
            redelivery_ack_wait_ms = ours.redelivered.as_millis() as u64,
            "the pool's consumer has other ack waits than this executor's --ack-wait and --redelivery-ack-wait; give every executor of a pool the same"
        );
    }
    lease::PoolWaits {
        consumer: consumers,
        leases: consumers.min(ours),
    }
}

/// One attempt, counted in `jetcron_executor_in_flight`. Its in-flight
/// `permit` is given back as soon as its target returns (see
/// [`attempt::handle`]).
async fn run_attempt(ctx: &ExecutorContext, message: lease::Delivery, slot: attempt::Slot) {
    let in_flight = metrics::gauge!("jetcron_executor_in_flight");
    in_flight.increment(1.0);
    attempt::handle(ctx, message, slot).await;
    in_flight.decrement(1.0);
}
