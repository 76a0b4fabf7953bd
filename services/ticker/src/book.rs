//! The valid jobs of the shards this replica holds, grouped by shard
//! ([`crate::holding`] says which shards: at a start all of them, later
//! those it owns). Taking a shard over reads only that shard's jobs. Jobs
//! are held small ([`HeldJob`]): a million of them is the design point.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use jetcron_core::job::ValidJob;

use crate::held_job::HeldJob;
use crate::shards::{shard_of, SHARDS};

/// One shard's jobs, found by id (the id is the held job's own: a job
/// costs a pointer here, where a map keyed by a second pointer to the id
/// cost about 50 bytes).
type ShardJobs = hashbrown::HashTable<Arc<HeldJob>>;

/// The jobs, one table per shard.
pub struct Book {
    by_shard: Vec<ShardJobs>,
    hasher: hashbrown::DefaultHashBuilder,
    /// Pool names, one allocation each.
    pools: hashbrown::HashMap<Box<str>, Arc<String>>,
}

impl Default for Book {
    fn default() -> Self {
        Self {
            by_shard: (0..SHARDS).map(|_| ShardJobs::default()).collect(),
            hasher: hashbrown::DefaultHashBuilder::default(),
            pools: hashbrown::HashMap::default(),
        }
    }
}

/// The hash a job's id has in the book's tables.
fn hash_of(hasher: &hashbrown::DefaultHashBuilder, job_id: &str) -> u64 {
    std::hash::BuildHasher::hash_one(hasher, job_id)
}

impl Book {
    fn hash(&self, job_id: &str) -> u64 {
        hash_of(&self.hasher, job_id)
    }

    pub fn get(&self, job_id: &str) -> Option<&Arc<HeldJob>> {
        self.by_shard[shard_of(job_id) as usize].find(self.hash(job_id), |held| &*held.id == job_id)
    }

