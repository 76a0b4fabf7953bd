//! Configured limits of the gateway, and the live job count that enforces
//! `max_jobs`.
//!
//! The count comes from a watch of `jetcron_jobs` (last value per key, then
//! every change), so a put needs no scan of the bucket. Until the watch has
//! caught up the gateway counts keys the slow way. The gateway notes its own
//! writes in the index as soon as the bucket answers them, so a create right
//! after another through the same gateway counts both (the watch delivers
//! them again later; an older revision never overwrites a newer one).
//! Several gateways each
//! enforce the limit on their own view, so concurrent creates through
//! different gateways can pass it by a few; a direct `nats kv put` is not
//! counted at all (NATS permissions decide who may do that).

use std::collections::HashMap;
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
    /// Latest known revision of each key, and whether it holds a job (a
    /// delete keeps its revision so a late put of an older one is ignored).
    keys: HashMap<String, (u64, bool)>,
    live: usize,
    synced: bool,
}

impl IndexState {
    fn record(&mut self, key: &str, revision: u64, live: bool) {
        let was_live = match self.keys.get_mut(key) {
            Some((known, _)) if *known >= revision => return,
            Some((known, was)) => {
                let before = *was;
                (*known, *was) = (revision, live);
                before
            }
            None => {
                self.keys.insert(key.to_owned(), (revision, live));
                false
            }
        };
        match (was_live, live) {
            (false, true) => self.live += 1,
            (true, false) => self.live -= 1,
            _ => {}
        }
    }
}

impl JobIndex {
    /// Whether `key` exists and how many keys exist, when the watch has caught up.
    pub fn lookup(&self, key: &str) -> Option<(bool, usize)> {
        let state = self.inner.read().unwrap_or_else(|e| e.into_inner());
        state.synced.then(|| {
            let exists = state.keys.get(key).is_some_and(|(_, live)| *live);
            (exists, state.live)
        })
    }

    /// Note a write this gateway made: `key` at `revision` now holds a job
    /// (`live`) or a delete marker.
    pub fn note_write(&self, key: &str, revision: u64, live: bool) {
        let mut state = self.inner.write().unwrap_or_else(|e| e.into_inner());
        state.record(key, revision, live);
    }

    fn apply(&self, entry: &kv::Entry) {
        let mut state = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let live = entry.operation == Operation::Put;
        state.record(&entry.key, entry.revision, live);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_writes_count_at_once_and_late_older_revisions_change_nothing() {
        let index = JobIndex::default();
        index.mark_synced();
        index.note_write("a", 3, true);
        index.note_write("b", 4, true);
        assert_eq!(index.lookup("a"), Some((true, 2)));
        // The watch delivers the same and older revisions later.
        let mut state = index.inner.write().expect("index lock");
        state.record("a", 1, true);
        state.record("a", 3, true);
        state.record("b", 5, false);
        state.record("b", 4, true);
        drop(state);
        assert_eq!(index.lookup("a"), Some((true, 1)));
        assert_eq!(index.lookup("b"), Some((false, 1)));
        index.note_write("b", 6, true);
        assert_eq!(index.lookup("b"), Some((true, 2)));
    }
}
