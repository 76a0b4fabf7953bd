//! Which jobs follow which: the executor's view of every job that names
//! parents in `after`, kept from the process's feed of `jetcron_jobs`
//! (`jetcron_io::job_feed`).
//!
//! Only chained jobs are kept (their definition, for the due event of a
//! chained run, and their links). In `jetcron all` the feed decodes every
//! value for the ticker and the catalog anyway; an executor on its own has
//! a feed that decodes only values naming `after` (`JobFeed::chains_only`),
//! so a job without parents costs no parse there. A definition
//! that would close a cycle with the links already known (possible only by
//! a direct `nats kv put`: the API refuses it) has its links ignored, with
//! a warning, so a loop of jobs never starts itself forever.

use chrono::{DateTime, Utc};
use jetcron_core::chain;
use jetcron_core::job::{ChainLink, JobSpec};
use jetcron_io::job_feed::{self, FeedReceiver, JobEntry, JobView};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::RwLock;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// A chained job as the starter needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainedJob {
    pub spec: JobSpec,
    pub pool: String,
    /// KV revision of the definition.
    pub revision: u64,
    /// When that revision was stored (server time).
    pub written_at: DateTime<Utc>,
}

impl ChainedJob {
    pub fn id(&self) -> &str {
        &self.spec.id
    }

    pub fn links(&self) -> &[ChainLink] {
        &self.spec.after
    }
}

#[derive(Debug, Default)]
struct State {
    jobs: BTreeMap<String, ChainedJob>,
    /// Parent id → ids of the jobs that follow it.
    children: BTreeMap<String, BTreeSet<String>>,
    /// The watch has delivered every value the bucket held when it opened.
    synced: bool,
}

impl State {
    fn remove(&mut self, id: &str) {
        if let Some(old) = self.jobs.remove(id) {
            for link in old.links() {
                if let Some(set) = self.children.get_mut(&link.job) {
                    set.remove(id);
                    if set.is_empty() {
                        self.children.remove(&link.job);
                    }
                }
            }
        }
    }

    fn parents_of(&self, id: &str) -> Vec<String> {
        self.jobs
            .get(id)
            .map(|job| job.links().iter().map(|l| l.job.clone()).collect())
            .unwrap_or_default()
    }

    fn insert(&mut self, job: ChainedJob) {
        let id = job.id().to_string();
        self.remove(&id);
        if let Some(cycle) = chain::find_cycle(&id, job.links(), &|j| self.parents_of(j)) {
            warn!(
                job_id = %id,
                cycle = %chain::cycle_text(&cycle),
                "definition written to the bucket closes a cycle of chained jobs; its after is ignored"
            );
            return;
        }
        for link in job.links() {
            self.children
                .entry(link.job.clone())
                .or_default()
                .insert(id.clone());
        }
        self.jobs.insert(id, job);
    }
}

/// Every chained job, by parent.
#[derive(Debug)]
pub struct ChainIndex {
    state: RwLock<State>,
    /// How many chained jobs are held, for [`ChainIndex::wait_for_a_chain`].
    chained: watch::Sender<usize>,
}

impl Default for ChainIndex {
    fn default() -> Self {
        Self {
            state: RwLock::default(),
            chained: watch::Sender::new(0),
        }
    }
}

impl ChainIndex {
    /// Wait until some job names a parent; `false` at `shutdown` first.
    pub async fn wait_for_a_chain(&self, shutdown: &CancellationToken) -> bool {
        let mut chained = self.chained.subscribe();
        tokio::select! {
            _ = shutdown.cancelled() => false,
            held = chained.wait_for(|held| *held > 0) => held.is_ok(),
        }
    }

    /// When the chained job held longest was stored.
    pub fn oldest_chain_written_at(&self) -> Option<DateTime<Utc>> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.jobs.values().map(|job| job.written_at).min()
    }

    /// Whether any job follows `parent`.
    pub fn has_children(&self, parent: &str) -> bool {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.children.contains_key(parent)
    }

    /// The jobs that follow `parent`, with the link that names it.
    pub fn children_of(&self, parent: &str) -> Vec<(ChainedJob, ChainLink)> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let Some(ids) = state.children.get(parent) else {
            return Vec::new();
        };
        ids.iter()
            .filter_map(|id| state.jobs.get(id))
            .filter_map(|job| {
                let link = job.links().iter().find(|l| l.job == parent)?.clone();
                Some((job.clone(), link))
            })
            .collect()
    }

    /// Whether the watch has caught up with the bucket.
    pub fn is_synced(&self) -> bool {
        self.state.read().unwrap_or_else(|e| e.into_inner()).synced
    }

    /// Keep up with the jobs bucket through `feed` until `shutdown`.
    pub async fn follow(&self, feed: FeedReceiver, shutdown: CancellationToken) {
        job_feed::keep(feed, self, &shutdown).await;
    }

    fn put(&self, key: &str, job: Option<ChainedJob>) {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let before = state.jobs.len();
        match job {
            Some(job) => state.insert(job),
            None => state.remove(key),
        }
        let held = state.jobs.len();
        drop(state);
        // Most entries are of jobs without parents: nothing to tell.
        if held != before {
            self.chained.send_replace(held);
        }
    }
}

