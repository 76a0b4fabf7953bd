//! The valid jobs of the shards this replica holds, one table per shard
//! ([`crate::shard_holdings`] says which shards: at a start all of them, later
//! those it owns). A shard's table is its fire plan too ([`FirePlan`]),
//! planned while this replica owns the shard and has planned it, else
//! holding its jobs with no fires. Taking a shard over reads only that
//! shard's jobs. Jobs are held small ([`HeldJob`]): a million of them is
//! the design point.

#[cfg(test)]
use chrono::{DateTime, Utc};
use compact_str::CompactString;
#[cfg(test)]
use jetcron_core::job::ValidJob;

use crate::compact_job::HeldJob;
use crate::plan::FirePlan;
use crate::shards::{shard_of, SHARDS};

/// The jobs, one table per shard.
pub struct Book {
    tables: Vec<FirePlan>,
    /// Whether each shard's table is planned (its fires are this replica's
    /// to publish while its lease is valid).
    planned: Vec<bool>,
}

impl Default for Book {
    fn default() -> Self {
        Self {
            tables: (0..SHARDS).map(|_| FirePlan::default()).collect(),
            planned: vec![false; SHARDS as usize],
        }
    }
}

impl Book {
    fn table(&self, job_id: &str) -> &FirePlan {
        &self.tables[shard_of(job_id) as usize]
    }

    pub fn get(&self, job_id: &str) -> Option<&HeldJob> {
        self.table(job_id).get(job_id).map(|planned| &planned.job)
    }

    /// Hold `job` in its shard, which is not planned (a shard's planned
    /// jobs change through its plan: [`Book::plan_mut`]), replacing what
    /// was held for its id.
    pub fn hold(&mut self, job: HeldJob) {
        let shard = shard_of(&job.id) as usize;
        debug_assert!(!self.planned[shard], "shard {shard} is planned");
        self.tables[shard].hold(job);
    }

    /// Hold `job` at `revision` (written at `defined_at`) in its shard,
    /// which is not planned.
    #[cfg(test)]
    pub fn insert(&mut self, job: &ValidJob, revision: u64, defined_at: DateTime<Utc>) {
        let held = HeldJob::of(job, revision, defined_at);
        self.hold(held);
    }

    /// Forget `job_id` (its fires too); whether it was held.
    pub fn remove(&mut self, job_id: &str) -> bool {
        self.tables[shard_of(job_id) as usize].remove(job_id)
    }

    /// The jobs of one shard.
    pub fn shard(&self, shard: u32) -> impl Iterator<Item = &HeldJob> {
        self.tables
            .get(shard as usize)
            .into_iter()
            .flat_map(FirePlan::jobs)
    }

    pub fn len(&self) -> usize {
        self.tables.iter().map(FirePlan::len).sum()
    }

    /// How many jobs one shard holds.
    pub fn shard_len(&self, shard: u32) -> usize {
        self.tables.get(shard as usize).map_or(0, FirePlan::len)
    }

    /// Make room for `jobs` in all (spread over the shards as their ids
    /// are) in the shards `held` names, so that loading them does not grow
    /// each table step by step. Each gets a little more than its even
    /// share: ids spread over the shards within a fraction of a percent
    /// (at a million jobs, 62,456 to 62,529 a shard), and a table one job
    /// over its room would be copied into one twice as large.
    pub fn reserve(&mut self, jobs: usize, held: impl Fn(u32) -> bool) {
        let each = with_slack(jobs.div_ceil(SHARDS as usize));
        for (shard, table) in (0..SHARDS).zip(self.tables.iter_mut()) {
            if held(shard) {
                table.reserve(each.saturating_sub(table.len()));
            }
        }
    }

    /// Give the job `job_id` an id in an allocation of its own if its id
    /// is too long to be kept in the job itself (returns whether it is
    /// held). At a start the ids of all shards are allocated in among each
    /// other; once those of other shards are dropped, the memory pages they
    /// shared with the ids kept cannot be given back. Moved, the kept ones
    /// leave their old pages empty.
    pub fn move_id(&mut self, job_id: &str) -> bool {
        let Some(held) = self.tables[shard_of(job_id) as usize].job_mut(job_id) else {
            return false;
        };
        if held.id.is_heap_allocated() {
            held.id = CompactString::from(held.id.as_str());
        }
        true
    }

    /// Hold the jobs of `table` (one of `shard`, none planned), a shard
    /// loaded by a pass: the table goes in whole when the shard holds no job
    /// (as a shard loaded holds none: its feed entries waited), else its
    /// jobs are held one by one. Returns how many jobs it had.
    pub fn put_loaded(&mut self, shard: u32, table: FirePlan) -> usize {
        let loaded = table.len();
        let Some(held) = self.tables.get_mut(shard as usize) else {
            return 0;
        };
        debug_assert!(!self.planned[shard as usize], "shard {shard} is planned");
        debug_assert!(
            table.jobs().all(|job| shard_of(&job.id) == shard),
            "a job of another shard in the table of shard {shard}"
        );
        if held.is_empty() {
            *held = table;
        } else {
            for planned in table.into_jobs().into_iter().flatten() {
                held.hold(planned.job);
            }
        }
        loaded
    }

