//! The gateway as a running service: health answers while the topology
//! converges, then the state every request shares, the background tasks
//! (missed-fire scan, ClickHouse schema, the job catalog), the NATS API
//! and the HTTP server until the stop.

use std::sync::Arc;

use anyhow::Context as _;
use jetcron_core::clock::Clock;
use jetcron_io::clickhouse_schema;
use jetcron_io::tasks::{ServiceTasks, TaskKind};
use jetcron_io::topology::{self, Need};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{
    bindings, channels, console, http, jobs, missed_fires, nats_api, people, policies, runs, sql,
    tokens,
};
use crate::{GatewayConfig, GatewayState};

/// The streams and buckets the gateway needs, made or verified in this
/// order: it publishes due events of manual runs and reads run events.
const TOPOLOGY: &[Need] = &[
    Need::JobsBucket,
    Need::DueStream,
    Need::RunsStream,
    Need::RunningBucket,
    Need::ChannelsBucket,
    Need::TokensBucket,
    Need::PoliciesBucket,
    Need::BindingsBucket,
    Need::SessionsBucket,
    Need::UsersBucket,
    Need::SignInsBucket,
];

/// Run the gateway on `listener` until `shutdown` is cancelled.
pub async fn run(
    config: GatewayConfig,
    client: async_nats::Client,
    clock: Arc<dyn Clock>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = listener.into_std().context("gateway listener")?;
    let Some(parts) = GatewayTopology::ensure(&config, &client, &listener, &shutdown).await? else {
        return Ok(());
    };
    let listener = tokio::net::TcpListener::from_std(listener).context("gateway listener")?;
    if config.http_auth.has_no_tokens() {
        warn!("no API token configured: HTTP write routes refuse every request (--api-token)");
    }
    let mut tasks = ServiceTasks::default();
    let state = Arc::new(state(
        &config, &client, clock, parts, &mut tasks, &shutdown,
    )?);
    spawn_missed_fire_scan(&state, &config, &mut tasks, &shutdown);
    let api = watch_nats_api(client, state.clone(), &shutdown);
    let addr = listener.local_addr().context("gateway listener address")?;
    info!(%addr, "gateway listening");
    let shutdown_http = shutdown.clone();
    // The console's password sign-in limits attempts per client address.
    let app = http::router(state.clone()).merge(console::router(state));
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(async move { shutdown_http.cancelled().await })
    .await
    .context("serve HTTP")?;
    shutdown.cancel();
    api.await.context("join NATS API watcher")??;
    tasks.stop(std::time::Duration::from_secs(5)).await;
    info!("gateway stopped");
    Ok(())
}

/// What the gateway works with of the topology, once made or verified.
struct GatewayTopology {
    jobs: async_nats::jetstream::kv::Store,
    running: async_nats::jetstream::kv::Store,
    channels: async_nats::jetstream::kv::Store,
    tokens: async_nats::jetstream::kv::Store,
    policies: async_nats::jetstream::kv::Store,
    bindings: async_nats::jetstream::kv::Store,
    sessions: async_nats::jetstream::kv::Store,
    users: async_nats::jetstream::kv::Store,
    sign_ins: async_nats::jetstream::kv::Store,
}