impl JobView for ChainIndex {
    fn apply(&self, entry: &JobEntry) {
        let job = entry
            .valid()
            .filter(|job| !job.spec.after.is_empty())
            .map(|job| ChainedJob {
                pool: job.pool.clone(),
                spec: job.spec.clone(),
                revision: entry.revision,
                written_at: entry.written_at,
            });
        self.put(&entry.key, job);
    }

    fn synced(&self) {
        self.state.write().unwrap_or_else(|e| e.into_inner()).synced = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::jetstream::kv;
    use jetcron_core::schedule_lines::SharedLines;
    use jetcron_io::job_feed::Needs;

    /// Apply a bucket entry as a chain index's own feed hands it on: a put
    /// of `key` (`value`), or its deletion (`None`).
    fn take(index: &ChainIndex, key: &str, revision: u64, value: Option<&[u8]>) {
        let entry = kv::Entry {
            bucket: "jetcron_jobs".into(),
            key: key.into(),
            value: value.map(|v| v.to_vec().into()).unwrap_or_default(),
            revision,
            delta: 0,
            created: chrono::Utc::now(),
            operation: match value {
                Some(_) => kv::Operation::Put,
                None => kv::Operation::Delete,
            },
            seen_current: true,
        };
        index.apply(&JobEntry::decode(
            entry,
            Needs::Chained,
            &SharedLines::default(),
        ));
    }

    fn put(index: &ChainIndex, id: &str, after: &str) {
        let json = format!(
            r#"{{"id":"{id}","after":{after},"target":{{"type":"shell","command":"true"}}}}"#
        );
        take(index, id, 1, Some(json.as_bytes()));
    }

    fn children(index: &ChainIndex, parent: &str) -> Vec<String> {
        index
            .children_of(parent)
            .into_iter()
            .map(|(job, _)| job.id().to_string())
            .collect()
    }

    #[test]
    fn children_follow_puts_edits_and_deletes() {
        let index = ChainIndex::default();
        put(&index, "load", r#"[{"job":"extract"}]"#);
        put(
            &index,
            "report",
            r#"[{"job":"extract","on":"failure"},{"job":"load"}]"#,
        );
        assert_eq!(children(&index, "extract"), ["load", "report"]);
        assert_eq!(children(&index, "load"), ["report"]);
        let (_, link) = index
            .children_of("extract")
            .into_iter()
            .find(|(j, _)| j.id() == "report")
            .expect("report");
        assert_eq!(link.on, jetcron_core::job::ChainOn::Failure);
        // An edit moves the links; a delete drops them.
        put(&index, "report", r#"[{"job":"load"}]"#);
        assert_eq!(children(&index, "extract"), ["load"]);
        take(&index, "load", 2, None);
        assert!(children(&index, "extract").is_empty());
        assert!(!index.has_children("extract") && index.has_children("load"));
        assert_eq!(children(&index, "load"), ["report"]);
    }

    #[test]
    fn a_definition_closing_a_cycle_is_not_followed() {
        let index = ChainIndex::default();
        put(&index, "b", r#"[{"job":"a"}]"#);
        put(&index, "c", r#"[{"job":"b"}]"#);
        // Written straight into the bucket: a after c closes a → c → b → a.
        put(&index, "a", r#"[{"job":"c"}]"#);
        assert!(children(&index, "c").is_empty());
        assert_eq!(children(&index, "a"), ["b"]);
    }

    #[test]
    fn jobs_without_parents_and_invalid_ones_are_not_kept() {
        let index = ChainIndex::default();
        take(
            &index,
            "plain",
            1,
            Some(
                br#"{"id":"plain","schedule":"@daily","target":{"type":"shell","command":"true"}}"#,
            ),
        );
        take(
            &index,
            "broken",
            1,
            Some(br#"{"id":"broken","after":[{"job":"plain","on":"sometimes"}],"target":{"type":"shell","command":"true"}}"#),
        );
        assert!(children(&index, "plain").is_empty());
    }
}
