//! The jobs of one shard and their fire plan: which job fires next, and
//! when. Pure and synchronous.
//!
//! The table holds each job itself ([`HeldJob`] in its slot), planned or
//! not: a shard whose jobs are held but which this replica does not own
//! (or has not planned yet) keeps them here with no fires
//! ([`FirePlan::hold`]), and [`FirePlan::plan_all`] plans them in place
//! when it is taken over. One table per shard is one id index and no
//! shared pointer per job, where a book of shared jobs beside each plan
//! cost about 45 bytes more a job (docs/architecture.md, "What a held job
//! costs").
//!
//! The ticker feeds it definitions as the KV watch delivers them and asks it
//! for due fires; publishing happens outside. A fire is only advanced past once
//! its due event is stored ([`FirePlan::fired`]), so a failed publish is retried
//! rather than lost. [`FirePlan::watermark`] is the instant up to which every
//! scheduled time of the shard has been stored: the durable checkpoint a new
//! owner resumes from.
//!
//! Each job keeps the (publish instant, scheduled time) of its own pending
//! fires, so that an edit, a delete or a catch-up question touches only that
//! job's entries in the shard-wide sets: adding 100,000 jobs to a running
//! ticker scanned every pending fire once per job before (the ticker stored
//! 413 fires/s for the 13 s after such a load).
//!
//! The shard-wide sets key a fire by the job's slot (its index in the plan),
//! not by its id: when every job is due the same second, the instants tie and
//! each B-tree step compared id strings (`memcmp` led the ticker's profile at
//! 60,000 fires/s), and each key held a second pointer to the id.

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use compact_str::CompactString;
use jetcron_core::id_index::IdIndex;

use crate::compact_job::HeldJob;
use crate::job_fires::JobFires;
use crate::millis::Millis;

/// A job as the table holds it, with its plan (none while the shard is
/// not planned).
#[derive(Debug, Clone)]
pub struct PlannedJob {
    pub job: HeldJob,
    /// For a paused job, since when it is paused (to apply its misfire
    /// policy on resume); for any other, the latest scheduled time queued
    /// (its regular next fire). One field for both: a paused job has no
    /// fires ([`PlannedJob::paused_since`], [`PlannedJob::last_planned`]).
    mark: Option<Millis>,
    /// Scheduled times of its queued or in-flight fires.
    fires: JobFires,
}

impl PlannedJob {
    /// A job held with nothing planned.
    fn unplanned(job: HeldJob) -> Self {
        Self {
            job,
            mark: None,
            fires: JobFires::default(),
        }
    }

    /// The publish instant of its earliest pending fire.
    pub fn next_fire(&self) -> Option<DateTime<Utc>> {
        self.fires
            .iter()
            .map(|scheduled| fire_at(&self.job, scheduled))
            .min()
            .map(Millis::at)
    }

    /// Latest scheduled time queued for the job (its regular next fire).
    pub fn last_planned(&self) -> Option<DateTime<Utc>> {
        self.last_planned_ms().map(Millis::at)
    }

    fn last_planned_ms(&self) -> Option<Millis> {
        self.mark.filter(|_| !self.job.paused)
    }

    /// Since when the job is paused, if it is.
    fn paused_since(&self) -> Option<Millis> {
        self.mark.filter(|_| self.job.paused)
    }

    /// Its scheduled times pending, in no order.
    fn pending(&self) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        self.fires.iter().map(Millis::at)
    }
}

/// When `job`'s fire scheduled at `scheduled` is published.
fn fire_at(job: &HeldJob, scheduled: Millis) -> Millis {
    Millis::of(job.timing.fire_instant(&job.id, scheduled.at()))
}

/// What a fire names of its job, as it was when the fire was decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiredJob {
    pub id: Arc<str>,
    pub pool: Arc<String>,
    /// The revision whose definition the due event carries.
    pub revision: u64,
}

impl FiredJob {
    pub fn of(job: &HeldJob) -> Self {
        Self {
            id: Arc::from(job.id.as_str()),
            pool: job.pool.name(),
            revision: job.revision,
        }
    }
}