    /// Hold `job` at `revision` (written at `defined_at`), replacing what
    /// was held for its id; returns the held form.
    pub fn insert(
        &mut self,
        job: &ValidJob,
        revision: u64,
        defined_at: DateTime<Utc>,
    ) -> Arc<HeldJob> {
        let job_id = job.spec.id.as_str();
        let shard = shard_of(job_id) as usize;
        let hash = self.hash(job_id);
        let pool = Arc::clone(
            self.pools
                .entry_ref(job.pool.as_str())
                .or_insert_with(|| Arc::new(job.pool.clone())),
        );
        let Self {
            by_shard, hasher, ..
        } = self;
        let entry = by_shard[shard].entry(
            hash,
            |held| &*held.id == job_id,
            |held| hash_of(hasher, &held.id),
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(mut held) => {
                // Keep the id already allocated for this key.
                let id = Arc::clone(&held.get().id);
                let new = Arc::new(HeldJob::new(job, id, pool, revision, defined_at));
                *held.get_mut() = Arc::clone(&new);
                new
            }
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                let new = Arc::new(HeldJob::new(
                    job,
                    Arc::from(job_id),
                    pool,
                    revision,
                    defined_at,
                ));
                vacant.insert(Arc::clone(&new));
                new
            }
        }
    }

    pub fn remove(&mut self, job_id: &str) -> Option<Arc<HeldJob>> {
        let hash = self.hash(job_id);
        let entry = self.by_shard[shard_of(job_id) as usize]
            .find_entry(hash, |held| &*held.id == job_id)
            .ok()?;
        Some(entry.remove().0)
    }

    /// The jobs of one shard.
    pub fn shard(&self, shard: u32) -> impl Iterator<Item = &Arc<HeldJob>> {
        self.by_shard
            .get(shard as usize)
            .into_iter()
            .flat_map(ShardJobs::iter)
    }

    pub fn len(&self) -> usize {
        self.by_shard.iter().map(ShardJobs::len).sum()
    }

    /// How many jobs one shard holds.
    pub fn shard_len(&self, shard: u32) -> usize {
        self.by_shard.get(shard as usize).map_or(0, ShardJobs::len)
    }

    /// Make room for `jobs` in all (spread over the shards as their ids
    /// are) in the shards `held` names, so that loading them does not grow
    /// each table step by step.
    pub fn reserve(&mut self, jobs: usize, held: impl Fn(u32) -> bool) {
        let each = jobs.div_ceil(SHARDS as usize);
        let Self {
            by_shard, hasher, ..
        } = self;
        for (shard, table) in (0..SHARDS).zip(by_shard.iter_mut()) {
            if held(shard) {
                let more = each.saturating_sub(table.len());
                table.reserve(more, |held| hash_of(hasher, &held.id));
            }
        }
    }

    /// Hold `held` as it is (made by a pass; pool names are shared within
    /// the pass, not with the book), replacing what was held for its id.
    pub fn insert_held(&mut self, held: Arc<HeldJob>) {
        let shard = shard_of(&held.id) as usize;
        let hash = self.hash(&held.id);
        let Self {
            by_shard, hasher, ..
        } = self;
        match by_shard[shard].entry(
            hash,
            |old| old.id == held.id,
            |old| hash_of(hasher, &old.id),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut old) => *old.get_mut() = held,
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                vacant.insert(held);
            }
        }
    }

    /// Move the job `job_id` into allocations of its own (returns whether
    /// it is held). At a start the jobs of all shards are allocated in
    /// among each other; once those of other shards are dropped, the memory
    /// pages they shared with the jobs kept cannot be given back. Moved,
    /// the kept ones leave their old pages empty. Whatever else points at
    /// the old copy (a plan) must be pointed at the new one.
    pub fn move_job(&mut self, job_id: &str) -> bool {
        let hash = self.hash(job_id);
        let Some(held) =
            self.by_shard[shard_of(job_id) as usize].find_mut(hash, |held| &*held.id == job_id)
        else {
            return false;
        };
        *held = Arc::new(held.moved());
        true
    }

    /// Let go of every job of `shard` (its table's memory too); returns
    /// them.
    pub fn drop_shard(&mut self, shard: u32) -> Vec<Arc<HeldJob>> {
        self.by_shard
            .get_mut(shard as usize)
            .map(|table| std::mem::take(table).into_iter().collect())
            .unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.by_shard.iter().all(ShardJobs::is_empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetcron_core::job::parse_job;

    fn job(id: &str, schedule: &str) -> ValidJob {
        let json = format!(
            r#"{{"id":"{id}","schedule":"{schedule}","target":{{"type":"shell","command":"true"}}}}"#
        );
        parse_job(json.as_bytes(), None).expect("valid job")
    }

    #[test]
    fn jobs_are_found_replaced_and_removed_by_id_in_their_shard() {
        let mut book = Book::default();
        let at = Utc::now();
        for i in 0..200 {
            book.insert(&job(&format!("job-{i}"), "@daily"), i + 1, at);
        }
        assert_eq!(book.len(), 200);
        let first = book.insert(&job("job-7", "@hourly"), 500, at);
        let again = book.get("job-7").expect("held");
        assert_eq!(again.revision, 500);
        assert_eq!(book.len(), 200, "replaced, not added");
        // The id of the key is allocated once, and pools are shared.
        assert!(Arc::ptr_eq(&first.id, &again.id));
        let other = book.get("job-8").expect("held");
        assert!(Arc::ptr_eq(&first.pool, &other.pool));
        let shard = shard_of("job-7");
        assert!(book.shard(shard).any(|held| &*held.id == "job-7"));
        assert_eq!(book.remove("job-7").map(|held| held.revision), Some(500));
        assert!(book.get("job-7").is_none());
        assert!(book.remove("job-7").is_none());
        assert_eq!(book.len(), 199);
        let in_shards: usize = (0..SHARDS).map(|s| book.shard(s).count()).sum();
        assert_eq!(in_shards, 199);
    }

    #[test]
    fn a_compacted_shard_holds_the_same_jobs_in_new_allocations() {
        let mut book = Book::default();
        let at = Utc::now();
        for i in 0..100 {
            book.insert(&job(&format!("job-{i}"), "@daily"), i + 1, at);
        }
        let shard = shard_of("job-3");
        let before: Vec<Arc<HeldJob>> = book.shard(shard).cloned().collect();
        for old in &before {
            assert!(book.move_job(&old.id));
        }
        assert!(!book.move_job("not-held"));
        assert_eq!(book.shard_len(shard), before.len());
        for old in &before {
            let new = book.get(&old.id).expect("still held");
            assert!(!Arc::ptr_eq(old, new), "moved");
            assert!(!Arc::ptr_eq(&old.id, &new.id), "its id too");
            assert_eq!(
                (&*new.id, new.revision, new.defined_at, new.paused),
                (&*old.id, old.revision, old.defined_at, old.paused)
            );
        }
        // A job made elsewhere (a pass) replaces what was held for its id.
        let loaded = Arc::new(HeldJob::new(
            &job("job-3", "@hourly"),
            Arc::from("job-3"),
            Arc::new("default".to_string()),
            900,
            at,
        ));
        book.insert_held(Arc::clone(&loaded));
        assert!(Arc::ptr_eq(book.get("job-3").expect("held"), &loaded));
        assert_eq!(book.len(), 100);
    }

    #[test]
    fn room_made_for_more_jobs_keeps_the_jobs_held() {
        let mut book = Book::default();
        let at = Utc::now();
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
        let before = book.shard_len(shard);
        let dropped = book.drop_shard(shard);
        assert_eq!(dropped.len(), before);
        assert!(dropped.iter().all(|held| shard_of(&held.id) == shard));
        assert_eq!(book.shard_len(shard), 0);
        assert_eq!(book.len(), 300 - dropped.len());
        assert!(book.get("job-5").is_none());
    }
}
