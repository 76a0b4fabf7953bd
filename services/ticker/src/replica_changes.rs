//! What a replica holds and plans, and what changes it: ownership (a shard
//! acquired is planned, or loaded first; a shard lost is no longer
//! planned), the job feed (an entry of a held shard changes its job), the
//! passes that load shards taken over, and the drop of shards owned
//! elsewhere. The loop in `lib.rs` calls these between its batches of due
//! events; they decide, the loop publishes.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use compact_str::CompactString;
use jetcron_core::job::ValidJob;
use jetcron_io::job_feed::{FeedEvent, JobEntry, Written};
use tracing::{debug, info};

use crate::book::Book;
use crate::compact_job::HeldJob;
use crate::definitions::Definitions;
pub(crate) use crate::load::Loader;
use crate::load::{self, ShardPass};
use crate::ownership::{Leases, OwnershipChange};
use crate::plan::FirePlan;
use crate::plan_queue::PlanQueue;
use crate::shard_holdings::{Acquisition, Holdings, Route};
use crate::shards::{self, shard_of};
use crate::snapshot_store::SnapshotWriter;
use crate::tidy::Tidying;
use crate::{revoke, verify};

/// How a taken-over shard resumes.
pub(crate) struct Recovery {
    pub(crate) late_threshold: chrono::Duration,
    pub(crate) dedup_horizon: chrono::Duration,
    pub(crate) emitted: verify::EmittedFires,
}

/// What the loop holds: the jobs of the shards it holds (planned for the
/// shards it owns), which shards those are, and the definitions kept for
/// fires coming soon.
pub(crate) struct Held {
    pub(crate) book: Book,
    pub(crate) definitions: Definitions,
    pub(crate) holdings: Holdings,
    /// Jobs of dropped shards still to let go of, kept ones to move.
    pub(crate) tidying: Tidying,
    /// Shards owned with their jobs held, to be planned one per pass of
    /// the loop ([`plan_next`]).
    pub(crate) to_plan: PlanQueue,
    /// Told when a shard is planned here ([`Leases::mark_planned`]).
    pub(crate) leases: Leases,
    /// Which planned shards changed since their last snapshot.
    pub(crate) snapshots: SnapshotWriter,
}

/// If `key`'s shard is still queued, plan it now, before an entry of the
/// key is applied. A job's catch-up starts at its definition's write time
/// when that is after the shard's watermark (a new job has no fires before
/// it existed): an edit applied to a shard not planned yet would move that
/// start past fires due before the edit, and lose them. Planned first, the
/// shard keeps them pending, and the edit goes through the plan like any
/// other.
///
/// Taken off the queue here, planned by the caller: most entries find no
/// shard queued, and they then build no planning future (moving one for
/// every entry was about 6 % of a million-job cold start's CPU).
fn take_if_queued(key: &str, held: &mut Held) -> Option<(u32, Acquisition)> {
    if held.to_plan.is_empty() {
        return None;
    }
    let shard = shard_of(key);
    held.to_plan
        .take(shard)
        .map(|acquisition| (shard, acquisition))
}

/// Plan the next queued shard ([`PlanQueue::pop_lowest`]), if any.
pub(crate) async fn plan_next(held: &mut Held, recovery: &Recovery, now: DateTime<Utc>) {
    if let Some((shard, acquisition)) = held.to_plan.pop_lowest() {
        plan_shard(shard, acquisition, held, recovery, now).await;
    }
}

/// Apply an ownership change at once: a shard acquired with its jobs
/// held is queued to be planned ([`plan_next`]), one lost is neither
/// planned nor queued any more.
pub(crate) fn on_ownership(
    change: OwnershipChange,
    held: &mut Held,
    loader: &Loader,
    now: DateTime<Utc>,
) {
    match change {
        OwnershipChange::Acquired {
            shard,
            done,
            emitted_before,
        } => {
            let acquisition = Acquisition {
                done,
                emitted_before,
                acquired_at: now,
            };
            match held
                .holdings
                .acquired(shard, acquisition, std::time::Instant::now())
            {
                Some(acquisition) => held.to_plan.push(shard, acquisition),
                None => info!(shard, "shard acquired, its jobs to be loaded first"),
            }
        }
        OwnershipChange::Lost { shard } => {
            held.holdings.lost(shard, std::time::Instant::now());
            held.book.unplan(shard);
            held.to_plan.remove(shard);
            for job in held.book.shard(shard) {
                held.definitions.forget(&job.id);
            }
        }
        // One pass for every shard the round acquired without its jobs.
        OwnershipChange::RoundEnded => {
            if let Some((pass, shards)) = held.holdings.start_pass() {
                loader.start(pass, shards);
            }
        }
    }
}

