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
//! Layout: [`attempt`] handles one delivery, [`target`] runs the three target
//! types, [`run_events`] publishes run events.

pub mod attempt;
pub mod run_events;
pub mod target;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::pull};
use futures::StreamExt as _;
use jetcron_core::subjects;
use jetcron_core::topology::{self, TopologyOptions};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

pub use target::shell::ShellOptions;

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
    /// Consumer `ack_wait`: how long a silent executor keeps a due event.
    pub ack_wait: Duration,
    /// How often a running attempt tells JetStream it is still alive.
    pub progress_interval: Duration,
    /// How long shutdown waits for in-flight attempts.
    pub shutdown_grace: Duration,
    pub topology: TopologyOptions,
}

/// Default cap on kept output: 64 KiB.
pub const DEFAULT_OUTPUT_LIMIT: usize = 64 * 1024;

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            executor_id: default_executor_id(),
            max_in_flight: 64,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            shell: ShellOptions::default(),
            ack_wait: Duration::from_secs(30),
            progress_interval: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(30),
            topology: TopologyOptions::default(),
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
    pub js: jetstream::Context,
    pub http: reqwest::Client,
}

/// Run the executor until `shutdown` is cancelled.
pub async fn run(
    config: ExecutorConfig,
    client: async_nats::Client,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let js = jetstream::new(client.clone());
    let stream = topology::ensure_due_stream(&js, &config.topology).await?;
    topology::ensure_runs_stream(&js, &config.topology).await?;
    let consumer = stream
        .get_or_create_consumer(
            subjects::EXECUTOR_CONSUMER,
            pull::Config {
                durable_name: Some(subjects::EXECUTOR_CONSUMER.to_string()),
                description: Some("jetcron executors of pool default".into()),
                filter_subject: subjects::due_pool_filter(subjects::DEFAULT_POOL),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: config.ack_wait,
                max_deliver: -1,
                max_ack_pending: 10_000,
                ..Default::default()
            },
        )
        .await
        .context("create consumer executor-default")?;
    let http = reqwest::Client::builder()
        .user_agent(concat!("jetcron/", env!("CARGO_PKG_VERSION")))
        .build()
        .context("build HTTP client")?;
    let max_in_flight = config.max_in_flight.max(1);
    let grace = config.shutdown_grace;
    let ctx = Arc::new(ExecutorContext {
        config,
        nats: client,
        js,
        http,
    });
    let permits = Arc::new(Semaphore::new(max_in_flight));
    let tasks = TaskTracker::new();
    info!(executor_id = %ctx.config.executor_id, max_in_flight, shell = ctx.config.shell.enabled, "executor started");

    'pull: while !shutdown.is_cancelled() {
        let mut messages = match consumer
            .stream()
            .max_messages_per_batch(max_in_flight)
            .heartbeat(Duration::from_secs(5))
            .expires(Duration::from_secs(30))
            .messages()
            .await
        {
            Ok(messages) => messages,
            Err(e) => {
                warn!(error = %e, "cannot pull due events, retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => break 'pull,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue 'pull,
                }
            }
        };
        loop {
            let permit = tokio::select! {
                _ = shutdown.cancelled() => break 'pull,
                permit = permits.clone().acquire_owned() => permit.context("executor semaphore closed")?,
            };
            let next = tokio::select! {
                _ = shutdown.cancelled() => break 'pull,
                next = messages.next() => next,
            };
            match next {
                Some(Ok(message)) => {
                    let ctx = ctx.clone();
                    tasks.spawn(async move {
                        attempt::handle(&ctx, message).await;
                        drop(permit);
                    });
                }
                Some(Err(e)) => {
                    warn!(error = %e, "pulling due events failed, reopening");
                    break;
                }
                None => break,
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    tasks.close();
    info!(in_flight = tasks.len(), "executor stopping");
    if tokio::time::timeout(grace, tasks.wait()).await.is_err() {
        warn!(
            in_flight = tasks.len(),
            "grace period over, unfinished attempts will be redelivered"
        );
    }
    info!("executor stopped");
    Ok(())
}
