//! `jetcron`: one binary, one subcommand per service. It only wires:
//! command line → telemetry → NATS connection →
//! `<service>::run(config, client, [clock,] stop)` → wait for SIGINT/SIGTERM,
//! then stop the services in order ([`services`]; a second signal exits at
//! once).

mod cli;
mod client;
mod huge_pages;
mod metrics_server;
mod migrate;
mod open_files;
mod users;

use std::io::Read as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;
use jetcron_core::clock::SystemClock;
use jetcron_io::clickhouse_schema::ClickHouseOptions;
use jetcron_io::clock_check::ClockCheck;
use jetcron_io::nats_connect::OwnThreadConnection;
use jetcron_io::nats_failover::Failover;
use jetcron_io::readiness::Readiness;
use jetcron_io::telemetry;
use jetcron_io::topology::TopologyOptions;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use cli::{Cli, Command, CommonArgs, ExecutorArgs, GatewayArgs, ProjectorArgs, TickerArgs};
use jetcron_io::stages::{Services, Stage};

/// mimalloc ([`jetcron_allocator`] says why, and how long it keeps freed
/// memory).
#[global_allocator]
static ALLOCATOR: jetcron_allocator::MiMalloc = jetcron_allocator::MiMalloc;

fn main() -> std::process::ExitCode {
    jetcron_allocator::keep_freed_memory();
    // clap exits 2 on a usage error, which `apply` and `diff` use for
    // "changes": a typo must read as an error (1) to a pipeline.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.use_stderr() {
                true => std::process::ExitCode::FAILURE,
                false => std::process::ExitCode::SUCCESS,
            };
        }
    };
    if cli.command.is_client() {
        return std::process::ExitCode::from(client::main(cli.common, cli.command));
    }
    telemetry::init(cli.common.log_format);
    huge_pages::turn_off_unless_asked();
    // Each worker gives back, when it goes idle, what other threads freed
    // of its allocations once memory is asked back (a ticker's drop).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(|| {
            jetcron_allocator::give_back_if_asked();
        })
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("jetcron: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %format!("{e:#}"), "jetcron failed");
            eprintln!("jetcron: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `jetcron nats-permissions`: the permissions of a team's NATS user.
fn print_nats_permissions(args: &cli::NatsPermissionsArgs) -> anyhow::Result<()> {
    let scope = jetcron_core::access::Scope::parse("--namespace", &args.namespace)
        .map_err(|p| anyhow::anyhow!("{}", p.message))?;
    let jetcron_core::access::Scope::One(namespace) = scope else {
        anyhow::bail!("--namespace: a team's user has one namespace; \"*\" is the gateway's (infra/nats/roles.conf)");
    };
    let role = jetcron_core::access::Role::parse("--role", &args.role)
        .map_err(|p| anyhow::anyhow!("{}", p.message))?;
    let permissions = jetcron_core::nats_doors::nats_permissions(&namespace, role);
    println!("{}", serde_json::to_string_pretty(&permissions)?);
    Ok(())
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let common = cli.common;
    let command = match cli.command {
        Command::Req(args) => return request(&common, args).await,
        Command::Migrate(args) => return migrate::run(&common, args).await,
        Command::NatsPermissions(args) => return print_nats_permissions(&args),
        Command::Users(command) => return users::run(&common, command).await,
        command if command.is_client() => anyhow::bail!("a client command runs without services"),
        command => command,
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(wait_for_signals(shutdown.clone()));
    jetcron_io::prometheus::install().context("install the metrics recorder")?;
    let mut services = Services::default();
    let readiness = Readiness::default();
    if let Some(addr) = common.metrics_addr {
        let stop = CancellationToken::new();
        services.spawn(
            Stage::Metrics,
            stop.clone(),
            metrics_server::serve(addr, readiness.clone(), stop),
        );
    }
    // Every service of this process is named before any probe can answer,
    // so `/readyz` never says ready (or lists nothing) while one has not
    // begun yet.
    for service in services_of(&command) {
        readiness.waiting(service, "starting: connecting to NATS");
    }
    let lines = jetcron_core::schedule_lines::SharedLines::default();
    // The ticker, the executor's chain index and the gateway's catalog each
    // read every job. In one process the ticker reads first, and the chain
    // index and the catalog share one read after it: a cold start's CPU
    // goes to the first due event.
    let jobs_feed = match command {
        // Its chain index alone: only chained jobs are decoded.
        Command::Executor(_) => jetcron_io::job_feed::JobFeed::chains_only(),
        _ => jetcron_io::job_feed::JobFeed::new(1),
    };
    let views_feed = match command {
        Command::All(_) => jetcron_io::job_feed::JobFeed::new(2).opened_after(&jobs_feed),
        _ => jobs_feed.clone(),
    };
    // Only the ticker and the executor act on the wall clock's instants.
    let clock_check = if matches!(
        command,
        Command::All(_) | Command::Ticker(_) | Command::Executor(_)
    ) {
        ClockCheck::new(
            common.max_clock_offset,
            Arc::new(SystemClock),
            readiness.clone(),
        )
    } else {
        ClockCheck::off()
    };
    let process = Process {
        common: &common,
        readiness: &readiness,
        clock_check: &clock_check,
        lines: &lines,
        jobs_feed: &jobs_feed,
        views_feed: &views_feed,
        shutdown: &shutdown,
    };
    match command {
        Command::Ticker(args) => spawn_ticker(&mut services, &process, args).await?,
        Command::Executor(args) => spawn_executor(&mut services, &process, args).await?,
        Command::Projector(args) => spawn_projector(&mut services, &process, args, None).await?,
        Command::Gateway(args) => spawn_gateway(&mut services, &process, args).await?,
        Command::All(args) => {
            let mut args = *args;
            // Alerts link to this process's own console unless told otherwise.
            args.executor
                .console_url
                .get_or_insert_with(|| format!("http://{}", args.gateway.http_addr));
            spawn_gateway(&mut services, &process, args.gateway).await?;
            // Job revisions are projected once both reads are done.
            let revisions_after = Some(views_feed.first_read());
            spawn_projector(&mut services, &process, args.projector, revisions_after).await?;
            spawn_executor(&mut services, &process, args.executor).await?;
            spawn_ticker(&mut services, &process, args.ticker).await?;
        }
        _ => unreachable!("one-shot and client commands are handled above"),
    }
    // A service that ends (or fails) takes the process down with it, in
    // order: the ticker, the executors, the projector, the gateway.
    let result = services.run(&shutdown).await;
    info!("jetcron stopped");
    result
}

/// The services `command` runs, by the names they report readiness under.
fn services_of(command: &Command) -> &'static [&'static str] {
    use jetcron_io::readiness::{EXECUTOR, GATEWAY, PROJECTOR, TICKER};
    match command {
        Command::Ticker(_) => &[TICKER],
        Command::Executor(_) => &[EXECUTOR],
        Command::Projector(_) => &[PROJECTOR],
        Command::Gateway(_) => &[GATEWAY],
        Command::All(_) => &[GATEWAY, PROJECTOR, EXECUTOR, TICKER],
        _ => &[],
    }
}

fn topology(common: &CommonArgs) -> TopologyOptions {
    TopologyOptions {
        replicas: common.replicas,
        ..TopologyOptions::default()
    }
}

fn clickhouse(common: &CommonArgs) -> ClickHouseOptions {
    ClickHouseOptions {
        url: common.clickhouse_url.clone(),
        user: common.clickhouse_user.clone(),
        password: common.clickhouse_password.clone(),
        schema: common.clickhouse_schema,
    }
}

/// Connect, retrying until NATS answers or shutdown is asked for. Refused
/// credentials end it at once: retrying would not change the answer.
async fn connect(
    common: &CommonArgs,
    name: &str,
    shutdown: &CancellationToken,
) -> anyhow::Result<async_nats::Client> {
    Ok(connect_watched(common, name, shutdown).await?.0)
}

/// [`connect`], with the connection's failover (what its watch hears).
async fn connect_watched(
    common: &CommonArgs,
    name: &str,
    shutdown: &CancellationToken,
) -> anyhow::Result<(async_nats::Client, Failover)> {
    let auth = common.nats_auth();
    // Fast pings, hellos to the other connections and a JetStream question
    // twice a second: a connection leaves a server that hangs or is cut
    // off from its cluster within seconds.
    let failover = Failover::default();
    let options = failover.apply(
        auth.connect_options()
            .context("NATS connection options")?
            .name(format!("jetcron-{name}")),
        common.nats_ping_interval,
    );
    let mut delay = Duration::from_millis(200);
    loop {
        match options.clone().connect(common.nats_url.servers()).await {
            Ok(client) => {
                tokio::spawn({
                    let (client, failover) = (client.clone(), failover.clone());
                    async move { failover.watch(client).await }
                });
                return Ok((client, failover));
            }
            Err(e) if refused(&e) => {
                return Err(e).with_context(|| {
                    format!(
                        "NATS at {} refused {} as {name}",
                        common.nats_url,
                        auth.describe()
                    )
                })
            }
            Err(e) => {
                warn!(service = name, url = %common.nats_url, auth = %auth.describe(), error = %e, "cannot connect to NATS yet")
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => anyhow::bail!("shut down before NATS was reachable"),
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// [`connect`] on a thread of its own that runs the connection's I/O task
/// for the rest of the process. The executor's instant dispatcher hands a
/// burst of requests to the client without yielding; with the I/O task on
/// a worker of the same runtime it could only write them once the whole
/// burst was handed over (the first call of 1,000 reached its target 7 ms
/// after the instant, docs/benchmarks.md). On its own thread it writes
/// while the burst is still being handed over.
async fn connect_on_own_thread(
    common: &CommonArgs,
    name: &'static str,
    shutdown: &CancellationToken,
) -> anyhow::Result<OwnThreadConnection> {
    let (common, shutdown) = (common.clone(), shutdown.clone());
    let (connected, client) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(format!("jetcron-{name}"))
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = connected.send(Err(anyhow::Error::new(e).context("runtime")));
                    return;
                }
            };
            let handle = runtime.handle().clone();
            runtime.block_on(async move {
                let client = connect_watched(&common, name, &shutdown).await;
                let up = client.is_ok();
                let own = client.map(|(client, failover)| OwnThreadConnection {
                    client,
                    runtime: handle,
                    failover,
                });
                if connected.send(own).is_ok() && up {
                    // The connection's task (and whatever else is spawned on
                    // this runtime) lives here: keep it running until the
                    // process ends.
                    std::future::pending::<()>().await
                }
            })
        })
        .with_context(|| format!("start the thread of the {name} connection"))?;
    client
        .await
        .with_context(|| format!("the thread of the {name} connection ended"))?
}

/// The server answered and said no to these credentials.
fn refused(error: &async_nats::ConnectError) -> bool {
    matches!(
        error.kind(),
        async_nats::ConnectErrorKind::AuthorizationViolation
            | async_nats::ConnectErrorKind::Authentication
    )
}

/// What every service of this process is started with.
struct Process<'a> {
    common: &'a CommonArgs,
    readiness: &'a Readiness,
    /// This host's clock against the NATS servers', for the ticker and the executor.
    clock_check: &'a ClockCheck,
    /// Parsed schedule lines, one set for every service of the process.
    lines: &'a jetcron_core::schedule_lines::SharedLines,
    /// The ticker's read of the jobs bucket (outside `jetcron all`, the
    /// service's own).
    jobs_feed: &'a jetcron_io::job_feed::JobFeed,
    /// The read the executor's chain index and the gateway's catalog share:
    /// in `jetcron all`, after the ticker's first read.
    views_feed: &'a jetcron_io::job_feed::JobFeed,
    shutdown: &'a CancellationToken,
}

async fn spawn_ticker(
    services: &mut Services,
    process: &Process<'_>,
    args: TickerArgs,
) -> anyhow::Result<()> {
    let (common, shutdown) = (process.common, process.shutdown);
    let client = connect(common, "ticker", shutdown).await?;
    // Lease rounds on a thread and connection of their own: planning or
    // dropping a shard of hundreds of thousands of jobs keeps the ticker's
    // loop busy for seconds, and renewals starved meanwhile lost the leases.
    let lease_thread = connect_on_own_thread(common, "ticker-leases", shutdown).await?;
    let lookahead = args
        .lookahead
        .unwrap_or_else(|| cli::default_lookahead(common.replicas));
    anyhow::ensure!(
        lookahead <= cli::MAX_LOOKAHEAD,
        "--lookahead {} is longer than {}",
        humantime::format_duration(lookahead),
        humantime::format_duration(cli::MAX_LOOKAHEAD)
    );
    anyhow::ensure!(
        args.lease_renew * 2 < args.lease_ttl,
        "--lease-renew ({}) must be less than half of --lease-ttl ({})",
        humantime::format_duration(args.lease_renew),
        humantime::format_duration(args.lease_ttl)
    );
    let mut config = jetcron_ticker::TickerConfig {
        leases: jetcron_ticker::ownership::LeaseOptions {
            ttl: args.lease_ttl,
            renew_every: args.lease_renew,
            publish_stall_limit: args.publish_stall_limit,
            ..Default::default()
        },
        lookahead,
        late_threshold: args.late_threshold,
        topology: topology(common),
        readiness: process.readiness.clone(),
        lines: process.lines.clone(),
        jobs_feed: process.jobs_feed.clone(),
        lease_thread: Some(lease_thread),
        snapshot_every: args.snapshot_every,
        clock_check: process.clock_check.clone(),
        ..Default::default()
    };
    if let Some(id) = args.replica_id {
        jetcron_core::job::validate_id(&id)
            .map_err(|e| anyhow::anyhow!("--replica-id: {}", e.message))?;
        config.replica_id = id;
    }
    let stop = CancellationToken::new();
    services.spawn(
        Stage::Ticker,
        stop.clone(),
        jetcron_ticker::run(config, client, Arc::new(SystemClock), stop),
    );
    Ok(())
}

/// Shortest `--redelivery-ack-wait`: a redelivery is kept alive every half
/// of it.
const MIN_REDELIVERY_ACK_WAIT: Duration = Duration::from_secs(2);

async fn spawn_executor(
    services: &mut Services,
    process: &Process<'_>,
    args: ExecutorArgs,
) -> anyhow::Result<()> {
    let (common, shutdown) = (process.common, process.shutdown);
    let (client, failover) = connect_watched(common, "executor", shutdown).await?;
    // Target calls on a connection of their own: a burst of calls at an
    // instant never queues behind the executor's JetStream traffic.
    let calls = connect_on_own_thread(common, "executor-calls", shutdown).await?;
    // Pinged every 100 ms, until the process ends (attempts still call
    // through it during a stop's grace): no call goes to a server that
    // stopped answering.
    calls.runtime.spawn({
        let (failover, client) = (calls.failover.clone(), calls.client.clone());
        async move {
            failover
                .ping_every(client, Duration::from_millis(100))
                .await
        }
    });
    let ack_wait = args
        .ack_wait
        .unwrap_or_else(|| cli::default_ack_wait(common.replicas));
    let mut config = jetcron_executor::ExecutorConfig {
        calls_health: calls.failover.health(),
        jetstream_health: failover.health(),
        peer_reach: failover.peer_reach(),
        calls_client: Some(calls.client),
        lines: process.lines.clone(),
        jobs_feed: process.views_feed.clone(),
        max_in_flight: args.max_in_flight,
        max_pulled: args.max_pulled,
        slot_sharing: args.slot_sharing,
        slot_reserve: args.slot_reserve,
        output_limit: args.output_limit,
        shell: jetcron_executor::ShellOptions {
            enabled: args.enable_shell,
            workdir: args.shell_workdir,
        },
        shutdown_grace: args.shutdown_grace,
        pools: args.pools,
        ack_wait,
        redelivery_ack_wait: args.redelivery_ack_wait.min(ack_wait),
        progress_interval: args.progress_interval.unwrap_or(ack_wait / 3),
        topology: topology(common),
        readiness: process.readiness.clone(),
        console_url: args.console_url,
        smtp_ca_file: args.smtp_ca_file,
        clock_check: process.clock_check.clone(),
        ..Default::default()
    };
    anyhow::ensure!(
        config.slot_reserve() < config.max_in_flight.max(1),
        "--slot-reserve ({}) must be fewer than --max-in-flight ({})",
        config.slot_reserve(),
        config.max_in_flight
    );
    anyhow::ensure!(
        config.progress_interval < config.ack_wait,
        "--progress-interval ({}) must be shorter than --ack-wait ({})",
        humantime::format_duration(config.progress_interval),
        humantime::format_duration(config.ack_wait)
    );
    anyhow::ensure!(
        args.redelivery_ack_wait >= MIN_REDELIVERY_ACK_WAIT,
        "--redelivery-ack-wait ({}) must be at least {} (a redelivery is kept alive every half of it)",
        humantime::format_duration(args.redelivery_ack_wait),
        humantime::format_duration(MIN_REDELIVERY_ACK_WAIT)
    );
    if let Some(id) = args.executor_id {
        config.executor_id = id;
    }
    open_files::raise_for_calls(config.max_in_flight);
    let stop = CancellationToken::new();
    services.spawn(
        Stage::Executor,
        stop.clone(),
        jetcron_executor::run(config, client, Arc::new(SystemClock), stop),
    );
    Ok(())
}

async fn spawn_projector(
    services: &mut Services,
    process: &Process<'_>,
    args: ProjectorArgs,
    job_revisions_after: Option<jetcron_io::job_feed::FirstRead>,
) -> anyhow::Result<()> {
    let (common, shutdown) = (process.common, process.shutdown);
    let client = connect(common, "projector", shutdown).await?;
    let mut config = jetcron_projector::ProjectorConfig::new(clickhouse(common));
    config.batch_size = args.batch_size.max(1);
    config.batch_wait = args.batch_wait;
    config.ack_wait = args.projector_ack_wait.max(Duration::from_secs(1));
    jetcron_core::job::validate_id(&args.consumer)
        .map_err(|e| anyhow::anyhow!("--consumer: {}", e.message))?;
    config.consumer = args.consumer;
    config.topology = topology(common);
    config.readiness = process.readiness.clone();
    config.job_revisions_after = job_revisions_after;
    let stop = CancellationToken::new();
    services.spawn(
        Stage::Projector,
        stop.clone(),
        jetcron_projector::run(config, client, stop),
    );
    Ok(())
}

async fn spawn_gateway(
    services: &mut Services,
    process: &Process<'_>,
    args: GatewayArgs,
) -> anyhow::Result<()> {
    let (common, shutdown) = (process.common, process.shutdown);
    let listener = tokio::net::TcpListener::bind(args.http_addr)
        .await
        .with_context(|| format!("bind HTTP {}", args.http_addr))?;
    let client = connect(common, "gateway", shutdown).await?;
    let mut tokens = args.api_tokens.clone();
    if let Some(path) = &args.api_token_file {
        tokens.extend(jetcron_gateway::http::auth::read_token_file(path)?);
    }
    let config = jetcron_gateway::GatewayConfig {
        clickhouse: clickhouse(common),
        topology: topology(common),
        http_auth: jetcron_gateway::http::auth::HttpAuth::new(tokens, args.protect_reads)?,
        limits: jetcron_gateway::limits::Limits {
            max_jobs: args.max_jobs,
            http_body_limit: args.http_body_limit,
            missed_scan_interval: args.missed_scan_interval,
            clickhouse_timeout: args.clickhouse_timeout,
            console_sessions: jetcron_gateway::console::session::Timeouts::new(
                args.console_idle_timeout,
                args.console_session_lifetime,
            )
            .map_err(anyhow::Error::msg)?,
            trust_forwarded_for: args.trust_forwarded_for,
            ..Default::default()
        },
        readiness: process.readiness.clone(),
        grafana_url: args.grafana_url.clone(),
        lines: process.lines.clone(),
        jobs_feed: process.views_feed.clone(),
        oidc: args.oidc.settings()?,
    };
    let stop = CancellationToken::new();
    services.spawn(
        Stage::Gateway,
        stop.clone(),
        jetcron_gateway::run(config, client, Arc::new(SystemClock), listener, stop),
    );
    Ok(())
}

/// First SIGINT/SIGTERM: orderly shutdown. Second: exit now.
async fn wait_for_signals(shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        warn!("cannot install signal handlers");
        return;
    };
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    info!("shutdown requested");
    shutdown.cancel();
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    warn!("second signal, exiting now");
    std::process::exit(130);
}

/// `jetcron req SUBJECT BODY`: what `nats req` does, for machines without it.
async fn request(common: &CommonArgs, args: cli::ReqArgs) -> anyhow::Result<()> {
    let body = if args.body == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("read standard input")?;
        text
    } else if let Some(path) = args.body.strip_prefix('@') {
        std::fs::read_to_string(path).with_context(|| format!("read {path}"))?
    } else {
        args.body
    };
    let client = common.connect_command("jetcron-req").await?;
    let reply = client
        .send_request(
            args.subject.clone(),
            async_nats::Request::new()
                .payload(body.into())
                .timeout(Some(args.timeout)),
        )
        .await
        .with_context(|| format!("request {}", args.subject))?;
    println!("{}", String::from_utf8_lossy(&reply.payload));
    let failed = reply.headers.as_ref().is_some_and(|h| {
        h.get(async_nats::service::NATS_SERVICE_ERROR_CODE)
            .is_some()
    });
    if failed {
        anyhow::bail!("the service answered with an error");
    }
    Ok(())
}