/// Plan `shard`, whose jobs are held, from where `acquisition` says its
/// last owner left it.
async fn plan_shard(
    shard: u32,
    acquisition: Acquisition,
    held: &mut Held,
    recovery: &Recovery,
    now: DateTime<Utc>,
) {
    let Acquisition {
        done,
        emitted_before,
        acquired_at,
    } = acquisition;
    // A fire is late, not missed, by how long the shard had no owner: the
    // time its jobs took to load since it was acquired does not count.
    let late_threshold =
        recovery.late_threshold + (now - acquired_at).max(chrono::Duration::zero());
    // Off the runtime's workers: a shard of 625,000 jobs took a second to
    // plan (0.2 s planned in place), and on a worker of `jetcron all` that
    // time held up whatever else was queued there (calls due at that
    // instant among them). The loop waits for it, so nothing looks for the
    // shard's jobs meanwhile.
    let mut table = held.book.take_to_plan(shard);
    let planning = tokio::task::spawn_blocking(move || {
        table.plan_all(done, now, late_threshold);
        table
    });
    let mut plan = match planning.await {
        Ok(plan) => plan,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    let mut verified = 0;
    if now - done > recovery.dedup_horizon {
        // The previous owner may have published fires in
        // (done, emitted_before] that dedup no longer remembers.
        let ids: Vec<CompactString> = plan.job_ids().cloned().collect();
        for id in ids {
            if plan.catch_up_between(&id, done, emitted_before).is_empty() {
                continue;
            }
            verified += 1;
            let Some(pool) = plan.get(&id).map(|p| p.job.pool.name()) else {
                continue;
            };
            if let Some(last) = recovery.emitted.last_emitted(&pool, &id).await {
                plan.drop_emitted(&id, last);
            }
        }
    }
    info!(
        shard,
        jobs = plan.len(),
        pending = plan.pending_fires(),
        verified,
        "shard scheduling"
    );
    held.book.put_planned(shard, plan);
    held.snapshots.planned(shard);
    // Handed on after the unplanned ones from now on; its watermark is
    // recorded by the loop once the feed's changes that came while it was
    // planned are applied.
    held.leases.mark_planned(shard);
}

/// A pass is in: its shards' jobs go into the book, the feed's entries
/// that came meanwhile after them, and the shards still owned are queued
/// to be planned.
pub(crate) fn on_loaded(
    pass: ShardPass,
    held: &mut Held,
    revoker: &mut revoke::Revoker,
    recovery: &Recovery,
    now: DateTime<Utc>,
) {
    let ShardPass {
        pass,
        shards,
        tables,
        paused,
        read_to,
        took,
        as_snapshots,
    } = pass;
    let loaded = held
        .holdings
        .loaded(pass, read_to, std::time::Instant::now());
    let mut of_pass = [false; shards::SHARDS as usize];
    for shard in &loaded {
        of_pass[shard.shard as usize] = true;
    }
    let mut jobs = 0;
    for (shard, table) in tables {
        if of_pass[shard as usize] {
            jobs += held.book.put_loaded(shard, table);
        }
    }
    // Paused since this replica last held it: the feed's entry saying so
    // may come later, and is stale then.
    for id in paused {
        if of_pass[shard_of(&id) as usize] {
            revoker.revoke(&id, "job paused before this fire", now);
        }
    }
    info!(
        ?shards,
        jobs,
        read_to,
        from_snapshots = as_snapshots.is_some(),
        took_ms = took.as_millis() as u64,
        "shards loaded"
    );
    for shard in loaded {
        if as_snapshots
            .as_ref()
            .is_some_and(|unchanged| unchanged.contains(&shard.shard))
        {
            held.snapshots.loaded_as_written([shard.shard]);
        } else {
            held.snapshots.changed(shard.shard);
        }
        for entry in shard.waiting {
            apply_entry(&entry, held, revoker, recovery.late_threshold, now);
        }
        if let Some(acquisition) = shard.plan_from {
            held.to_plan.push(shard.shard, acquisition);
        }
    }
}

/// At a start, every shard's jobs from the shards' snapshots and the
/// bucket's changes after them, when every shard has a usable one: the
/// replica then takes shards at once instead of after the feed's read of
/// the whole bucket. Jobs go into the book shard by shard as each snapshot
/// is read (a million jobs are not held twice). `keys` is the bucket's
/// key count as the feed will find it when it opens. Whether it did; if
/// not, the book is left empty and the feed loads it as before.
pub(crate) async fn preload(
    held: &mut Held,
    loader: &Loader,
    keys: usize,
    revoker: &mut revoke::Revoker,
    now: DateTime<Utc>,
) -> bool {
    let Some(store) = &loader.snapshots else {
        return false;
    };
    let started = std::time::Instant::now();
    let all: Vec<u32> = (0..shards::SHARDS).collect();
    let Held {
        book,
        holdings,
        snapshots,
        ..
    } = held;
    // Paused since this replica last held it: the feed's entry saying so
    // is stale once the shard counts as read up to the snapshot.
    let hold = |book: &mut Book, revoker: &mut revoke::Revoker, job: HeldJob| {
        if job.paused {
            revoker.revoke(&job.id, "job paused before this fire", now);
        }
        book.hold(job);
    };
    // Room for the bucket's keys as the feed asks when it opens (the same
    // share per table): a table grown to fit and asked for a little more
    // later would be copied into one twice its size.
    book.reserve(keys, |_| true);
    let read = load::snapshots_and_changes(&loader.client, store, &loader.lines, &all, |jobs| {
        for job in jobs {
            hold(book, revoker, job);
        }
        // The object and its decoded jobs are freed: given back shard by
        // shard, sixteen of them do not add up to the start's peak.
        jetcron_allocator::give_back_freed_memory();
    })
    .await;
    let (changes, read_to) = match read {
        Ok(read) => read,
        Err(unusable) => {
            unusable.log("at start");
            *book = Book::default();
            return false;
        }
    };
    // Shards loaded as their snapshots hold them are not written again
    // until they change.
    snapshots.loaded_as_written(all);
    let changed = changes.len();
    for (id, job) in changes {
        snapshots.changed(shard_of(&id));
        match job {
            Some(job) => hold(book, revoker, job),
            None => {
                book.remove(&id);
            }
        }
    }
    // The changes read are freed too: give them back now, before the
    // feed's read of the bucket (and in `jetcron all` the catalog's after
    // it), rather than after the allocator's purge delay.
    jetcron_allocator::give_back_freed_memory();
    holdings.preloaded(read_to, std::time::Instant::now());
    snapshots.applied(read_to);
    info!(
        jobs = book.len(),
        changed,
        read_to,
        took_ms = started.elapsed().as_millis() as u64,
        "jobs loaded from the shards' snapshots"
    );
    true
}

/// Drop the jobs of shards owned elsewhere once ownership has settled; the
/// jobs go (and the kept ones move) a piece at a time ([`crate::tidy`]).
pub(crate) fn drop_shards_owned_elsewhere(held: &mut Held) {
    let Held {
        book,
        holdings,
        tidying,
        to_plan,
        ..
    } = held;
    let dropped = holdings.to_drop(std::time::Instant::now(), |shard| {
        book.is_planned(shard) || to_plan.contains(shard)
    });
    if dropped.is_empty() {
        return;
    }
    let tables: Vec<_> = dropped
        .iter()
        .map(|shard| book.drop_shard(*shard))
        .collect();
    info!(
        shards = ?dropped,
        jobs = tables.iter().map(FirePlan::len).sum::<usize>(),
        held = book.len(),
        "jobs of shards owned elsewhere dropped"
    );
    tidying.start(tables, (0..shards::SHARDS).filter(|s| holdings.holds(*s)));
}

/// Apply a change from the job feed (a shard still queued to be planned
/// is planned first: [`take_if_queued`] says why).
pub(crate) async fn on_job(
    event: FeedEvent,
    held: &mut Held,
    revoker: &mut revoke::Revoker,
    ready: &tokio::sync::watch::Sender<bool>,
    recovery: &Recovery,
    now: DateTime<Utc>,
) {
    match event {
        FeedEvent::Entries(entries) => {
            for entry in entries.iter() {
                if let Some((shard, acquisition)) = take_if_queued(&entry.key, held) {
                    plan_shard(shard, acquisition, held, recovery, now).await;
                }
                on_entry(entry, held, revoker, recovery, now);
            }
        }
        FeedEvent::Opened { keys } => {
            let Held { book, holdings, .. } = held;
            book.reserve(keys, |shard| holdings.holds(shard));
        }
        FeedEvent::Synced => {
            info!(jobs = held.book.len(), "job bucket loaded");
            held.holdings.synced(std::time::Instant::now());
            let _ = ready.send(true);
        }
    }
}

/// Route an entry of the feed, its shard no longer queued to be planned:
/// applied if the shard is held here, else only its pause or delete is
/// acted on.
fn on_entry(
    entry: &Arc<JobEntry>,
    held: &mut Held,
    revoker: &mut revoke::Revoker,
    recovery: &Recovery,
    now: DateTime<Utc>,
) {
    held.snapshots.applied(entry.revision);
    match held.holdings.route(entry) {
        Route::Apply => apply_entry(entry, held, revoker, recovery.late_threshold, now),
        // The job is not held here (or not yet): fires this replica
        // stored ahead of a job paused or deleted are still killed.
        Route::Waiting | Route::NotHeld => revoke_if_stopped(entry, revoker, now),
        // Older than what a pass read; if the key is not held now, the
        // job is gone, and a pause or delete still kills its fires.
        Route::Stale if held.book.get(&entry.key).is_none() => {
            revoke_if_stopped(entry, revoker, now)
        }
        Route::Stale => {}
    }
}

/// Apply an entry of a held shard: a valid job is held, a delete or an
/// invalid value unschedules its key.
fn apply_entry(
    entry: &JobEntry,
    held: &mut Held,
    revoker: &mut revoke::Revoker,
    late_threshold: chrono::Duration,
    now: DateTime<Utc>,
) {
    held.snapshots.changed(shard_of(&entry.key));
    match &entry.written {
        Written::Valid(job) => {
            let definition = Definition {
                job,
                revision: entry.revision,
                defined_at: entry.written_at,
            };
            hold_job(definition, held, revoker, late_threshold, now);
        }
        // An invalid value is not a runnable job: its key is unscheduled.
        Written::Removed | Written::Invalid { .. } => {
            unschedule_job(&entry.key, held, revoker, now);
        }
        // Not decoded: a feed for chain indexes only, never the ticker's.
        Written::NotChained => {}
    }
}

/// Kill the fires stored ahead of a job `entry` pauses or deletes.
fn revoke_if_stopped(entry: &JobEntry, revoker: &mut revoke::Revoker, now: DateTime<Utc>) {
    match &entry.written {
        Written::Valid(job) if job.spec.paused => {
            revoker.revoke(&entry.key, "job paused before this fire", now);
        }
        Written::Removed | Written::Invalid { .. } => {
            revoker.revoke(&entry.key, "job deleted before this fire", now);
        }
        Written::Valid(_) | Written::NotChained => {}
    }
}

/// A valid definition of a job at its revision, written at `defined_at`
/// (what [`HeldJob::of`] keeps of it).
struct Definition<'a> {
    job: &'a ValidJob,
    revision: u64,
    defined_at: DateTime<Utc>,
}