/// One fire to emit.
#[derive(Debug, Clone)]
pub struct Fire {
    pub job: FiredJob,
    pub scheduled_at: DateTime<Utc>,
    /// When it is published (scheduled time plus jitter).
    pub fire_at: DateTime<Utc>,
}

/// The index of a job in [`FirePlan::slots`]; freed slots are reused.
type Slot = u32;

/// The id of the job in `slot`, if one is there.
fn id_in(slots: &[Option<PlannedJob>], slot: Slot) -> Option<&str> {
    slots[slot as usize]
        .as_ref()
        .map(|planned| planned.job.id.as_str())
}

/// One pending fire in the shard-wide sets, ordered by publish instant, then
/// scheduled time, then slot. 16 bytes: a B-tree node of them is a 192-byte
/// allocation, where one of 28-byte `(DateTime, DateTime, Slot)` keys took
/// 320 (the allocator's size classes), and the queue holds a key per job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct FireKey {
    fire_at: Millis,
    /// Scheduled time minus publish instant: minus the jitter, which is
    /// under an hour ([`jetcron_core::job::MAX_JITTER`]).
    scheduled_offset_ms: i32,
    slot: Slot,
}

impl FireKey {
    fn new(fire_at: Millis, scheduled: Millis, slot: Slot) -> Self {
        let offset = scheduled.unix_ms() - fire_at.unix_ms();
        Self {
            fire_at,
            scheduled_offset_ms: i32::try_from(offset)
                .expect("a fire is published within an hour of its scheduled time (MAX_JITTER)"),
            slot,
        }
    }

    fn scheduled(&self) -> Millis {
        self.fire_at.plus_ms(i64::from(self.scheduled_offset_ms))
    }
}

/// `queue` rebuilt with full nodes ([`FirePlan::queue_key`] says when).
fn pack(queue: BTreeSet<FireKey>) -> BTreeSet<FireKey> {
    // `BTreeSet::from_iter` builds from sorted keys in bulk, each node full.
    queue.into_iter().collect()
}

/// A queue smaller than this is not repacked: its looseness costs little.
const PACK_AT_LEAST: usize = 1024;

/// Every job of a shard and the queue of their pending fires.
#[derive(Debug, Default)]
pub struct FirePlan {
    /// The slot of each job held, found by its job's id (which the slot's
    /// job holds).
    index: IdIndex,
    /// The jobs by slot; `None` where a removed job's slot is free.
    slots: Vec<Option<PlannedJob>>,
    free: Vec<Slot>,
    /// Every pending fire, in publish order.
    queue: BTreeSet<FireKey>,
    /// Keys put in `queue` since it was last packed.
    queued_since_pack: usize,
    /// Every job is being planned: `queue` is packed once at the end.
    planning_all: bool,
    /// Times `queue` was packed again ([`FirePlan::queue_key`]).
    #[cfg(test)]
    packs: usize,
    /// Fires taken for publishing whose ack has not come back yet.
    in_flight: BTreeSet<FireKey>,
    /// (scheduled time, slot) of every queued or in-flight fire published
    /// after its scheduled time (a jittered one), for the watermark; the
    /// others are published at their scheduled time, so `queue` and
    /// `in_flight` order them by it already (see [`FirePlan::watermark`]).
    jittered: BTreeSet<(Millis, Slot)>,
}

impl FirePlan {
    /// Hold `job` unplanned, replacing what was held for its id (a shard
    /// not planned here: it has no fires to keep).
    pub fn hold(&mut self, job: HeldJob) {
        // One look-up: a million jobs are held this way at a cold start.
        match self.slot_of(&job.id) {
            Some(slot) => {
                self.dequeue_in(slot, |_| true);
                self.slots[slot as usize] = Some(PlannedJob::unplanned(job));
            }
            None => {
                self.insert(PlannedJob::unplanned(job));
            }
        }
    }

    /// Forget every fire, keeping the jobs (a shard no longer owned).
    pub fn unplan(&mut self) {
        self.queue.clear();
        self.queued_since_pack = 0;
        self.in_flight.clear();
        self.jittered.clear();
        for planned in self.slots.iter_mut().flatten() {
            planned.mark = None;
            planned.fires = JobFires::default();
        }
    }

