//! Every valid job this replica knows, grouped by shard, whether or not it
//! owns the shard: a standby needs them all to take a shard over, and taking
//! one over reads only that shard's jobs. Jobs are held small
//! ([`HeldJob`]): a million of them is the design point.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use jetcron_core::job::ValidJob;

/// One shard's jobs by id (foldhash: SipHash was 4 % of a cold start's CPU).
type ShardJobs = hashbrown::HashMap<Arc<str>, Arc<HeldJob>>;

use crate::held_job::HeldJob;
use crate::shards::{shard_of, SHARDS};

/// The jobs, one map per shard.
pub struct Book {
    by_shard: Vec<ShardJobs>,
    /// Pool names, one allocation each.
    pools: hashbrown::HashMap<Box<str>, Arc<String>>,
}

impl Default for Book {
    fn default() -> Self {
        Self {
            by_shard: (0..SHARDS).map(|_| ShardJobs::default()).collect(),
            pools: hashbrown::HashMap::default(),
        }
    }
}

impl Book {
    fn map(&self, job_id: &str) -> &ShardJobs {
        &self.by_shard[shard_of(job_id) as usize]
    }

    pub fn get(&self, job_id: &str) -> Option<&Arc<HeldJob>> {
        self.map(job_id).get(job_id)
    }

    /// Hold `job` at `revision` (written at `defined_at`), replacing what
    /// was held for its id; returns the held form.
    pub fn insert(
        &mut self,
        job: &ValidJob,
        revision: u64,
        defined_at: DateTime<Utc>,
    ) -> Arc<HeldJob> {
        let shard = shard_of(&job.spec.id) as usize;
        // Keep the id already allocated for this key.
        let id = self.by_shard[shard]
            .get_key_value(job.spec.id.as_str())
            .map_or_else(|| Arc::from(job.spec.id.as_str()), |(id, _)| Arc::clone(id));
        let pool = match self.pools.get(job.pool.as_str()) {
            Some(pool) => Arc::clone(pool),
            None => {
                let pool = Arc::new(job.pool.clone());
                self.pools
                    .insert(job.pool.as_str().into(), Arc::clone(&pool));
                pool
            }
        };
        let held = Arc::new(HeldJob::new(
            job,
            Arc::clone(&id),
            pool,
            revision,
            defined_at,
        ));
        self.by_shard[shard].insert(id, Arc::clone(&held));
        held
    }

    pub fn remove(&mut self, job_id: &str) -> Option<Arc<HeldJob>> {
        self.by_shard[shard_of(job_id) as usize].remove(job_id)
    }

    /// The jobs of one shard.
    pub fn shard(&self, shard: u32) -> impl Iterator<Item = &Arc<HeldJob>> {
        self.by_shard
            .get(shard as usize)
            .into_iter()
            .flat_map(ShardJobs::values)
    }

    pub fn len(&self) -> usize {
        self.by_shard.iter().map(ShardJobs::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_shard.iter().all(ShardJobs::is_empty)
    }
}
