//! Configured limits of the gateway, and the live job count that enforces
//! `max_jobs`.
//!
//! The count comes from a watch of `jetcron_jobs` (last value per key, then
//! every change), so a put needs no scan of the bucket. Until the watch has
//! caught up the gateway counts keys the slow way. Several gateways each
//! enforce the limit on their own view, so concurrent creates through
//! different gateways can pass it by a few; a direct `nats kv put` is not
//! counted at all (NATS permissions decide who may do that).

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::kv::{self, Operation};
use futures::{StreamExt as _, TryStreamExt as _};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Default of `--max-jobs`.
pub const DEFAULT_MAX_JOBS: usize = 100_000;
/// Default of `--http-body-limit` (bytes).
pub const DEFAULT_HTTP_BODY_LIMIT: usize = 256 * 1024;

/// What the gateway accepts at most.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Jobs the bucket may hold; creating one more is refused.
    pub max_jobs: usize,
    /// Largest HTTP request body in bytes.
    pub http_body_limit: usize,
    /// How long after its time a fire without a run counts as missed
    /// ([`crate::stats`]); tests shorten it.
    pub missed_grace: chrono::Duration,
    /// How often missed fires are recorded as `fire.missed` events
    /// ([`crate::missed_fire_scan`]); zero turns it off; tests shorten it.
    pub missed_scan_interval: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_jobs: DEFAULT_MAX_JOBS,
            http_body_limit: DEFAULT_HTTP_BODY_LIMIT,
            missed_grace: crate::stats::MISSED_GRACE,
            missed_scan_interval: crate::missed_fire_scan::DEFAULT_SCAN_INTERVAL,
        }
    }
}

/// The ids currently in the bucket, kept by a watch.
#[derive(Clone, Default)]
pub struct JobIndex {
    inner: Arc<RwLock<IndexState>>,
}

#[derive(Default)]
struct IndexState {
    live: HashSet<String>,
    synced: bool,
}

impl JobIndex {
    /// Whether `key` exists and how many keys exist, when the watch has caught up.
    pub fn lookup(&self, key: &str) -> Option<(bool, usize)> {
        let state = self.inner.read().unwrap_or_else(|e| e.into_inner());
        state
            .synced
            .then(|| (state.live.contains(key), state.live.len()))
    }

    fn apply(&self, entry: &kv::Entry) {
        let mut state = self.inner.write().unwrap_or_else(|e| e.into_inner());
        match entry.operation {
            Operation::Put => state.live.insert(entry.key.clone()),
            Operation::Delete | Operation::Purge => state.live.remove(&entry.key),
        };
        if entry.seen_current || entry.delta == 0 {
            state.synced = true;
        }
    }

    fn mark_synced(&self) {
        self.inner.write().unwrap_or_else(|e| e.into_inner()).synced = true;
    }

    /// Follow `bucket` until `shutdown`, reopening the watch when it breaks.
    pub async fn follow(self, bucket: kv::Store, shutdown: CancellationToken) {
        loop {
            if let Err(e) = self.follow_once(&bucket, &shutdown).await {
                warn!(error = %format!("{e:#}"), "job count watch broke, reopening");
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    async fn follow_once(
        &self,
        bucket: &kv::Store,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<()> {
        if bucket
            .status()
            .await
            .context("read job bucket status")?
            .values()
            == 0
        {
            self.mark_synced();
        }
        let mut entries = bucket
            .watch_with_history(">")
            .await
            .context("watch job bucket")?;
        loop {
            let entry = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                entry = entries.next() => entry,
            };
            match entry {
                Some(entry) => self.apply(&entry.context("job bucket watch")?),
                None => anyhow::bail!("job bucket watch ended"),
            }
        }
    }
}

/// Count the keys of `bucket` by listing them (before the index is ready).
pub async fn count_keys(bucket: &kv::Store, key: &str) -> anyhow::Result<(bool, usize)> {
    let keys: Vec<String> = bucket
        .keys()
        .await
        .context("list job keys")?
        .try_collect()
        .await
        .context("list job keys")?;
    Ok((keys.iter().any(|k| k == key), keys.len()))
}
