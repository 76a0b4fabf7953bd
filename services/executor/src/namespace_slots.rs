//! A namespace's `max_concurrent_runs` (its target policy), over every
//! executor: fires beyond it wait for a run to end, none is dropped or
//! skipped.
//!
//! Slot `i` of namespace `ns` is the key `slot.<ns>.<i>` of
//! `jetcron_running` (`i` below the limit). A run takes a free one with a
//! compare-and-swap (a create, or an update at the revision seen) just
//! before its call, keeps it alive while the call lasts (its expiry pushed
//! back every progress interval) and deletes it when its target returns; a
//! dead executor's slot expires after an ack wait, as its fires come to
//! another executor. A slot is free when absent, deleted or expired.
//!
//! Every executor follows the `slot.>` keys in memory (as it follows kill
//! requests), so a fire looks for a free slot without reading the bucket
//! and a waiting fire wakes as soon as a slot is freed anywhere (or every
//! second). Within an executor the fires of a namespace wait in line, one
//! looking at a time, so a burst of thousands makes no storm of tries;
//! across executors the first write wins. Only namespaces whose policy sets
//! the limit pay for it: one write before and one after each call.
//!
//! Bounds, written in docs/security.md: expiries are this host's clock, so
//! an executor whose clock runs ahead of another's by more than the slot's
//! life (a few seconds; the clock check stops it calling long before) could
//! take a live slot; a stalled executor's slot expires while its call may
//! still be under way, so after a pause the limit can be passed by the
//! calls that resume.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context as _;

use async_nats::jetstream::{kv, AckKind};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use jetcron_core::subjects;
use jetcron_io::bucket_follow::{self, BucketView};
use jetcron_io::retry::LogLimiter;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::lease::Delivery;
use crate::ExecutorContext;

/// How often a waiting fire looks again without being told of a change.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// The value of a taken slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlotHolder {
    pub run_id: String,
    pub executor_id: String,
    pub expires_at_ms: i64,
}

/// A slot key as last seen: its revision, and its holder (`None`: deleted,
/// or a value that is nobody's).
#[derive(Debug, Clone)]
struct Seen {
    revision: u64,
    holder: Option<SlotHolder>,
}

/// Where a free slot was found: its key, and the revision to write at
/// (`None`: never written, so created).
#[derive(Debug, Clone, PartialEq)]
struct FreeSlot {
    key: String,
    revision: Option<u64>,
}

/// The slots of every namespace, followed in memory.
#[derive(Default)]
pub struct NamespaceSlots {
    seen: RwLock<HashMap<String, Seen>>,
    /// Each namespace's line of fires waiting here.
    lines: Mutex<HashMap<String, Arc<Line>>>,
}

/// A namespace's fires waiting at this executor: one looks at a time, and
/// it is told when one of the namespace's slots is freed.
#[derive(Default)]
struct Line {
    turn: tokio::sync::Mutex<()>,
    freed: Notify,
}

impl BucketView for NamespaceSlots {
    fn apply(&self, entry: &kv::Entry) {
        let holder = match entry.operation {
            kv::Operation::Put => serde_json::from_slice(&entry.value).ok(),
            kv::Operation::Delete | kv::Operation::Purge => None,
        };
        let freed = holder.is_none();
        self.apply_seen(&entry.key, entry.revision, holder);
        // A take or a keep-alive frees nothing; an expiry is seen by the
        // waiting fire's next look.
        if freed {
            if let Some(line) = namespace_of_key(&entry.key).and_then(|ns| self.line_if_any(ns)) {
                line.freed.notify_waiters();
            }
        }
    }

    fn synced(&self) {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        for line in lines.values() {
            line.freed.notify_waiters();
        }
    }
}

/// The namespace of a slot key (`slot.<ns>.<i>`).
fn namespace_of_key(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("slot.")?;
    rest.rsplit_once('.').map(|(namespace, _)| namespace)
}

impl NamespaceSlots {
    /// Follow the slots of `running` (`jetcron_running`) until `shutdown`.
    pub async fn follow(&self, running: &kv::Store, shutdown: &CancellationToken) {
        bucket_follow::follow_keys(
            running,
            subjects::NAMESPACE_SLOT_KEYS,
            self,
            "namespace run slots",
            shutdown,
        )
        .await;
    }

