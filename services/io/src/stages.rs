//! The services of one process, and the order they stop in.
//!
//! `jetcron all` runs the four services side by side, and the testkit's
//! in-process stack runs them the same way, so that tests stop services in
//! the order production does. Stopping them all at
//! once would race: the ticker could publish fires no executor takes any
//! more, and the executors could record run events the projector no longer
//! writes. So a shutdown (a signal, or any service ending on its own) stops
//! them one stage at a time and waits for each: the ticker first (no new
//! fires), then the executors (in-flight runs finish within their grace, the
//! rest is handed back), then the projector (its batch is flushed to
//! ClickHouse), then the gateway, then the metrics endpoint.

use futures::future::select_all;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

/// When a service stops, earlier stages first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    Ticker,
    Executor,
    Projector,
    Gateway,
    Metrics,
}

struct Running {
    stage: Stage,
    stop: CancellationToken,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

/// The running services of this process.
#[derive(Default)]
pub struct Services {
    running: Vec<Running>,
}

impl Services {
    /// Run `service` as the service of `stage`; it must stop when `stop` is
    /// cancelled.
    pub fn spawn(
        &mut self,
        stage: Stage,
        stop: CancellationToken,
        service: impl std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    ) {
        self.running.push(Running {
            stage,
            stop,
            task: Some(tokio::spawn(service)),
        });
    }

    /// Run until `shutdown` is asked or a service ends, then stop every
    /// service in stage order, each after the one before has ended. The
    /// first failure is the result.
    pub async fn run(mut self, shutdown: &CancellationToken) -> anyhow::Result<()> {
        let ended = self.first_to_end(shutdown).await;
        shutdown.cancel();
        let stopped = self.stop().await;
        ended.and(stopped)
    }

    /// Wait for `shutdown` or for a service to end on its own; that
    /// service's failure, if it failed.
    async fn first_to_end(&mut self, shutdown: &CancellationToken) -> anyhow::Result<()> {
        let (positions, tasks): (Vec<usize>, Vec<_>) = self
            .running
            .iter_mut()
            .enumerate()
            .filter_map(|(i, r)| r.task.as_mut().map(|t| (i, t)))
            .unzip();
        if tasks.is_empty() {
            return Ok(());
        }
        let (position, joined) = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            (joined, index, _) = select_all(tasks) => (positions[index], joined),
        };
        let running = &mut self.running[position];
        running.task = None;
        let stage = running.stage;
        match joined.map_err(anyhow::Error::from).and_then(|r| r) {
            Ok(()) => {
                info!(?stage, "service ended, stopping the others");
                Ok(())
            }
            Err(e) => {
                error!(?stage, error = %format!("{e:#}"), "service failed, stopping the others");
                Err(e)
            }
        }
    }

    /// Stop every service in stage order, each after the one before has
    /// ended; the first failure is the result.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let mut result = Ok(());
        self.running.sort_by_key(|r| r.stage);
        for running in &mut self.running {
            running.stop.cancel();
            let Some(task) = running.task.take() else {
                continue;
            };
            info!(stage = ?running.stage, "stopping");
            let outcome = task.await.map_err(anyhow::Error::from).and_then(|r| r);
            match outcome {
                Ok(()) => info!(stage = ?running.stage, "stopped"),
                Err(e) => {
                    error!(stage = ?running.stage, error = %format!("{e:#}"), "service failed while stopping");
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            }
        }
        result
    }

    /// Stop every service at once, without waiting (a test that failed).
    pub fn abort(&mut self) {
        for running in &mut self.running {
            running.stop.cancel();
            if let Some(task) = running.task.take() {
                task.abort();
            }
        }
    }
}