    /// Let go of every job of `shard` (and its plan); returns the table.
    pub fn drop_shard(&mut self, shard: u32) -> FirePlan {
        let Some(table) = self.tables.get_mut(shard as usize) else {
            return FirePlan::default();
        };
        self.planned[shard as usize] = false;
        std::mem::take(table)
    }

    pub fn is_empty(&self) -> bool {
        self.tables.iter().all(FirePlan::is_empty)
    }

    /// The plan of `shard`, if it is planned.
    pub fn plan(&self, shard: u32) -> Option<&FirePlan> {
        self.is_planned(shard).then(|| &self.tables[shard as usize])
    }

    /// [`Book::plan`], to change.
    pub fn plan_mut(&mut self, shard: u32) -> Option<&mut FirePlan> {
        self.is_planned(shard)
            .then(|| &mut self.tables[shard as usize])
    }

    /// The planned shards and their plans.
    pub fn plans(&self) -> impl Iterator<Item = (u32, &FirePlan)> {
        (0..SHARDS)
            .zip(&self.tables)
            .zip(&self.planned)
            .filter_map(|(table, planned)| (*planned).then_some(table))
    }

    /// [`Book::plans`], to change.
    pub fn plans_mut(&mut self) -> impl Iterator<Item = (u32, &mut FirePlan)> {
        (0..SHARDS)
            .zip(self.tables.iter_mut())
            .zip(&self.planned)
            .filter_map(|(table, planned)| (*planned).then_some(table))
    }

    /// Whether any shard is planned.
    pub fn has_plans(&self) -> bool {
        self.planned.contains(&true)
    }

    /// Whether `shard` is planned.
    pub fn is_planned(&self, shard: u32) -> bool {
        self.planned.get(shard as usize).copied().unwrap_or(false)
    }

    /// Stop planning `shard` (no longer owned): its fires go, its jobs stay.
    pub fn unplan(&mut self, shard: u32) {
        if self.is_planned(shard) {
            self.planned[shard as usize] = false;
            self.tables[shard as usize].unplan();
        }
    }