    /// Take in `key` at `revision`, unless a later revision is known.
    fn apply_seen(&self, key: &str, revision: u64, holder: Option<SlotHolder>) {
        let mut seen = self.seen.write().unwrap_or_else(|e| e.into_inner());
        if seen.get(key).is_none_or(|known| known.revision < revision) {
            seen.insert(key.to_string(), Seen { revision, holder });
        }
    }

    /// The free slots among the first `max` of `namespace` at `now`, as
    /// last seen.
    fn free(&self, namespace: &str, max: u32, now: DateTime<Utc>) -> Vec<FreeSlot> {
        let seen = self.seen.read().unwrap_or_else(|e| e.into_inner());
        (0..max)
            .filter_map(|index| {
                let key = subjects::namespace_slot_key(namespace, index);
                let revision = match seen.get(&key) {
                    None => None,
                    Some(Seen {
                        revision,
                        holder: Some(holder),
                    }) if holder.expires_at_ms > now.timestamp_millis() => return None,
                    Some(Seen { revision, .. }) => Some(*revision),
                };
                Some(FreeSlot { key, revision })
            })
            .collect()
    }

    fn line_of(&self, namespace: &str) -> Arc<Line> {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.entry(namespace.to_string()).or_default().clone()
    }

    fn line_if_any(&self, namespace: &str) -> Option<Arc<Line>> {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.get(namespace).cloned()
    }

    /// Take in what the bucket holds at `key` now, read after a write lost
    /// its compare-and-swap: the view was behind (a value or marker aged
    /// out of the bucket is never told by the watch).
    fn apply_read(&self, key: &str, entry: Option<&kv::Entry>) {
        let mut seen = self.seen.write().unwrap_or_else(|e| e.into_inner());
        match entry {
            None => {
                seen.remove(key);
            }
            Some(entry) => {
                let holder = match entry.operation {
                    kv::Operation::Put => serde_json::from_slice(&entry.value).ok(),
                    kv::Operation::Delete | kv::Operation::Purge => None,
                };
                seen.insert(
                    key.to_string(),
                    Seen {
                        revision: entry.revision,
                        holder,
                    },
                );
            }
        }
    }

    /// Take a slot of `namespace` for `run_id`, waiting in line (the
    /// delivery kept alive) while none is free; `Some(None)` when the
    /// namespace has no limit (or no more), `None` when the delivery was
    /// handed back meanwhile (a shutdown) or its lease lost.
    pub(crate) async fn take(
        &self,
        ctx: &ExecutorContext,
        message: &Delivery,
        namespace: &str,
        run_id: &str,
        hand_back: &CancellationToken,
    ) -> Option<Option<HeldSlot>> {
        if ctx.policies.max_concurrent_runs(namespace).is_none() {
            return Some(None);
        }
        let waiting = metrics::gauge!("jetcron_executor_waiting_for_run_slot");
        waiting.increment(1.0);
        let stop = if hand_back.is_cancelled() {
            ctx.interrupt.cancelled()
        } else {
            hand_back.cancelled()
        };
        let line = self.line_of(namespace);
        let taking = crate::kept_alive::kept_alive(ctx, message, async {
            tokio::select! {
                taken = self.take_in_line(ctx, message, &line, namespace, run_id) => Some(taken),
                _ = stop => None,
            }
        })
        .await;
        waiting.decrement(1.0);
        match taking {
            Some(taken) => taken,
            None => {
                message.settle(AckKind::Nak(None)).await;
                None
            }
        }
    }

    /// [`Self::take`]'s wait, in the namespace's line.
    async fn take_in_line(
        &self,
        ctx: &ExecutorContext,
        message: &Delivery,
        line: &Line,
        namespace: &str,
        run_id: &str,
    ) -> Option<Option<HeldSlot>> {
        let _turn = line.turn.lock().await;
        let mut failures = LogLimiter::per_10s();
        loop {
            let Some(max) = ctx.policies.max_concurrent_runs(namespace) else {
                return Some(None);
            };
            if !message.is_ours() {
                return None;
            }
            let freed = line.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.try_take(ctx, namespace, max, run_id).await {
                Ok(Some(held)) => return Some(Some(held)),
                Ok(None) => {}
                Err(e) => {
                    if let Some(failures) = failures.admit() {
                        warn!(namespace, failures, error = %format!("{e:#}"), "cannot take a run slot of the namespace, trying again");
                    }
                }
            }
            tokio::select! {
                _ = freed => {}
                _ = tokio::time::sleep(LOOK_AGAIN) => {}
            }
        }
    }