    /// Plan every job held, none of which has fires yet ([`FirePlan::hold`]
    /// or [`FirePlan::unplan`]), in a shard taken over whose fires are
    /// stored up to `done` ([`FirePlan::recover_in`] says how).
    pub fn plan_all(
        &mut self,
        done: DateTime<Utc>,
        now: DateTime<Utc>,
        late_threshold: chrono::Duration,
    ) {
        debug_assert!(self.pending_fires() == 0, "planned already");
        self.planning_all = true;
        for slot in 0..self.slots.len() {
            let slot = Slot::try_from(slot).expect("fewer than 2^32 jobs in a shard");
            self.recover_in(slot, done, now, late_threshold);
        }
        self.planning_all = false;
        self.queue = pack(std::mem::take(&mut self.queue));
        self.queued_since_pack = 0;
    }

    /// Put `key` in the queue, packing it again once a quarter of it has
    /// come since it was last packed.
    ///
    /// The queue's B-tree is what a job costs most after the job itself.
    /// Filled one key at a time in no order (a shard planned) it keeps
    /// about two thirds of each node, 32 bytes a key; a queue that fires
    /// its earliest keys and puts each job's next fire at its end (every
    /// job, every day) settles at 34. Built from sorted keys its nodes are
    /// full: 18 bytes a key. Packed again after a quarter of its size in
    /// new keys, it stays under 23 at a cost of four keys moved for each
    /// key put, about 1.4 ms for a shard of 62,500 jobs
    /// (docs/benchmarks.md, "Issue 16, sixteenth round"). That pack runs
    /// on the ticker's loop: at ten million jobs (625,000 a shard) about
    /// 15-20 ms, once per quarter of a shard's keys put, which the
    /// lookahead covers. For that moment the keys are also held in a
    /// sorted `Vec` beside the tree being built (about 16 bytes a key of
    /// one shard).
    fn queue_key(&mut self, key: FireKey) {
        self.queue.insert(key);
        self.queued_since_pack += 1;
        if !self.planning_all && self.queued_since_pack >= (self.queue.len() / 4).max(PACK_AT_LEAST)
        {
            self.queue = pack(std::mem::take(&mut self.queue));
            self.queued_since_pack = 0;
            #[cfg(test)]
            {
                self.packs += 1;
            }
        }
    }

    /// The jobs held.
    pub fn jobs(&self) -> impl Iterator<Item = &HeldJob> {
        self.slots.iter().flatten().map(|planned| &planned.job)
    }

    /// The job held under `job_id`.
    pub fn job_mut(&mut self, job_id: &str) -> Option<&mut HeldJob> {
        let slot = self.slot_of(job_id)?;
        self.slots[slot as usize]
            .as_mut()
            .map(|planned| &mut planned.job)
    }

    /// Make room for `more` jobs beyond those held.
    pub fn reserve(&mut self, more: usize) {
        let slots = &self.slots;
        self.index.reserve(more, |held| id_in(slots, held));
        self.slots.reserve(more.saturating_sub(self.free.len()));
    }

