//! Completion reports of asynchronous targets, through one subscription per
//! executor (`jetcron.runs.*.complete`) instead of one per attempt.
//!
//! An attempt says which run it expects a report for before it calls its
//! target ([`CompletionReports::expect`]), so a report that arrives before
//! the target's "accepted" answer is not missed, and stops expecting when
//! it ends. A subscription per attempt made the call wait for a SUB to
//! reach the server at the fire's instant and cost nats-server a
//! subscription change for every run; reports themselves are rare (only
//! targets that answer "accepted" send one), so every executor seeing every
//! report costs little.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use bytes::Bytes;
use futures::StreamExt as _;
use jetcron_core::subjects;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// By run id, the attempts waiting (the shards of a run share its id).
type Waiting = HashMap<String, Vec<(u64, mpsc::UnboundedSender<Bytes>)>>;

/// The runs whose completion reports attempts here are waiting for.
#[derive(Debug, Default)]
pub struct CompletionReports {
    next_id: AtomicU64,
    waiting: Mutex<Waiting>,
}

/// Reports for one run while an attempt waits for them; dropping it stops.
pub struct Expected {
    reports: Arc<CompletionReports>,
    run_id: String,
    id: u64,
    pub payloads: mpsc::UnboundedReceiver<Bytes>,
}

impl Drop for Expected {
    fn drop(&mut self) {
        let mut waiting = self.reports.lock();
        if let Some(entries) = waiting.get_mut(&self.run_id) {
            entries.retain(|(id, _)| *id != self.id);
            if entries.is_empty() {
                waiting.remove(&self.run_id);
            }
        }
    }
}

impl CompletionReports {
    /// Subscribe to every completion subject; the subscription is in place
    /// on the server when this returns (it is flushed), before any attempt.
    pub async fn subscribe(client: &async_nats::Client) -> anyhow::Result<async_nats::Subscriber> {
        let subscriber = client
            .subscribe(subjects::RUN_COMPLETE_SUBJECTS)
            .await
            .context("subscribe to completion reports")?;
        client
            .flush()
            .await
            .context("flush the completion subscription")?;
        Ok(subscriber)
    }

    /// Hand each report to the attempts expecting its run, until `shutdown`
    /// or the subscription ends. The client subscribes again by itself after
    /// a reconnect.
    pub async fn route(&self, mut reports: async_nats::Subscriber, shutdown: CancellationToken) {
        loop {
            let report = tokio::select! {
                _ = shutdown.cancelled() => return,
                report = reports.next() => report,
            };
            let Some(report) = report else {
                tracing::warn!("the completion report subscription ended");
                return;
            };
            let Some(run_id) = subjects::run_of_complete_subject(report.subject.as_str()) else {
                continue;
            };
            if let Some(entries) = self.lock().get(run_id) {
                for (_, sender) in entries {
                    let _ = sender.send(report.payload.clone());
                }
            }
        }
    }

    /// Start expecting reports for `run_id`.
    pub fn expect(self: &Arc<Self>, run_id: &str) -> Expected {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, payloads) = mpsc::unbounded_channel();
        self.lock()
            .entry(run_id.to_string())
            .or_default()
            .push((id, sender));
        Expected {
            reports: Arc::clone(self),
            run_id: run_id.to_string(),
            id,
            payloads,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expectation_ends_with_its_attempt() {
        let reports = Arc::new(CompletionReports::default());
        let first = reports.expect("run-1");
        let second = reports.expect("run-1");
        assert_eq!(reports.lock()["run-1"].len(), 2);
        drop(first);
        assert_eq!(reports.lock()["run-1"].len(), 1);
        drop(second);
        assert!(reports.lock().is_empty());
    }
}
