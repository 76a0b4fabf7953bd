//! The ticker: watches `jetcron_jobs`, decides when each job is due, and
//! publishes one due event per (job, scheduled time) on `jetcron.due.<pool>.<job>`
//! in stream `JETCRON_DUE`.
//!
//! Shape: one task owns a [`plan::FirePlan`] (pure), fed by a KV watch
//! ([`watch`]) and drained by the clock; [`publish`] stores each due event with
//! `Nats-Msg-Id` = run id, so a second ticker replica (or a retry after a lost
//! ack) deciding the same fire is dropped by JetStream's duplicate window. A fire
//! is advanced past only after JetStream acknowledged it, so NATS being away
//! delays fires but loses none while the ticker lives.
//!
//! Owns: nothing exclusively; creates `jetcron_jobs` and `JETCRON_DUE` if missing.

pub mod plan;
pub mod publish;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use jetcron_core::clock::Clock;
use jetcron_core::topology::{self, TopologyOptions};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::plan::FirePlan;
use crate::watch::JobChange;

/// Ticker settings.
#[derive(Debug, Clone, Default)]
pub struct TickerConfig {
    pub topology: TopologyOptions,
}

/// Longest the loop sleeps without looking at the clock again.
const MAX_IDLE: Duration = Duration::from_millis(500);
/// Pause before retrying a failed publish.
const PUBLISH_RETRY: Duration = Duration::from_millis(250);

/// Run the ticker until `shutdown` is cancelled.
pub async fn run(
    config: TickerConfig,
    client: async_nats::Client,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let js = async_nats::jetstream::new(client);
    let jobs = topology::ensure_jobs_bucket(&js, &config.topology).await?;
    topology::ensure_due_stream(&js, &config.topology).await?;
    let (changes_tx, mut changes) = tokio::sync::mpsc::channel(1024);
    let watcher = tokio::spawn(watch::watch_jobs(jobs, changes_tx, shutdown.clone()));
    let mut plan = FirePlan::default();
    info!("ticker started");

    loop {
        let now = clock.now();
        if let Some(fire) = plan.peek_due(now) {
            match publish::publish_due(&js, &fire).await {
                Ok(()) => plan.fired(&fire),
                Err(e) => {
                    warn!(job_id = %fire.job.spec.id, error = %format!("{e:#}"), "due event not stored, retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(PUBLISH_RETRY) => {}
                    }
                }
            }
            // Keep applying job changes even while a burst of fires drains.
            while let Ok(change) = changes.try_recv() {
                apply(&mut plan, change, clock.now());
            }
            continue;
        }
        let idle = plan
            .next_due_at()
            .and_then(|at| (at - now).to_std().ok())
            .map_or(MAX_IDLE, |d| d.min(MAX_IDLE));
        tokio::select! {
            _ = shutdown.cancelled() => break,
            change = changes.recv() => match change {
                Some(change) => apply(&mut plan, change, clock.now()),
                None => break,
            },
            _ = tokio::time::sleep(idle) => {}
        }
    }
    shutdown.cancel();
    watcher
        .await
        .context("join job watcher")?
        .context("job watcher")?;
    info!(jobs = plan.len(), "ticker stopped");
    Ok(())
}

fn apply(plan: &mut FirePlan, change: JobChange, now: chrono::DateTime<chrono::Utc>) {
    match change {
        JobChange::Put { job, revision } => {
            info!(job_id = %job.spec.id, revision, schedule = %job.spec.schedule, paused = job.spec.paused, "job scheduled");
            plan.upsert(*job, revision, now);
        }
        JobChange::Removed { job_id } => {
            if plan.remove(&job_id) {
                info!(job_id = %job_id, "job unscheduled");
            }
        }
    }
}
