//! A batch of due fires: taken from the plans of the shards this replica
//! may publish for, sent while earlier batches' acks are on their way, and
//! settled with its acks (a stored fire is done, the rest are offered
//! again), with the shards' watermarks recorded after each.

use std::time::Duration;

use chrono::{DateTime, Utc};
use jetcron_core::clock::Clock;
use jetcron_io::retry::LogLimiter;
use tracing::{info, warn};

use crate::book::Book;
use crate::definitions::Resolved;
use crate::ownership::Leases;
use crate::replica_changes::Held;
use crate::shards::shard_of;
use crate::{plan, publish, revoke};

/// A batch of due events sent, its definitions, and its acks to come.
pub(crate) type InFlight = (
    Vec<plan::Fire>,
    Vec<Resolved>,
    Vec<Option<async_nats::jetstream::context::PublishAckFuture>>,
);

/// How a batch in flight came out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settled {
    pub(crate) fires: usize,
    pub(crate) failed: usize,
}

impl Settled {
    pub(crate) fn all_failed(self) -> bool {
        self.failed == self.fires
    }
}

/// Await the acks of the oldest batch in flight, if there is one, and
/// settle its fires: a stored fire is done (its job's next fire is queued)
/// and the rest are offered again.
pub(crate) async fn settle_oldest(
    in_flight: &mut std::collections::VecDeque<InFlight>,
    held: &mut Held,
    revoker: &mut revoke::Revoker,
    leases: &Leases,
    lookahead: chrono::Duration,
    clock: &dyn Clock,
) -> Option<Settled> {
    let (fires, resolved, acks) = in_flight.pop_front()?;
    let stored = publish::collect_acks(acks, publish::ACK_DEADLINE).await;
    let now = clock.now();
    let failed = settle(&mut held.book, &fires, &done(&stored, &resolved), now);
    revoker.stored(&fires, &stored, now);
    keep_definitions_of_soon_fires(held, &fires, &resolved, now);
    record_watermarks(&held.book, leases, now + lookahead);
    Some(Settled {
        fires: fires.len(),
        failed,
    })
}

/// Whether due events get stored, for the log (bounded) and for ownership
/// (which hands the shards over when it lasts).
#[derive(Debug)]
pub(crate) struct PublishHealth {
    failing_since: Option<std::time::Instant>,
    log: LogLimiter,
}

impl Default for PublishHealth {
    fn default() -> Self {
        Self {
            failing_since: None,
            log: LogLimiter::new(Duration::from_secs(5)),
        }
    }
}

impl PublishHealth {
    pub(crate) fn failed(&mut self, leases: &Leases, failed: usize) {
        let since = *self
            .failing_since
            .get_or_insert_with(std::time::Instant::now);
        leases.set_publish_failing_since(Some(since));
        if let Some(batches) = self.log.admit() {
            warn!(
                failed,
                batches,
                failing_ms = since.elapsed().as_millis() as u64,
                "due events not stored, retrying"
            );
        }
    }

    pub(crate) fn stored(&mut self, leases: &Leases) {
        if let Some(since) = self.failing_since.take() {
            info!(
                stalled_ms = since.elapsed().as_millis() as u64,
                "due events stored again"
            );
            leases.set_publish_failing_since(None);
            self.log.reset();
        }
    }

    /// Nothing to publish: nothing is failing.
    pub(crate) fn clear(&mut self, leases: &Leases) {
        if self.failing_since.take().is_some() {
            leases.set_publish_failing_since(None);
        }
    }
}

/// Take the earliest due fires of the shards this replica may publish for;
/// each shard contributes its share, so one batch stays bounded however many
/// fires are due at once (at most `limit` plus one per shard).
pub(crate) fn take_due_fires(
    book: &mut Book,
    leases: &Leases,
    now: DateTime<Utc>,
    limit: usize,
) -> Vec<plan::Fire> {
    let per_shard = limit / book.plans().count().max(1) + 1;
    let mut fires: Vec<plan::Fire> = book
        .plans_mut()
        .filter(|(shard, _)| leases.is_valid(*shard))
        .flat_map(|(_, plan)| plan.take_due(now, per_shard))
        .collect();
    fires.sort_by_key(|f| (f.fire_at, f.scheduled_at));
    fires
}

/// Apply a batch's acks to the plans; returns how many were not stored.
/// Record which fires were stored; returns how many were not. Metrics:
/// `jetcron_fires_total`, `jetcron_fire_publish_failures_total` and
/// `jetcron_fire_lag_seconds` (stored minus meant-to-publish instant).
pub(crate) fn settle(
    book: &mut Book,
    fires: &[plan::Fire],
    stored: &[bool],
    now: DateTime<Utc>,
) -> usize {
    let mut failed = 0;
    let lag = metrics::histogram!("jetcron_fire_lag_seconds");
    for (fire, ok) in fires.iter().zip(stored.iter().copied()) {
        let Some(plan) = book.plan_mut(shard_of(&fire.job.id)) else {
            continue;
        };
        if ok {
            lag.record((now - fire.fire_at).num_milliseconds().max(0) as f64 / 1000.0);
            plan.fired(fire);
        } else {
            failed += 1;
            plan.unfired(fire);
        }
    }
    metrics::counter!("jetcron_fires_total").increment((fires.len() - failed) as u64);
    if failed > 0 {
        metrics::counter!("jetcron_fire_publish_failures_total").increment(failed as u64);
    }
    failed
}

/// Which fires are done with: stored, or with no job left to run
/// ([`Resolved::Gone`], nothing to store).
pub(crate) fn done(stored: &[bool], resolved: &[Resolved]) -> Vec<bool> {
    stored
        .iter()
        .zip(resolved)
        .map(|(ok, resolved)| *ok || matches!(resolved, Resolved::Gone))
        .collect()
}

/// After a batch: definitions of jobs that fire again soon stay in
/// memory, the others leave it.
fn keep_definitions_of_soon_fires(
    held: &mut Held,
    fires: &[plan::Fire],
    resolved: &[Resolved],
    now: DateTime<Utc>,
) {
    let Held {
        book, definitions, ..
    } = held;
    for (fire, resolved) in fires.iter().zip(resolved) {
        let next = book
            .plan(shard_of(&fire.job.id))
            .and_then(|plan| plan.get(&fire.job.id))
            .and_then(plan::PlannedJob::next_fire);
        definitions.settled(fire, resolved, next, now);
    }
}

/// The fires (with their definitions) of shards whose lease is still
/// valid; the others go back to their plans untouched.
pub(crate) fn still_leased(
    book: &mut Book,
    leases: &Leases,
    fires: Vec<plan::Fire>,
    resolved: Vec<Resolved>,
) -> (Vec<plan::Fire>, Vec<Resolved>) {
    let mut kept = (
        Vec::with_capacity(fires.len()),
        Vec::with_capacity(fires.len()),
    );
    for (fire, resolved) in fires.into_iter().zip(resolved) {
        let shard = shard_of(&fire.job.id);
        if leases.is_valid(shard) {
            kept.0.push(fire);
            kept.1.push(resolved);
        } else if let Some(plan) = book.plan_mut(shard) {
            plan.unfired(&fire);
        }
    }
    kept
}

/// Write each held shard's watermark (every fire up to it is stored) into
/// its lease, for the lease renewals to carry.
pub(crate) fn record_watermarks(book: &Book, leases: &Leases, now: DateTime<Utc>) {
    for (shard, plan) in book.plans() {
        leases.set_watermark(shard, plan.watermark(now));
    }
}
