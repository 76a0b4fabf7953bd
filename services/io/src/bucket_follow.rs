//! Keeping a view of a KV bucket in memory: every current value first, then
//! every change, reopened when the watch breaks. The executors' kill
//! markers follow `jetcron_running` this way (`jetcron_jobs` is read
//! through [`crate::job_feed`], which decodes each definition once).
//!
//! A view is told each entry ([`BucketView::apply`]) and, once, that it has
//! seen everything the bucket held when the watch opened
//! ([`BucketView::synced`]): at once for an empty bucket, otherwise with the
//! entry that has no more pending after it. A reopened watch delivers every
//! current value again, so views must take a value they already hold.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::kv;
use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// What follows a bucket.
pub trait BucketView {
    /// Take in one entry (a put, or a delete or purge marker).
    fn apply(&self, entry: &kv::Entry);
    /// Every value the bucket held has been applied.
    fn synced(&self);
    /// The watch broke: changes may be missed until the next [`Self::synced`].
    fn unsynced(&self) {}
}

/// Follow the keys of `bucket` matching `keys` (a NATS subject filter of
/// keys) into `view` until `shutdown`; `what` names the view in logs.
pub async fn follow_keys(
    bucket: &kv::Store,
    keys: &str,
    view: &impl BucketView,
    what: &str,
    shutdown: &CancellationToken,
) {
    loop {
        if let Err(e) = follow_once(bucket, keys, view, shutdown).await {
            view.unsynced();
            warn!(error = %format!("{e:#}"), "{what} watch broke, reopening");
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

async fn follow_once(
    bucket: &kv::Store,
    keys: &str,
    view: &impl BucketView,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    if holds_none(bucket, keys).await? {
        view.synced();
    }
    let mut entries = bucket
        .watch_with_history(keys)
        .await
        .context("watch bucket")?;
    loop {
        let entry = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            entry = entries.next() => entry,
        };
        let entry = match entry {
            Some(entry) => entry.context("bucket watch")?,
            None => anyhow::bail!("bucket watch ended"),
        };
        view.apply(&entry);
        if entry.seen_current || entry.delta == 0 {
            view.synced();
        }
    }
}

/// Whether no key matching `keys` has a value (then the watch delivers
/// nothing to say it has caught up).
async fn holds_none(bucket: &kv::Store, keys: &str) -> anyhow::Result<bool> {
    let mut subjects = bucket
        .stream
        .info_with_subjects(format!("{}{keys}", bucket.prefix))
        .await
        .context("read bucket subjects")?;
    Ok(subjects
        .next()
        .await
        .transpose()
        .context("read bucket subjects")?
        .is_none())
}