/// Hold the job of `definition` and plan it if its shard is owned; an
/// older revision than the one held changes nothing.
fn hold_job(
    definition: Definition<'_>,
    held: &mut Held,
    revoker: &mut revoke::Revoker,
    late_threshold: chrono::Duration,
    now: DateTime<Utc>,
) {
    let Definition {
        job,
        revision,
        defined_at,
    } = definition;
    let Held {
        book, definitions, ..
    } = held;
    let id = job.spec.id.as_str();
    if book.get(id).is_some_and(|held| held.revision >= revision) {
        return;
    }
    debug!(job_id = %id, revision, schedule = %job.spec.schedule_line(), paused = job.spec.paused, "job definition seen");
    if job.spec.paused {
        revoker.revoke(id, "job paused before this fire", now);
    }
    let held = HeldJob::of(job, revision, defined_at);
    let id = held.id.clone();
    // Written a moment ago (a slow watch, a loaded machine): the
    // times since the write fire late. Older writes are recovery's.
    let written_at = (now - defined_at <= late_threshold).then_some(defined_at);
    let next_fire = match book.plan_mut(shard_of(&id)) {
        Some(plan) => {
            plan.upsert(held, written_at, now);
            plan.get(&id).and_then(|planned| planned.next_fire())
        }
        None => {
            book.hold(held);
            None
        }
    };
    definitions.keep_if_soon(&id, revision, &job.spec, next_fire, now);
}

