//! Letting go of the jobs of shards owned elsewhere, a piece at a time.
//!
//! Once ownership has settled, a replica drops the jobs of the shards it
//! does not own, moves the ids of the jobs it keeps into allocations of
//! their own (at a start they were allocated in among the others, whose
//! pages could then not go back to the OS; a job itself lives in its
//! shard's table, one allocation) and asks the allocator to give freed
//! memory back.
//! At ten million jobs over three replicas that was six million jobs freed
//! and four million moved: about 20 s in one go, in which the ticker's loop
//! published nothing and (on the same runtime) lease renewals starved, so
//! the other replicas took the shards. Here the loop hands the work over
//! when it drops shards, and each [`Tidying::step`] does at most a time
//! budget of it; the loop publishes due events in between.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use compact_str::CompactString;
use tracing::info;

use crate::book::Book;
use crate::plan::{FirePlan, PlannedJob};

/// Work of one step before the loop gets back to its fires.
pub const STEP_BUDGET: Duration = Duration::from_millis(10);

/// Items handled between two looks at the clock.
const BETWEEN_CLOCK_READS: usize = 1024;

/// A kept shard whose jobs' ids are being moved.
struct Compacting {
    shard: u32,
    /// The ids still to move, taken from the shard's table when its turn
    /// comes (a table cannot be walked on from where a step stopped).
    ids: Option<Vec<CompactString>>,
}

/// What is left to do after shards were dropped.
#[derive(Default)]
pub struct Tidying {
    /// Jobs of dropped shards, one list per shard, freed from the end.
    freeing: Vec<Vec<Option<PlannedJob>>>,
    /// Kept shards whose jobs are still to be moved.
    compacting: VecDeque<Compacting>,
    /// Since the first drop of this round of tidying.
    started: Option<Instant>,
    /// Jobs handed over to let go of in this round.
    dropped: usize,
}

impl Tidying {
    /// Nothing left to do.
    pub fn is_idle(&self) -> bool {
        self.freeing.is_empty() && self.compacting.is_empty() && self.started.is_none()
    }

    /// Let go of `dropped` (the tables of shards no longer held) and move
    /// the ids of `kept` shards' jobs, over the next steps. A shard still
    /// being moved is not queued twice.
    pub fn start(&mut self, dropped: Vec<FirePlan>, kept: impl IntoIterator<Item = u32>) {
        self.started.get_or_insert_with(Instant::now);
        for table in dropped {
            self.dropped += table.len();
            self.freeing.push(table.into_jobs());
        }
        for shard in kept {
            if let Some(queued) = self.compacting.iter_mut().find(|c| c.shard == shard) {
                // Jobs of this shard may have come in among the dropped
                // ones since it was queued: move them all again.
                queued.ids = None;
            } else {
                self.compacting.push_back(Compacting { shard, ids: None });
            }
        }
    }

