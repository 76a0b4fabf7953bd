//! The tasks of one service, by what stopping means for each.
//!
//! A service runs three kinds of task, and a stop treats them differently:
//! work it must finish ([`TaskKind::Drain`]: an executor's attempts, waited
//! for within the shutdown grace), helpers that serve that work until it is
//! over ([`TaskKind::Background`]: kill listeners, watches, the clock check;
//! told to stop once the drained work ended, and waited for briefly), and
//! tasks that hold nothing worth waiting for ([`TaskKind::Abort`]: aborted
//! at the stop). Written once here, so that every service stops the same
//! way and says so in its log.

use std::future::Future;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

/// What stopping means for a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// Work to finish: waited for within the service's grace.
    Drain,
    /// Serves the drained work: stopped (its token cancelled) once that is
    /// over, and waited for briefly.
    Background,
    /// Holds nothing worth waiting for: aborted at the stop.
    Abort,
}

/// The running tasks of one service.
#[derive(Default)]
pub struct ServiceTasks {
    drained: TaskTracker,
    background: TaskTracker,
    background_stop: CancellationToken,
    aborted: Vec<AbortHandle>,
}

impl ServiceTasks {
    /// Run `task` as a task of `kind`. `name` is logged when it fails; a
    /// background task must end when [`ServiceTasks::background_stop`] is
    /// cancelled.
    pub fn spawn(
        &mut self,
        kind: TaskKind,
        name: &'static str,
        task: impl Future<Output = anyhow::Result<()>> + Send + 'static,
    ) {
        let logged = async move {
            if let Err(e) = task.await {
                warn!(error = %format!("{e:#}"), "{name} stopped");
            }
        };
        match kind {
            TaskKind::Drain => {
                self.drained.spawn(logged);
            }
            TaskKind::Background => {
                self.background.spawn(logged);
            }
            TaskKind::Abort => self.aborted.push(tokio::spawn(logged).abort_handle()),
        }
    }

    /// Where drained work is spawned from outside (a pull loop's attempts).
    pub fn drained(&self) -> &TaskTracker {
        &self.drained
    }

    /// Cancelled once the drained work is over: background tasks end then.
    pub fn background_stop(&self) -> CancellationToken {
        self.background_stop.clone()
    }

    /// Wait up to `within` for the drained work (no more is taken); whether
    /// it all ended.
    pub async fn drain(&self, within: Duration) -> bool {
        self.drained.close();
        tokio::time::timeout(within, self.drained.wait())
            .await
            .is_ok()
    }

    /// How many drained tasks are still running.
    pub fn draining(&self) -> usize {
        self.drained.len()
    }

    /// After the drain: stop the background tasks and wait up to `within`
    /// for them, then abort what is left to abort.
    pub async fn stop(self, within: Duration) {
        self.background_stop.cancel();
        self.background.close();
        let _ = tokio::time::timeout(within, self.background.wait()).await;
        // The rest is aborted as the tasks are dropped.
    }
}

impl Drop for ServiceTasks {
    /// A service that ends by an error (`?`) stops its tasks too.
    fn drop(&mut self) {
        self.background_stop.cancel();
        for task in &self.aborted {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn drained_work_is_waited_for_then_background_stops_and_the_rest_is_aborted() {
        let mut tasks = ServiceTasks::default();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        let done = done_tx.clone();
        tasks.spawn(TaskKind::Drain, "work", async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            done.send("work").ok();
            Ok(())
        });
        let (stop, done) = (tasks.background_stop(), done_tx.clone());
        tasks.spawn(TaskKind::Background, "helper", async move {
            stop.cancelled().await;
            done.send("helper").ok();
            Ok(())
        });
        let done = done_tx;
        tasks.spawn(TaskKind::Abort, "forever", async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            done.send("forever").ok();
            Ok(())
        });
        assert!(
            !tasks.drain(Duration::from_secs(1)).await,
            "2 s of work in 1 s"
        );
        assert_eq!(tasks.draining(), 1);
        assert!(tasks.drain(Duration::from_secs(5)).await);
        assert_eq!(done_rx.recv().await, Some("work"));
        tasks.stop(Duration::from_secs(5)).await;
        assert_eq!(done_rx.recv().await, Some("helper"));
        tokio::time::sleep(Duration::from_secs(7200)).await;
        assert!(done_rx.try_recv().is_err(), "the aborted task never ended");
    }
}