impl GatewayTopology {
    /// Make or verify the gateway's streams and buckets while health and
    /// readiness answer on `listener`, saying what is awaited (a cluster
    /// electing, a stream an admin has not created yet); `None` when the
    /// stop came first.
    async fn ensure(
        config: &GatewayConfig,
        client: &async_nats::Client,
        listener: &std::net::TcpListener,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Option<Self>> {
        let starting = http::health::serve_while_starting(
            listener.try_clone().context("gateway listener")?,
            config.readiness.clone(),
        )?;
        let tjs = topology::context(client.clone());
        let ensured = async {
            let mut converging = topology::Converging::start(
                jetcron_io::readiness::GATEWAY,
                &config.readiness,
                shutdown,
            );
            let Some(ensured) = converging
                .ensure_needs(&tjs, &config.topology, TOPOLOGY)
                .await?
            else {
                return Ok(None);
            };
            converging.ready();
            anyhow::Ok(Some(Self {
                jobs: ensured.bucket(Need::JobsBucket)?,
                running: ensured.bucket(Need::RunningBucket)?,
                channels: ensured.bucket(Need::ChannelsBucket)?,
                tokens: ensured.bucket(Need::TokensBucket)?,
                policies: ensured.bucket(Need::PoliciesBucket)?,
                bindings: ensured.bucket(Need::BindingsBucket)?,
                sessions: ensured.bucket(Need::SessionsBucket)?,
                users: ensured.bucket(Need::UsersBucket)?,
                sign_ins: ensured.bucket(Need::SignInsBucket)?,
            }))
        }
        .await;
        starting.stop().await;
        ensured
    }
}

/// The state every request shares. As tasks of `tasks`: the job catalog
/// follows the process's job feed, and the ClickHouse schema is prepared
/// (aborted at the stop) through the same client the reads use.
fn state(
    config: &GatewayConfig,
    client: &async_nats::Client,
    clock: Arc<dyn Clock>,
    parts: GatewayTopology,
    tasks: &mut ServiceTasks,
    shutdown: &CancellationToken,
) -> anyhow::Result<GatewayState> {
    let catalog = jobs::catalog::JobCatalog::new(config.lines.clone());
    let feed = config.jobs_feed.subscribe(client, &config.lines);
    let following = catalog.clone().follow(feed, shutdown.clone());
    tasks.spawn(TaskKind::Abort, "job catalog", async move {
        following.await;
        Ok(())
    });
    let clickhouse = config.clickhouse.client();
    let (schema_client, mode, stop) = (
        clickhouse.clone(),
        config.clickhouse.schema,
        shutdown.clone(),
    );
    tasks.spawn(TaskKind::Abort, "ClickHouse schema", async move {
        clickhouse_schema::prepare_when_possible(&schema_client, mode, &stop).await;
        Ok(())
    });
    let book = Arc::new(jetcron_io::policy_book::PolicyBook::default());
    let (followed, bucket, stop) = (book.clone(), parts.policies.clone(), shutdown.clone());
    tasks.spawn(TaskKind::Abort, "target policies", async move {
        followed.follow(&bucket, &stop).await;
        Ok(())
    });
    drop(tokio::task::spawn_blocking(people::passwords::prepare));
    let provider = config
        .oidc
        .clone()
        .map(people::provider::Provider::new)
        .transpose()?
        .map(Arc::new);
    let bound_roles = Arc::new(people::bound_roles::BoundRoles::default());
    let (followed, bucket, stop) = (
        bound_roles.clone(),
        parts.bindings.clone(),
        shutdown.clone(),
    );
    tasks.spawn(TaskKind::Abort, "role bindings", async move {
        followed.follow(&bucket, &stop).await;
        Ok(())
    });
    let reads = sql::reads::ClickHouseReads::new(clickhouse, config.limits.clickhouse_timeout);
    Ok(GatewayState {
        running: parts.running,
        nats: client.clone(),
        js: async_nats::jetstream::new(client.clone()),
        jobs: jobs::store::JobStore::new(
            parts.jobs,
            async_nats::jetstream::new(client.clone()),
            catalog.clone(),
            config.limits.max_jobs,
            config.lines.clone(),
            book.clone(),
        ),
        catalog,
        channels: channels::store::ChannelStore::new(parts.channels),
        tokens: tokens::store::TokenStore::new(parts.tokens),
        policies: policies::PolicyStore::new(parts.policies, book),
        bindings: bindings::BindingStore::new(
            parts.bindings,
            async_nats::jetstream::new(client.clone()),
        ),
        sessions: console::session::SessionStore::new(
            parts.sessions,
            config.limits.console_sessions,
        ),
        local_users: people::local_users::LocalUsers::new(parts.users),
        pending_sign_ins: console::pending_sign_ins::PendingSignIns::new(parts.sign_ins),
        sign_in_guard: people::sign_in_limits::SignInGuard::new(config.limits.sign_in),
        bound_roles,
        provider,
        runs: runs::history::RunHistory::new(reads),
        http_auth: config.http_auth.clone(),
        limits: config.limits.clone(),
        // The scan refreshes the gauge; scrapes in between use its counts.
        missed: missed_fires::gauge::MissedGauge::new(config.limits.missed_scan_interval * 2),
        readiness: config.readiness.clone(),
        clock,
        grafana_url: config.grafana_url.clone(),
    })
}

/// The missed-fire scan (it stops with `shutdown`).
fn spawn_missed_fire_scan(
    state: &Arc<GatewayState>,
    config: &GatewayConfig,
    tasks: &mut ServiceTasks,
    shutdown: &CancellationToken,
) {
    let scan = missed_fires::scan::run(
        state.clone(),
        config.limits.missed_scan_interval,
        shutdown.clone(),
    );
    tasks.spawn(TaskKind::Background, "missed fire scan", async move {
        scan.await;
        Ok(())
    });
}

/// Serve the NATS API. Its ending on its own (a bug, a panic) must not
/// leave a process that looks healthy but answers nothing: it stops the
/// whole gateway, with the reason as the result.
fn watch_nats_api(
    client: async_nats::Client,
    state: Arc<GatewayState>,
    shutdown: &CancellationToken,
) -> JoinHandle<anyhow::Result<()>> {
    let shutdown = shutdown.clone();
    let task = tokio::spawn(nats_api::serve(client, state, shutdown.clone()));
    tokio::spawn(async move {
        let result = task.await;
        if !shutdown.is_cancelled() {
            tracing::error!("NATS API stopped unexpectedly, stopping the gateway");
            shutdown.cancel();
            return match result {
                Ok(Ok(())) => Err(anyhow::anyhow!("NATS API stopped unexpectedly")),
                Ok(Err(e)) => Err(e.context("NATS API failed")),
                Err(e) => Err(anyhow::anyhow!("NATS API task panicked: {e}")),
            };
        }
        result.context("join NATS API")?
    })
}
