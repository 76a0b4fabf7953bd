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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use async_nats::jetstream::kv;
use jetcron_core::control::KillMarker;
use jetcron_io::bucket_follow::{self, BucketView};
use jetcron_io::control;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub struct KillMarkers {
    markers: Mutex<HashMap<String, KillMarker>>,
    synced: AtomicBool,
}

impl KillMarkers {
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
                    self.lock().insert(run_id.to_string(), marker);
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