    /// Take the table of `shard` out to be planned from scratch
    /// ([`FirePlan::plan_all`]; a plan it had is dropped first); until
    /// [`Book::put_planned`] gives it back the shard holds no job.
    pub fn take_to_plan(&mut self, shard: u32) -> FirePlan {
        self.unplan(shard);
        self.tables
            .get_mut(shard as usize)
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Give back the table of `shard`, planned.
    pub fn put_planned(&mut self, shard: u32, plan: FirePlan) {
        if let Some(table) = self.tables.get_mut(shard as usize) {
            *table = plan;
            self.planned[shard as usize] = true;
        }
    }
}

/// Room for `jobs` and some more: a table sized exactly doubles at the
/// first job added after it is filled, and stays doubled.
pub(crate) fn with_slack(jobs: usize) -> usize {
    jobs + jobs / 64 + 16
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetcron_core::job::parse_job;

    /// When the tests' jobs are written: any fixed instant.
    fn written_at() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).expect("instant")
    }

    fn job(id: &str, schedule: &str) -> ValidJob {
        let json = format!(
            r#"{{"id":"{id}","schedule":"{schedule}","target":{{"type":"shell","command":"true"}}}}"#
        );
        parse_job(json.as_bytes(), None).expect("valid job")
    }

    #[test]
    fn jobs_are_found_replaced_and_removed_by_id_in_their_shard() {
        let mut book = Book::default();
        let at = written_at();
        for i in 0..200 {
            book.insert(&job(&format!("job-{i}"), "@daily"), i + 1, at);
        }
        assert_eq!(book.len(), 200);
        book.insert(&job("job-7", "@hourly"), 500, at);
        let again = book.get("job-7").expect("held");
        assert_eq!(again.revision, 500);
        assert_eq!(book.len(), 200, "replaced, not added");
        // Pools are named by one number.
        let other = book.get("job-8").expect("held");
        assert_eq!(again.pool, other.pool);
        let shard = shard_of("job-7");
        assert!(book.shard(shard).any(|held| &*held.id == "job-7"));
        assert!(book.remove("job-7"));
        assert!(book.get("job-7").is_none());
        assert!(!book.remove("job-7"));
        assert_eq!(book.len(), 199);
        let in_shards: usize = (0..SHARDS).map(|s| book.shard(s).count()).sum();
        assert_eq!(in_shards, 199);
    }

    #[test]
    fn a_loaded_table_goes_in_whole_or_is_held_job_by_job_beside_what_is_there() {
        let at = written_at();
        let ids: Vec<String> = (0..400).map(|i| format!("job-{i}")).collect();
        let shard = shard_of(&ids[0]);
        let of_shard: Vec<&String> = ids.iter().filter(|id| shard_of(id) == shard).collect();
        let table = |ids: &[&String], revision: u64| {
            let mut table = FirePlan::default();
            for id in ids {
                table.hold(HeldJob::of(&job(id, "@daily"), revision, at));
            }
            table
        };
        let mut book = Book::default();
        assert_eq!(book.put_loaded(shard, table(&of_shard, 1)), of_shard.len());
        assert_eq!(book.shard_len(shard), of_shard.len());

        // A shard that holds a job already keeps it beside the loaded ones,
        // and the loaded one replaces it where both have an id.
        let mut book = Book::default();
        book.insert(&job(of_shard[0], "@hourly"), 9, at);
        assert_eq!(
            book.put_loaded(shard, table(&of_shard[1..], 2)),
            of_shard.len() - 1
        );
        assert_eq!(book.shard_len(shard), of_shard.len());
        assert_eq!(book.get(of_shard[0]).expect("kept").revision, 9);
        book.put_loaded(shard, table(&of_shard[..1], 3));
        assert_eq!(book.get(of_shard[0]).expect("replaced").revision, 3);
        assert_eq!(book.shard_len(shard), of_shard.len());
    }

    /// An id longer than a job keeps in itself.
    fn long_id(i: u64) -> String {
        format!("a-job-whose-id-is-longer-than-24-bytes-{i}")
    }

    #[test]
    fn a_moved_id_is_the_same_id_in_a_new_allocation() {
        let mut book = Book::default();
        let at = written_at();
        for i in 0..100 {
            book.insert(&job(&long_id(i), "@daily"), i + 1, at);
        }
        book.insert(&job("short", "@daily"), 101, at);
        assert!(!book.get("short").expect("held").id.is_heap_allocated());
        assert!(book.move_id("short"), "held, nothing to move");
        let shard = shard_of(&long_id(3));
        let before: Vec<(HeldJob, *const u8)> = book
            .shard(shard)
            .map(|held| (held.clone(), held.id.as_ptr()))
            .collect();
        for (old, _) in &before {
            assert!(book.move_id(&old.id));
        }
        assert!(!book.move_id("not-held"));
        assert_eq!(book.shard_len(shard), before.len());
        for (old, was_at) in &before {
            let new = book.get(&old.id).expect("still held");
            assert!(new.id.is_heap_allocated());
            assert_ne!(new.id.as_ptr(), *was_at, "its id moved");
            assert_eq!(
                (&*new.id, new.revision, new.defined_at, new.paused),
                (&*old.id, old.revision, old.defined_at, old.paused)
            );
        }
    }

    #[test]
    fn a_shard_is_planned_in_place_and_unplanned_with_its_jobs_kept() {
        let mut book = Book::default();
        let at = written_at();
        for i in 0..300 {
            book.insert(&job(&format!("job-{i}"), "* * * * * *"), i + 1, at);
        }
        let shard = shard_of("job-5");
        let jobs = book.shard_len(shard);
        assert!(book.plan(shard).is_none(), "held, not planned");
        let mut table = book.take_to_plan(shard);
        assert_eq!(book.shard_len(shard), 0, "out to be planned");
        table.plan_all(at, at, chrono::Duration::seconds(60));
        book.put_planned(shard, table);
        assert_eq!(book.plans().map(|(s, _)| s).collect::<Vec<_>>(), [shard]);
        let plan = book.plan(shard).expect("planned");
        assert_eq!(plan.len(), jobs);
        assert_eq!(plan.pending_fires(), jobs, "one next fire each");
        book.unplan(shard);
        assert!(book.plan(shard).is_none());
        assert_eq!(book.shard_len(shard), jobs, "its jobs are still held");
        assert!(!book.has_plans());
        // Planned again from where it stopped: the same fires.
        let mut table = book.take_to_plan(shard);
        assert_eq!(table.pending_fires(), 0, "unplanned, no fire kept");
        table.plan_all(at, at, chrono::Duration::seconds(60));
        assert_eq!(table.pending_fires(), jobs);
        book.put_planned(shard, table);
        let dropped = book.drop_shard(shard);
        assert_eq!(dropped.len(), jobs);
        assert!(!book.is_planned(shard));
        assert_eq!(book.len(), 300 - jobs);
        assert!(book.get("job-5").is_none());
    }

    #[test]
    fn room_made_for_more_jobs_keeps_the_jobs_held() {
        let mut book = Book::default();
        let at = written_at();
        for i in 0..300 {
            book.insert(&job(&format!("job-{i}"), "@daily"), i + 1, at);
        }
        // The tables are rebuilt by the ids the held jobs keep.
        book.reserve(100_000, |_| true);
        for i in 0..300 {
            let held = book.get(&format!("job-{i}")).expect("still held");
            assert_eq!(held.revision, i + 1);
        }
        assert!(book.get("job-300").is_none());
        assert_eq!(book.len(), 300);
        let shard = shard_of("job-5");
        assert!(book.shard_len(shard) > 0);
        assert_eq!(book.shard_len(shard), book.shard(shard).count());
    }
}