/// Forget `job_id` (deleted, or its value no longer valid) and kill its
/// fires already handed out.
fn unschedule_job(
    job_id: &str,
    held: &mut Held,
    revoker: &mut revoke::Revoker,
    now: DateTime<Utc>,
) {
    debug!(job_id, "job deleted or invalid");
    revoker.revoke(job_id, "job deleted before this fire", now);
    held.definitions.forget(job_id);
    let planned = held.book.is_planned(shard_of(job_id));
    if held.book.remove(job_id) && planned {
        info!(job_id = %job_id, "job unscheduled");
    }
}

#[cfg(test)]
mod tests {
    use jetcron_core::job::parse_job;

    use super::*;

    /// A `Held` and a `Recovery` whose NATS handles are never used: the
    /// client connects to nothing, and the emitted fires are looked up only
    /// after a silence longer than the dedup horizon.
    async fn held_with_unused_nats() -> (Held, Recovery, revoke::Revoker) {
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect("127.0.0.1:9")
            .await
            .expect("a client that connects later");
        let js = async_nats::jetstream::new(client);
        let bucket_stream = js
            .get_stream_no_info(format!("KV_{}", jetcron_core::subjects::JOBS_BUCKET))
            .await
            .expect("stream handle");
        let held = Held {
            book: Book::default(),
            definitions: Definitions::new(
                bucket_stream,
                std::time::Duration::from_secs(60),
                Default::default(),
            ),
            holdings: Holdings::new(
                std::time::Duration::from_secs(10),
                std::time::Instant::now(),
            ),
            tidying: Tidying::default(),
            to_plan: PlanQueue::default(),
            leases: Leases::default(),
            snapshots: SnapshotWriter::new(None, std::time::Duration::ZERO),
        };
        let recovery = Recovery {
            late_threshold: chrono::Duration::seconds(60),
            dedup_horizon: chrono::Duration::minutes(5),
            emitted: verify::EmittedFires::open(&js)
                .await
                .expect("stream handles"),
        };
        let (revocations, _) = tokio::sync::mpsc::channel(16);
        (held, recovery, revoke::Revoker::new(revocations, false))
    }

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("instant")
    }

    /// The fault mended in 2a0a9ef: an edit of a job whose shard was
    /// acquired but not planned yet moved its catch-up start to the edit,
    /// past the fires due since the shard's watermark.
    #[tokio::test]
    async fn an_edit_in_a_shard_still_queued_keeps_the_fires_due_before_it() {
        let (mut held, recovery, mut revoker) = held_with_unused_nats().await;
        let (ready, _) = tokio::sync::watch::channel(false);
        let now = at("2026-11-27T12:00:10Z");
        let line = r#"{"id":"edited","schedule":"* * * * * *","target":{"type":"nats","subject":"svc.x"}}"#;
        let job = parse_job(line.as_bytes(), Some("edited")).expect("valid");
        held.book.insert(&job, 1, at("2026-11-27T11:00:00Z"));
        let shard = shard_of("edited");
        let watermark = at("2026-11-27T12:00:05Z");
        held.to_plan.push(
            shard,
            Acquisition {
                done: watermark,
                emitted_before: watermark,
                acquired_at: now,
            },
        );
        let edit = line.replace("svc.x", "svc.y");
        let entry = JobEntry {
            key: "edited".into(),
            revision: 2,
            written_at: now,
            written: Written::Valid(parse_job(edit.as_bytes(), Some("edited")).expect("valid")),
        };
        on_job(
            FeedEvent::Entries(Arc::new([Arc::new(entry)])),
            &mut held,
            &mut revoker,
            &ready,
            &recovery,
            now,
        )
        .await;
        // However the shard came to be planned, by now it is.
        plan_next(&mut held, &recovery, now).await;
        let planned = held
            .book
            .plan(shard)
            .and_then(|plan| plan.get("edited"))
            .expect("planned");
        assert_eq!(planned.job.revision, 2, "the edit applied");
        assert_eq!(
            planned.next_fire(),
            Some(at("2026-11-27T12:00:06Z")),
            "the first fire after the watermark is still pending"
        );
    }
}
