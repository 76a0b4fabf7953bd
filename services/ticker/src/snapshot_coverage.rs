//! Whether every shard has a snapshot in the store, looked at until it has.
//!
//! A replica keeps the jobs of shards owned elsewhere until ownership has
//! settled ([`crate::shard_holdings`]). While some shard has no snapshot, taking
//! that shard later costs a pass over the whole bucket (minutes at ten
//! million jobs), so a replica waits out twice its own first read before
//! it drops anything. Once every shard has one, taking a shard later costs
//! a read of its object, and that long wait only holds memory: ten million
//! jobs on three replicas settled 728 s after the start with it, and the
//! snapshots were all written within a minute of the first read.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::snapshot_store::SnapshotStore;

/// How often the store is looked at until every shard has a snapshot
/// (sixteen lookups of an object's last description each time).
const LOOK_EVERY: Duration = Duration::from_secs(5);

/// `true` once every shard of `store` has a snapshot written for the
/// current jobs bucket; never with snapshots off (`store` is `None`).
/// Looks until then, or until `stop`.
pub fn follow(store: Option<SnapshotStore>, stop: CancellationToken) -> watch::Receiver<bool> {
    let (covered_tx, covered) = watch::channel(false);
    if let Some(store) = store {
        tokio::spawn(async move {
            loop {
                match store.every_shard_written().await {
                    Ok(true) => {
                        info!("every shard has a snapshot: shards owned elsewhere go after the lease's quiet alone");
                        let _ = covered_tx.send(true);
                        return;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        debug!(error = %format!("{e:#}"), "cannot look at the shards' snapshots")
                    }
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = covered_tx.closed() => return,
                    _ = tokio::time::sleep(LOOK_EVERY) => {}
                }
            }
        });
    }
    covered
}
