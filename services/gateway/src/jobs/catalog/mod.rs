//! What the gateway knows of every job without asking the bucket: one small
//! row per key (schedule, zone, state, labels, target type), kept by a watch
//! of `jetcron_jobs` (last value per key, then every change).
//!
//! Two users: the `max_jobs` limit counts from it, so a put needs no scan of
//! the bucket; and the console's job table filters, sorts and pages it, so a
//! page of 50 out of 100,000 jobs costs a walk over memory, not 100,000 KV
//! reads. The bucket stays the source of truth: a job's page reads its entry.
//!
//! The gateway notes its own writes as soon as the bucket answers them, so a
//! create right after another through the same gateway counts both and a
//! pause shows in the table at once (the watch delivers them again later; an
//! older revision never overwrites a newer one). Until the watch has caught
//! up, [`JobCatalog::synced`] is false: the limit counts keys the slow way
//! and the console says the list is loading. Several gateways each keep
//! their own view, so concurrent creates through different gateways can
//! pass the limit by a few; a direct `nats kv put` is not counted at all
//! (NATS permissions decide who may do that).
//!
//! The files: `row` (a job as the table shows it), `compact` (the rows as
//! kept: 40 bytes each, texts kept once, an id index), `table` (the
//! table's queries and pages), `chains` (a job's parents and children).

mod chains;
mod compact;
mod row;
mod table;

use std::sync::{Arc, RwLock};

use anyhow::Context as _;
use async_nats::jetstream::kv;
use chrono::{DateTime, Utc};
use futures::TryStreamExt as _;
use jetcron_core::schedule_lines::SharedLines;
use jetcron_io::job_feed::{self, FeedReceiver, JobEntry, JobView, Written};
use tokio_util::sync::CancellationToken;

pub use chains::{ChainPeer, ChainView};
use compact::CatalogState;
pub use row::JobRow;
pub use table::{RowPage, RowQuery, RowSort};

/// The catalog, shared by the watch and the readers.
#[derive(Clone, Default)]
pub struct JobCatalog {
    inner: Arc<RwLock<CatalogState>>,
    /// The process's parsed schedule lines (a row keeps only the text).
    lines: SharedLines,
}

impl JobCatalog {
    /// An empty catalog parsing schedule lines through `lines`.
    pub fn new(lines: SharedLines) -> Self {
        Self {
            inner: Arc::default(),
            lines,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, CatalogState> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, CatalogState> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The namespaces of the jobs held, in order (`default` for the names
    /// without a dot): what the console offers to choose from.
    pub fn namespaces(&self) -> Vec<String> {
        let state = self.read();
        let namespaces: std::collections::BTreeSet<&str> = state
            .in_id_order()
            .map(|(id, _)| jetcron_core::job::namespace_of(id))
            .collect();
        namespaces.into_iter().map(str::to_string).collect()
    }

    /// Whether the watch has caught up with the bucket.
    pub fn synced(&self) -> bool {
        self.read().synced
    }

    /// Whether `key` exists and how many keys exist, once synced.
    pub fn lookup(&self, key: &str) -> Option<(bool, usize)> {
        let state = self.read();
        state.synced.then(|| (state.get(key).is_some(), state.live))
    }

    /// How many jobs there are.
    pub fn len(&self) -> usize {
        self.read().live
    }

    /// Whether there is no job.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The parents `id` names in `after` (none when unknown or invalid).
    pub fn parents_of(&self, id: &str) -> Vec<String> {
        let state = self.read();
        state
            .get(id)
            .map(|row| row.after().iter().map(|(job, _)| job.to_string()).collect())
            .unwrap_or_default()
    }

    /// Where `id` stands in chains: its parents (each with its state, or
    /// `missing`) and the jobs that name it. Finding the children walks
    /// every row: a job page's cost, not a table's.
    pub fn chain_of(&self, id: &str) -> ChainView {
        self.read().chain_of(id)
    }

    /// Note a put this gateway made: `value` is now `key`'s at `revision`.
    pub fn note_put(&self, key: &str, revision: u64, value: &[u8], at: DateTime<Utc>) {
        let row = JobRow::from_value(key, revision, value, at, &self.lines);
        self.write().record(key, revision, Some(row));
    }

    /// Note a delete this gateway made: `revision` is `key`'s delete marker.
    pub fn note_delete(&self, key: &str, revision: u64) {
        self.write().record(key, revision, None);
    }

    /// The rows `query` asks for.
    pub fn page(&self, query: &RowQuery) -> RowPage {
        // Sorted and read under one guard: a row the watch adds in between
        // would be listed out of order.
        self.write().page(query)
    }

    fn mark_synced(&self) {
        self.write().synced = true;
    }

    /// Keep up with the jobs bucket through `feed` until `shutdown`.
    pub async fn follow(self, feed: FeedReceiver, shutdown: CancellationToken) {
        job_feed::keep(feed, &self, &shutdown).await;
    }
}

impl JobView for JobCatalog {
    fn expect(&self, keys: usize) {
        self.write().reserve(keys);
    }

    fn apply(&self, entry: &JobEntry) {
        if matches!(entry.written, Written::NotChained) {
            return; // not decoded: a feed for chain indexes only
        }
        let row = JobRow::from_entry(entry);
        self.write().record(&entry.key, entry.revision, row);
    }

    fn synced(&self) {
        self.mark_synced();
    }
}

/// Count the keys of `bucket` by listing them (before the catalog is synced).
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
mod tests;