    /// One look: write `run_id` into the first free slot that takes it;
    /// `Ok(None)` when every slot is held (or was taken meanwhile).
    async fn try_take(
        &self,
        ctx: &ExecutorContext,
        namespace: &str,
        max: u32,
        run_id: &str,
    ) -> anyhow::Result<Option<HeldSlot>> {
        let now = ctx.clock.now();
        let life = slot_life(ctx);
        let holder = SlotHolder {
            run_id: run_id.to_string(),
            executor_id: ctx.config.executor_id.clone(),
            expires_at_ms: expiry(now, life),
        };
        let value: Bytes = serde_json::to_vec(&holder)?.into();
        for free in self.free(namespace, max, now) {
            let Some(revision) = write_at(&ctx.running, &free, value.clone()).await? else {
                let entry = ctx
                    .running
                    .entry(free.key.as_str())
                    .await
                    .with_context(|| format!("read {}", free.key))?;
                self.apply_read(&free.key, entry.as_ref());
                continue;
            };
            debug!(key = %free.key, "namespace run slot taken");
            // Seen at once: the next fire in line looks before the watch
            // brings the write.
            self.apply_seen(&free.key, revision, Some(holder.clone()));
            return Ok(Some(HeldSlot::kept(ctx, free.key, revision, holder)));
        }
        Ok(None)
    }
}

/// How long a slot lives without being kept alive: the ack wait, after
/// which a dead executor's fires come to another executor anyway.
fn slot_life(ctx: &ExecutorContext) -> Duration {
    ctx.config.ack_wait
}

fn expiry(now: DateTime<Utc>, life: Duration) -> i64 {
    now.timestamp_millis() + life.as_millis() as i64
}

/// Write `value` at `free` by compare-and-swap; `Ok(None)` when another
/// writer was first.
async fn write_at(store: &kv::Store, free: &FreeSlot, value: Bytes) -> anyhow::Result<Option<u64>> {
    let written = match free.revision {
        Some(revision) => match store.update(&free.key, value, revision).await {
            Ok(revision) => Some(revision),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => None,
            Err(e) => return Err(anyhow::Error::from(e).context(format!("take {}", free.key))),
        },
        None => match store.create(&free.key, value).await {
            Ok(revision) => Some(revision),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => None,
            Err(e) => return Err(anyhow::Error::from(e).context(format!("take {}", free.key))),
        },
    };
    Ok(written)
}

/// A slot held by one run: kept alive by a task of its own until dropped,
/// then deleted (at the revision last written, so a slot taken over after
/// it expired is left alone).
pub struct HeldSlot {
    done: CancellationToken,
}

impl HeldSlot {
    fn kept(ctx: &ExecutorContext, key: String, revision: u64, holder: SlotHolder) -> Self {
        let done = CancellationToken::new();
        let keeping = KeptSlot {
            store: ctx.running.clone(),
            clock: ctx.clock.clone(),
            every: ctx.config.progress_interval,
            life: slot_life(ctx),
            key,
            revision,
            holder,
        };
        tokio::spawn(keeping.until(done.clone()));
        Self { done }
    }
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        self.done.cancel();
    }
}

/// What keeps a held slot alive and frees it.
struct KeptSlot {
    store: kv::Store,
    clock: Arc<dyn jetcron_core::clock::Clock>,
    every: Duration,
    life: Duration,
    key: String,
    revision: u64,
    holder: SlotHolder,
}

impl KeptSlot {
    async fn until(mut self, done: CancellationToken) {
        loop {
            tokio::select! {
                _ = done.cancelled() => break,
                _ = tokio::time::sleep(self.every) => {}
            }
            if !self.extend().await {
                // Taken over after it expired: not ours to delete.
                return;
            }
        }
        self.free().await;
    }

