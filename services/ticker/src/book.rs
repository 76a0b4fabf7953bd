//! Every valid job this replica knows, grouped by shard, whether or not it
//! owns the shard: a standby needs them all to take a shard over, and taking
//! one over reads only that shard's jobs.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use jetcron_core::job::ValidJob;

use crate::shards::{shard_of, SHARDS};

/// A job as the book holds it.
pub struct BookEntry {
    pub job: Arc<ValidJob>,
    pub revision: u64,
    /// When this revision was written (server time).
    pub defined_at: DateTime<Utc>,
}

/// The jobs, one map per shard.
pub struct Book {
    by_shard: Vec<HashMap<String, BookEntry>>,
}

impl Default for Book {
    fn default() -> Self {
        Self {
            by_shard: (0..SHARDS).map(|_| HashMap::new()).collect(),
        }
    }
}

impl Book {
    fn map(&self, job_id: &str) -> &HashMap<String, BookEntry> {
        &self.by_shard[shard_of(job_id) as usize]
    }

    pub fn get(&self, job_id: &str) -> Option<&BookEntry> {
        self.map(job_id).get(job_id)
    }

    pub fn insert(&mut self, job_id: String, entry: BookEntry) {
        self.by_shard[shard_of(&job_id) as usize].insert(job_id, entry);
    }

    pub fn remove(&mut self, job_id: &str) -> Option<BookEntry> {
        self.by_shard[shard_of(job_id) as usize].remove(job_id)
    }

    /// The jobs of one shard.
    pub fn shard(&self, shard: u32) -> impl Iterator<Item = &BookEntry> {
        self.by_shard
            .get(shard as usize)
            .into_iter()
            .flat_map(HashMap::values)
    }

    pub fn len(&self) -> usize {
        self.by_shard.iter().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_shard.iter().all(HashMap::is_empty)
    }
}