    /// The jobs, to let go of: the table's other parts are freed at once.
    pub fn into_jobs(self) -> Vec<Option<PlannedJob>> {
        self.slots
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn get(&self, job_id: &str) -> Option<&PlannedJob> {
        let slot = self.slot_of(job_id)?;
        self.slots[slot as usize].as_ref()
    }

    fn slot_of(&self, job_id: &str) -> Option<Slot> {
        let slots = &self.slots;
        self.index.find(job_id, |slot| id_in(slots, slot))
    }

    /// Hold `planned` (whose job the plan must not hold), in a free slot or
    /// a new one; returns the slot.
    fn insert(&mut self, planned: PlannedJob) -> Slot {
        debug_assert!(
            self.slot_of(&planned.job.id).is_none(),
            "{} is held: remove it first",
            planned.job.id
        );
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            Slot::try_from(self.slots.len() - 1).expect("fewer than 2^32 jobs in a shard")
        });
        self.slots[slot as usize] = Some(planned);
        let Self { index, slots, .. } = self;
        if let Some(id) = id_in(slots, slot) {
            index.insert(id, slot, |held| id_in(slots, held));
        }
        slot
    }

    /// Pending fires (catch-ups and regular next fires, queued or in flight).
    pub fn pending_fires(&self) -> usize {
        self.queue.len() + self.in_flight.len()
    }

    /// Queue a fire of the job in `slot` (if one is there).
    fn enqueue_in(&mut self, slot: Slot, scheduled: Millis) {
        let Some(planned) = self.slots[slot as usize].as_mut() else {
            return;
        };
        if planned.fires.contains(scheduled) {
            return;
        }
        let fire_at = fire_at(&planned.job, scheduled);
        planned.fires.push(scheduled);
        self.queue_key(FireKey::new(fire_at, scheduled, slot));
        if fire_at != scheduled {
            self.jittered.insert((scheduled, slot));
        }
    }

    /// Drop pending fires of `job_id` that `drop` picks, from every set.
    fn dequeue_where(&mut self, job_id: &str, drop: impl Fn(DateTime<Utc>) -> bool) {
        if let Some(slot) = self.slot_of(job_id) {
            self.dequeue_in(slot, drop);
        }
    }

    /// [`FirePlan::dequeue_where`] for the job in `slot`.
    fn dequeue_in(&mut self, slot: Slot, drop: impl Fn(DateTime<Utc>) -> bool) {
        let Self {
            slots,
            queue,
            in_flight,
            jittered,
            ..
        } = self;
        let Some(planned) = slots[slot as usize].as_mut() else {
            return;
        };
        let PlannedJob { job, fires, .. } = planned;
        fires.retain(|scheduled| {
            if !drop(scheduled.at()) {
                return true;
            }
            let fire_at = fire_at(job, scheduled);
            let key = FireKey::new(fire_at, scheduled, slot);
            queue.remove(&key);
            in_flight.remove(&key);
            if fire_at != scheduled {
                jittered.remove(&(scheduled, slot));
            }
            false
        });
    }

    /// Add or replace a job seen at its KV revision, live (not on recovery).
    /// A revision already held is ignored (a re-delivered watch entry must not
    /// move the schedule); a new one is scheduled from `now`, and when it was
    /// written at `written_at` and seen only now, its scheduled times in
    /// `(written_at, now]` fire late rather than not at all: a job written at
    /// W fires at every time after W however long the watch took to deliver
    /// it (the gateway's missed-fire count expects exactly that; the caller
    /// bounds how far back). A job resumed from a pause gets the fires its
    /// misfire policy asks for.
    pub fn upsert(&mut self, job: HeldJob, written_at: Option<DateTime<Utc>>, now: DateTime<Utc>) {
        let id = job.id.clone();
        let mut paused_since = None;
        if let Some(existing) = self.get(&id) {
            if existing.job.revision >= job.revision {
                return;
            }
            paused_since = existing.paused_since().map(Millis::at);
        }
        // Fires already due under the old revision still happen (an edit at
        // the fire time must not drop the fire); they carry the same run ids.
        let carried: Vec<DateTime<Utc>> = self
            .get(&id)
            .into_iter()
            .flat_map(PlannedJob::pending)
            .filter(|t| *t <= now)
            .collect();
        self.remove(&id);
        if job.paused {
            self.hold_paused(job, paused_since.unwrap_or(now));
            return;
        }
        let mut catch_up = paused_since
            .map(|since| job.timing.missed(since, now))
            .unwrap_or_default();
        catch_up.extend(carried);
        if let Some(written_at) = written_at.filter(|w| *w < now) {
            catch_up.extend(job.timing.latest_scheduled_in(written_at, now));
        }
        catch_up.sort();
        catch_up.dedup();
        let next = job.timing.next_scheduled(now);
        let slot = self.insert(PlannedJob::unplanned(job));
        self.schedule_in(slot, catch_up, next);
    }

    /// One job of [`FirePlan::plan_all`]: the tests of how a shard taken
    /// over resumes add its jobs one at a time.
    #[cfg(test)]
    pub fn recover(
        &mut self,
        job: HeldJob,
        done: DateTime<Utc>,
        now: DateTime<Utc>,
        late_threshold: chrono::Duration,
    ) {
        self.remove(&job.id);
        let slot = self.insert(PlannedJob::unplanned(job));
        self.recover_in(slot, done, now, late_threshold);
    }

    /// Plan the job in `slot`, which has no fires, in a shard taken over
    /// whose fires are stored up to `done`. Fires in `(done, now]` are late:
    /// all of them fire when the gap is within `late_threshold` (a
    /// failover), else the misfire policy decides (nobody was ticking). A
    /// job whose revision was written (`defined_at`) after `done` has
    /// nothing to catch up before it.
    fn recover_in(
        &mut self,
        slot: Slot,
        done: DateTime<Utc>,
        now: DateTime<Utc>,
        late_threshold: chrono::Duration,
    ) {
        let Some(planned) = self.slots[slot as usize].as_mut() else {
            return;
        };
        let job = &planned.job;
        let from = done.max(job.defined_at.at());
        if job.paused {
            planned.mark = Some(Millis::of(from));
            return;
        }
        // A previous owner with a lookahead stored fires up to `done`, which
        // may lie ahead of `now`: the next regular fire comes after both.
        let anchor = now.max(done);
        // One schedule search answers the usual case (nothing due since
        // `from`): a million jobs are recovered at a cold start.
        let first = job.timing.next_scheduled(from);
        let (catch_up, next) = if first.is_none_or(|t| t > now) {
            let next = if from <= anchor && first.is_none_or(|t| t > anchor) {
                first
            } else {
                job.timing.next_scheduled(anchor)
            };
            (Vec::new(), next)
        } else {
            let catch_up = if now - from <= late_threshold {
                job.timing.latest_scheduled_in(from, now)
            } else {
                job.timing.missed(from, now)
            };
            (catch_up, job.timing.next_scheduled(anchor))
        };
        self.schedule_in(slot, catch_up, next);
    }

    /// Keep a paused job (no fires), remembering since when it is paused.
    fn hold_paused(&mut self, job: HeldJob, since: DateTime<Utc>) {
        self.insert(PlannedJob {
            mark: Some(Millis::of(since)),
            ..PlannedJob::unplanned(job)
        });
    }

    /// Queue the catch-ups and the next regular fire of the job in `slot`.
    fn schedule_in(
        &mut self,
        slot: Slot,
        catch_up: Vec<DateTime<Utc>>,
        next: Option<DateTime<Utc>>,
    ) {
        let Some(planned) = self.slots[slot as usize].as_mut() else {
            return;
        };
        planned.mark = next.or(catch_up.last().copied()).map(Millis::of);
        for t in catch_up.into_iter().chain(next) {
            self.enqueue_in(slot, Millis::of(t));
        }
    }

    /// Catch-up fires of `job_id` scheduled in `(after, up_to]`, oldest first.
    pub fn catch_up_between(
        &self,
        job_id: &str,
        after: DateTime<Utc>,
        up_to: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        let mut times: Vec<DateTime<Utc>> = self
            .get(job_id)
            .into_iter()
            .flat_map(PlannedJob::pending)
            .filter(|t| *t > after && *t <= up_to)
            .collect();
        times.sort();
        times
    }

    /// Ids of the jobs held.
    pub fn job_ids(&self) -> impl Iterator<Item = &CompactString> {
        self.slots.iter().flatten().map(|planned| &planned.job.id)
    }

    /// Drop pending fires of `job_id` scheduled at or before `through`: they
    /// were emitted already (only catch-ups can be that old).
    pub fn drop_emitted(&mut self, job_id: &str, through: DateTime<Utc>) {
        self.dequeue_where(job_id, |scheduled| scheduled <= through);
    }

    /// Forget a job (deleted, purged, or replaced by an invalid value).
    pub fn remove(&mut self, job_id: &str) -> bool {
        self.dequeue_where(job_id, |_| true);
        let slots = &self.slots;
        let Some(slot) = self.index.remove(job_id, |held| id_in(slots, held)) else {
            return false;
        };
        self.slots[slot as usize] = None;
        self.free.push(slot);
        true
    }

    /// When the next pending fire is published.
    pub fn next_fire_at(&self) -> Option<DateTime<Utc>> {
        self.queue.first().map(|key| key.fire_at.at())
    }

    /// Up to `limit` fires whose publish instant is `<= now`, earliest first,
    /// without removing them.
    pub fn due(&self, now: DateTime<Utc>, limit: usize) -> Vec<Fire> {
        self.due_keys(now, limit)
            .filter_map(|key| self.fire_of(key))
            .collect()
    }

    fn due_keys(&self, now: DateTime<Utc>, limit: usize) -> impl Iterator<Item = &FireKey> {
        let now = Millis::of(now);
        self.queue
            .iter()
            .take_while(move |key| key.fire_at <= now)
            .take(limit)
    }

    fn fire_of(&self, key: &FireKey) -> Option<Fire> {
        let planned = self.slots[key.slot as usize].as_ref()?;
        Some(Fire {
            job: FiredJob::of(&planned.job),
            scheduled_at: key.scheduled().at(),
            fire_at: key.fire_at.at(),
        })
    }

    /// The key of `fire` in the sets, while its job is held.
    fn key_of(&self, fire: &Fire) -> Option<FireKey> {
        let slot = self.slot_of(&fire.job.id)?;
        Some(FireKey::new(
            Millis::of(fire.fire_at),
            Millis::of(fire.scheduled_at),
            slot,
        ))
    }

    /// Like [`FirePlan::due`], but the fires move to in-flight: they are not
    /// offered again until [`FirePlan::fired`] or [`FirePlan::unfired`].
    pub fn take_due(&mut self, now: DateTime<Utc>, limit: usize) -> Vec<Fire> {
        let keys: Vec<FireKey> = self.due_keys(now, limit).copied().collect();
        let mut fires = Vec::with_capacity(keys.len());
        for key in keys {
            self.queue.remove(&key);
            if let Some(fire) = self.fire_of(&key) {
                self.in_flight.insert(key);
                fires.push(fire);
            }
        }
        fires
    }

    /// A taken fire was not stored: offer it again.
    pub fn unfired(&mut self, fire: &Fire) {
        let Some(key) = self.key_of(fire) else {
            return;
        };
        if self.in_flight.remove(&key) {
            self.queue_key(key);
        }
    }

    /// Record that the due event of `fire` is stored: drop it from the queue
    /// and, if it was the job's regular fire, plan the next one (only when the
    /// job did not change meanwhile: an edit planned its own next fire).
    pub fn fired(&mut self, fire: &Fire) {
        let Some(key) = self.key_of(fire) else {
            return;
        };
        let was_queued = self.queue.remove(&key);
        let was_in_flight = self.in_flight.remove(&key);
        if !was_queued && !was_in_flight {
            return;
        }
        let scheduled = key.scheduled();
        if key.fire_at != scheduled {
            self.jittered.remove(&(scheduled, key.slot));
        }
        let Some(planned) = self.slots[key.slot as usize].as_mut() else {
            return;
        };
        planned.fires.retain(|pending| pending != scheduled);
        if planned.job.revision == fire.job.revision && planned.last_planned_ms() == Some(scheduled)
        {
            let next = planned
                .job
                .timing
                .next_scheduled(scheduled.at())
                .map(Millis::of);
            planned.mark = next;
            if let Some(t) = next {
                self.enqueue_in(key.slot, t);
            }
        }
    }

    /// Every scheduled time of this shard up to the returned instant is stored
    /// (or was never due): `now`, or just before the oldest pending fire.
    pub fn watermark(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        // The oldest scheduled time pending. A fire is published at or after
        // its scheduled time, so the earliest publish instant queued or in
        // flight is at most the oldest scheduled time of an unjittered fire,
        // and exactly it when no jittered fire is scheduled earlier; the
        // jittered ones' oldest scheduled time is known. The smaller of the
        // two is the oldest scheduled time of all.
        let oldest = [
            self.queue.first().map(|key| key.fire_at),
            self.in_flight.first().map(|key| key.fire_at),
            self.jittered.first().map(|(scheduled, _)| *scheduled),
        ]
        .into_iter()
        .flatten()
        .min()
        .map(Millis::at);
        match oldest {
            Some(oldest) if oldest <= now => oldest - chrono::Duration::milliseconds(1),
            _ => now,
        }
    }
}

#[cfg(test)]
mod tests;