    /// Push the expiry back; `false` once the slot is another run's.
    async fn extend(&mut self) -> bool {
        self.holder.expires_at_ms = expiry(self.clock.now(), self.life);
        let Ok(value) = serde_json::to_vec(&self.holder) else {
            return true;
        };
        match self
            .store
            .update(&self.key, value.into(), self.revision)
            .await
        {
            Ok(revision) => {
                self.revision = revision;
                true
            }
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => self.still_ours().await,
            // Not answered (an election): tried again at the next interval,
            // at the same revision.
            Err(_) => true,
        }
    }

    /// After a lost compare-and-swap: whether the slot still holds this
    /// run (an earlier write went through but its answer was lost), taking
    /// its revision; `false` once it is another run's.
    async fn still_ours(&mut self) -> bool {
        let Ok(entry) = self.store.entry(self.key.as_str()).await else {
            // Not answered: tried again at the next interval.
            return true;
        };
        let holder = entry
            .as_ref()
            .filter(|e| e.operation == kv::Operation::Put)
            .and_then(|e| serde_json::from_slice::<SlotHolder>(&e.value).ok());
        match (entry, holder) {
            (Some(entry), Some(holder))
                if holder.run_id == self.holder.run_id
                    && holder.executor_id == self.holder.executor_id =>
            {
                self.revision = entry.revision;
                true
            }
            _ => {
                warn!(key = %self.key, "a namespace run slot expired while its run called; another run took it");
                false
            }
        }
    }

    /// Delete the slot, retried for a few seconds while NATS does not
    /// answer (it expires otherwise).
    async fn free(&self) {
        let mut delay = jetcron_io::retry::RetryDelay::nats();
        let started = tokio::time::Instant::now();
        loop {
            match self
                .store
                .delete_expect_revision(&self.key, Some(self.revision))
                .await
            {
                Ok(()) => return,
                Err(e) if e.kind() == kv::DeleteErrorKind::WrongLastRevision => return,
                Err(e) if started.elapsed() > self.life => {
                    warn!(key = %self.key, error = %e, "cannot free a namespace run slot; it expires");
                    return;
                }
                Err(_) => tokio::time::sleep(delay.next_delay()).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(slots: &NamespaceSlots, key: &str, revision: u64, holder: Option<SlotHolder>) {
        slots
            .seen
            .write()
            .expect("lock")
            .insert(key.into(), Seen { revision, holder });
    }

    #[test]
    fn a_slot_is_free_when_absent_deleted_or_expired() {
        let slots = NamespaceSlots::default();
        let now = DateTime::parse_from_rfc3339("2026-12-06T12:00:00Z")
            .expect("test value")
            .with_timezone(&Utc);
        let holder = |expires: i64| SlotHolder {
            run_id: "r".into(),
            executor_id: "e".into(),
            expires_at_ms: now.timestamp_millis() + expires,
        };
        seen(&slots, "slot.billing.0", 4, Some(holder(5_000)));
        seen(&slots, "slot.billing.1", 7, None);
        seen(&slots, "slot.billing.2", 9, Some(holder(-1)));
        let free = slots.free("billing", 4, now);
        assert_eq!(
            free,
            [
                FreeSlot {
                    key: "slot.billing.1".into(),
                    revision: Some(7)
                },
                FreeSlot {
                    key: "slot.billing.2".into(),
                    revision: Some(9)
                },
                FreeSlot {
                    key: "slot.billing.3".into(),
                    revision: None
                },
            ]
        );
        assert!(
            slots.free("billing", 1, now).is_empty(),
            "the one slot is held"
        );
        assert_eq!(slots.free("ops", 1, now).len(), 1, "another namespace's");
    }

    #[test]
    fn a_slot_key_names_its_namespace() {
        assert_eq!(namespace_of_key("slot.billing.12"), Some("billing"));
        assert_eq!(namespace_of_key("slot.default.0"), Some("default"));
        assert_eq!(namespace_of_key("claim.billing"), None);
        assert_eq!(namespace_of_key("slot.x"), None);
    }
}
