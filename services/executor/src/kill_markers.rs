//! The kill requests of `jetcron_running` (`kill.<run_id>`), followed in
//! memory, so that an attempt checks for one without a KV read: a read per
//! attempt was two of the ten messages nats-server handled per run at
//! 10,000 runs/s, and a held fire can now look at the very instant it
//! starts instead of a read's round trip before it.
//!
//! While the watch is not caught up (start-up, or reopening after it broke)
//! an attempt that finds no marker here reads the key itself, as before: a
//! request made meanwhile is never missed. A request made just before an
//! attempt registers reaches it through the broadcast on
//! `jetcron.control.kill.<run_id>` ([`crate::running`]), which is published
//! after the marker is stored.
//!
//! A marker leaves the bucket when its key reaches the bucket's `max_age`,
//! and no delete reaches the watch then; so the map drops markers older
//! than that age itself, every [`PRUNE_EVERY`] markers added.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_nats::jetstream::kv;
use jetcron_core::clock::Clock;
use jetcron_core::control::KillMarker;
use jetcron_io::bucket_follow::{self, BucketView};
use jetcron_io::control;
use tokio_util::sync::CancellationToken;

/// Markers added between two looks for expired ones.
const PRUNE_EVERY: u64 = 1024;

pub struct KillMarkers {
    markers: Mutex<HashMap<String, KillMarker>>,
    synced: AtomicBool,
    /// The running bucket's `max_age`: older markers are gone from it.
    keep_for: std::time::Duration,
    clock: Arc<dyn Clock>,
    added: AtomicU64,
}

impl KillMarkers {
    /// Markers kept `keep_for` after they were requested (the running
    /// bucket's `max_age`) by `clock`.
    pub fn keeping_for(keep_for: std::time::Duration, clock: Arc<dyn Clock>) -> Self {
        Self {
            markers: Mutex::default(),
            synced: AtomicBool::new(false),
            keep_for,
            clock,
            added: AtomicU64::new(0),
        }
    }

    fn add(&self, run_id: &str, marker: KillMarker) {
        self.lock().insert(run_id.to_string(), marker);
        if self.added.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            self.prune(self.clock.now().timestamp_millis());
        }
    }

    /// Drop the markers requested more than `keep_for` before `now_ms`.
    fn prune(&self, now_ms: i64) {
        let keep_ms = i64::try_from(self.keep_for.as_millis()).unwrap_or(i64::MAX);
        self.lock()
            .retain(|_, marker| now_ms.saturating_sub(marker.requested_at_ms) <= keep_ms);
    }

    /// Follow the kill requests of `running` until `shutdown`.
    pub async fn follow(&self, running: &kv::Store, shutdown: &CancellationToken) {
        bucket_follow::follow_keys(
            running,
            jetcron_core::subjects::KILL_KEYS,
            self,
            "kill request",
            shutdown,
        )
        .await;
    }

    /// The kill request of `run_id`, if one was made.
    pub async fn requested(
        &self,
        running: &kv::Store,
        run_id: &str,
    ) -> anyhow::Result<Option<KillMarker>> {
        match self.known(run_id) {
            Some(known) => Ok(known),
            None => control::kill_requested(running, run_id).await,
        }
    }

    /// The kill request of `run_id` as known in memory, without waiting:
    /// `None` while the watch is not caught up (then only
    /// [`KillMarkers::requested`] can tell).
    pub fn known(&self, run_id: &str) -> Option<Option<KillMarker>> {
        if let Some(marker) = self.lock().get(run_id) {
            return Some(Some(marker.clone()));
        }
        self.synced.load(Ordering::Acquire).then_some(None)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, KillMarker>> {
        self.markers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl BucketView for KillMarkers {
    fn apply(&self, entry: &kv::Entry) {
        let Some(run_id) = jetcron_core::subjects::run_of_kill_key(&entry.key) else {
            return;
        };
        match entry.operation {
            kv::Operation::Put => {
                if let Ok(marker) = serde_json::from_slice::<KillMarker>(&entry.value) {
                    self.add(run_id, marker);
                }
            }
            kv::Operation::Delete | kv::Operation::Purge => {
                self.lock().remove(run_id);
            }
        }
    }

    fn synced(&self) {
        self.synced.store(true, Ordering::Release);
    }

    fn unsynced(&self) {
        self.synced.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetcron_core::clock::ManualClock;

    fn marker(run_id: &str, requested_at_ms: i64) -> KillMarker {
        KillMarker {
            run_id: run_id.to_string(),
            requested_at_ms,
            reason: "test".into(),
        }
    }

    /// Markers past the bucket's `max_age` are gone from the bucket without
    /// a delete the watch could see: the map drops them itself.
    #[test]
    fn markers_older_than_the_buckets_max_age_are_dropped() {
        let start = chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("instant");
        let clock = ManualClock::new(start);
        let markers = KillMarkers::keeping_for(
            std::time::Duration::from_secs(3600),
            Arc::new(clock.clone()),
        );
        let old_ms = start.timestamp_millis();
        markers.add("old", marker("old", old_ms));
        clock.advance(chrono::Duration::minutes(30));
        markers.add("recent", marker("recent", clock.now().timestamp_millis()));
        clock.advance(chrono::Duration::minutes(45));
        // 75 minutes after "old", 45 after "recent": the next look drops
        // only "old".
        for i in 2..PRUNE_EVERY {
            let id = format!("run-{i}");
            markers.add(&id, marker(&id, clock.now().timestamp_millis()));
        }
        assert_eq!(markers.lock().len(), PRUNE_EVERY as usize - 1);
        markers.synced();
        assert!(
            matches!(markers.known("old"), Some(None)),
            "old marker kept"
        );
        assert!(matches!(markers.known("recent"), Some(Some(_))));
    }
}