    /// Do about `budget` of the work (at least one piece), in order: free
    /// dropped jobs, move kept ones' ids, then give freed memory back.
    /// Nothing when idle.
    ///
    /// Nothing else is kept for a dropped job: a shard's definitions went
    /// when it was lost, and a shard never planned here kept none.
    pub fn step(&mut self, book: &mut Book, budget: Duration) {
        let began = Instant::now();
        let over_budget = || began.elapsed() >= budget;
        while let Some(jobs) = self.freeing.last_mut() {
            let from = jobs.len().saturating_sub(BETWEEN_CLOCK_READS);
            jobs.truncate(from);
            if from == 0 {
                self.freeing.pop();
            }
            if over_budget() {
                return;
            }
        }
        while let Some(compacting) = self.compacting.front_mut() {
            let shard = compacting.shard;
            let ids = compacting.ids.get_or_insert_with(|| {
                // Only ids too long to be kept in the job are allocated.
                book.shard(shard)
                    .filter(|job| job.id.is_heap_allocated())
                    .map(|job| job.id.clone())
                    .collect()
            });
            if ids.is_empty() {
                self.compacting.pop_front();
            } else {
                let from = ids.len().saturating_sub(BETWEEN_CLOCK_READS);
                // A job removed since is skipped; one inserted since is a
                // new allocation already.
                for id in ids.drain(from..) {
                    book.move_id(&id);
                }
            }
            if over_budget() {
                return;
            }
        }
        if let Some(started) = self.started.take() {
            self.freeing.shrink_to_fit();
            jetcron_allocator::give_back_freed_memory();
            info!(
                jobs = std::mem::take(&mut self.dropped),
                held = book.len(),
                took_ms = started.elapsed().as_millis() as u64,
                "dropped jobs let go"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shards::shard_of;
    use chrono::{DateTime, Utc};
    use jetcron_core::job::parse_job;

    /// When the jobs are written and planned: any fixed instant.
    fn at() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).expect("instant")
    }

    /// An id longer than a job keeps in itself: its move shows.
    fn long_id(i: usize) -> String {
        format!("a-job-whose-id-is-longer-than-24-bytes-{i}")
    }

    fn hold(book: &mut Book, id: &str) {
        let json = format!(
            r#"{{"id":"{id}","schedule":"@daily","target":{{"type":"shell","command":"true"}}}}"#
        );
        let job = parse_job(json.as_bytes(), None).expect("valid job");
        book.insert(&job, 1, at());
    }

    /// Step `tidying` until it is idle; how many steps that took.
    fn step_to_the_end(tidying: &mut Tidying, book: &mut Book, budget: Duration) -> usize {
        let mut steps = 0;
        while !tidying.is_idle() {
            tidying.step(book, budget);
            steps += 1;
            assert!(steps < 1_000, "tidying ends");
        }
        steps
    }

    /// The ids of a shard's jobs, and where each is stored.
    fn ids_of(book: &Book, shard: u32) -> Vec<(String, *const u8)> {
        book.shard(shard)
            .map(|job| (job.id.to_string(), job.id.as_ptr()))
            .collect()
    }

    #[test]
    fn dropped_jobs_go_and_kept_ones_move_a_piece_per_step() {
        let mut book = Book::default();
        for i in 0..5_000 {
            hold(&mut book, &long_id(i));
        }
        let kept = shard_of(&long_id(0));
        let kept_before = ids_of(&book, kept);
        let now = at();
        let mut table = book.take_to_plan(kept);
        table.plan_all(now, now, chrono::Duration::seconds(60));
        book.put_planned(kept, table);
        let dropped: Vec<FirePlan> = (0..crate::shards::SHARDS)
            .filter(|s| *s != kept)
            .map(|shard| book.drop_shard(shard))
            .collect();
        let dropped_pieces: usize = dropped
            .iter()
            .map(|table| table.len().div_ceil(BETWEEN_CLOCK_READS))
            .sum();
        let mut tidying = Tidying::default();
        tidying.start(dropped, [kept]);
        assert!(!tidying.is_idle());

        let steps = step_to_the_end(&mut tidying, &mut book, Duration::ZERO);
        // One piece per step: the dropped jobs (a piece holds jobs of one
        // shard), the kept shard's ids, its end, then the memory given back.
        let pieces = dropped_pieces + kept_before.len().div_ceil(BETWEEN_CLOCK_READS);
        assert_eq!(steps, pieces + 2);
        assert_eq!(book.len(), kept_before.len());
        let plan = book.plan(kept).expect("still planned");
        assert_eq!(plan.pending_fires(), kept_before.len(), "its fires kept");
        for (old, was_at) in &kept_before {
            let planned = plan.get(old).expect("kept");
            assert_ne!(planned.job.id.as_ptr(), *was_at, "its id moved");
            assert!(planned.next_fire().is_some(), "still planned");
        }
    }

    /// A shard queued to be moved and then dropped has nothing left to
    /// move; one queued again while being moved is moved again from the
    /// start (its moved ids were allocated in among those of shards
    /// dropped since).
    #[test]
    fn a_queued_shard_dropped_or_queued_again_is_handled() {
        let mut book = Book::default();
        for i in 0..3_000 {
            hold(&mut book, &long_id(i));
        }
        let (a, b) = (shard_of(&long_id(0)), shard_of(&long_id(1)));
        assert_ne!(a, b);
        let mut tidying = Tidying::default();
        tidying.start(Vec::new(), [b, a]);
        // b's ids moved (fewer than a piece), b not done yet.
        tidying.step(&mut book, Duration::ZERO);
        let moved_once = ids_of(&book, b);
        let dropped = book.drop_shard(a);
        tidying.start(vec![dropped], [b]);
        let steps = step_to_the_end(&mut tidying, &mut book, Duration::from_secs(1));
        assert_eq!(steps, 1, "within one budget");
        assert_eq!(book.shard_len(a), 0);
        assert_eq!(book.shard_len(b), moved_once.len());
        for (old, was_at) in &moved_once {
            let new = book.get(old).expect("kept");
            assert_ne!(new.id.as_ptr(), *was_at, "moved again");
        }
    }
}
