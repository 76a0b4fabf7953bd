//! The fire plan: which job fires next, and when. Pure and synchronous.
//!
//! The ticker feeds it definitions as the KV watch delivers them and asks it
//! for due fires; publishing happens outside. A fire is only advanced past once
//! its due event is stored ([`FirePlan::fired`]), so a failed publish is retried
//! rather than lost.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use jetcron_core::job::ValidJob;

/// A job as the plan holds it.
#[derive(Debug, Clone)]
pub struct PlannedJob {
    pub job: ValidJob,
    pub revision: u64,
    /// The next scheduled time, `None` when the schedule is exhausted.
    pub next: Option<DateTime<Utc>>,
}

/// One fire to emit.
#[derive(Debug, Clone)]
pub struct Fire {
    pub job: ValidJob,
    pub revision: u64,
    pub scheduled_at: DateTime<Utc>,
}

/// Every scheduled job and the queue of their next fire times.
#[derive(Debug, Default)]
pub struct FirePlan {
    jobs: HashMap<String, PlannedJob>,
    queue: BTreeSet<(DateTime<Utc>, String)>,
}

impl FirePlan {
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    pub fn get(&self, job_id: &str) -> Option<&PlannedJob> {
        self.jobs.get(job_id)
    }

    /// Add or replace a definition seen at KV `revision`. A revision already
    /// held is ignored (a re-delivered watch entry must not move the schedule);
    /// a new one is scheduled from `now`. Paused jobs are held but not queued.
    pub fn upsert(&mut self, job: ValidJob, revision: u64, now: DateTime<Utc>) {
        let id = job.spec.id.clone();
        if let Some(existing) = self.jobs.get(&id) {
            if existing.revision >= revision {
                return;
            }
        }
        self.remove(&id);
        let next = if job.spec.paused {
            None
        } else {
            job.schedule.next_fire(now, job.timezone)
        };
        if let Some(at) = next {
            self.queue.insert((at, id.clone()));
        }
        self.jobs.insert(
            id,
            PlannedJob {
                job,
                revision,
                next,
            },
        );
    }

    /// Forget a job (deleted, purged, or replaced by an invalid value).
    pub fn remove(&mut self, job_id: &str) -> bool {
        match self.jobs.remove(job_id) {
            Some(planned) => {
                if let Some(at) = planned.next {
                    self.queue.remove(&(at, job_id.to_string()));
                }
                true
            }
            None => false,
        }
    }

    /// The earliest scheduled time in the plan.
    pub fn next_due_at(&self) -> Option<DateTime<Utc>> {
        self.queue.first().map(|(at, _)| *at)
    }

    /// The earliest fire whose time is `<= now`, without removing it.
    pub fn peek_due(&self, now: DateTime<Utc>) -> Option<Fire> {
        let (at, id) = self.queue.first()?;
        if *at > now {
            return None;
        }
        let planned = self.jobs.get(id)?;
        Some(Fire {
            job: planned.job.clone(),
            revision: planned.revision,
            scheduled_at: *at,
        })
    }

    /// Record that the due event of `fire` is stored: move the job to its next
    /// time after the fired one. No-op if the job changed meanwhile.
    pub fn fired(&mut self, fire: &Fire) {
        let id = &fire.job.spec.id;
        let Some(planned) = self.jobs.get_mut(id) else {
            return;
        };
        if planned.revision != fire.revision || planned.next != Some(fire.scheduled_at) {
            return;
        }
        self.queue.remove(&(fire.scheduled_at, id.clone()));
        planned.next = planned
            .job
            .schedule
            .next_fire(fire.scheduled_at, planned.job.timezone);
        if let Some(at) = planned.next {
            self.queue.insert((at, id.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use jetcron_core::job::parse_job;

    fn job(id: &str, schedule: &str) -> ValidJob {
        let json = format!(
            r#"{{"id":"{id}","schedule":"{schedule}","target":{{"type":"shell","command":"true"}}}}"#
        );
        parse_job(json.as_bytes(), None).expect("valid job")
    }

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("instant")
    }

    fn drain(plan: &mut FirePlan, now: DateTime<Utc>) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        while let Some(fire) = plan.peek_due(now) {
            out.push((
                fire.job.spec.id.clone(),
                fire.scheduled_at.timestamp() - 1_800_000_000,
            ));
            plan.fired(&fire);
        }
        out
    }

    #[test]
    fn fires_every_due_time_in_order() {
        let mut plan = FirePlan::default();
        plan.upsert(job("a", "*/2 * * * * *"), 1, t(0));
        plan.upsert(job("b", "*/3 * * * * *"), 2, t(0));
        assert_eq!(plan.next_due_at(), Some(t(2)));
        assert_eq!(
            drain(&mut plan, t(6)),
            [
                ("a".into(), 2),
                ("b".into(), 3),
                ("a".into(), 4),
                ("a".into(), 6),
                ("b".into(), 6)
            ]
        );
    }

    #[test]
    fn a_fire_not_recorded_stays_due() {
        let mut plan = FirePlan::default();
        plan.upsert(job("a", "*/2 * * * * *"), 1, t(0));
        let fire = plan.peek_due(t(2)).expect("due");
        // publish failed: nothing recorded, the same fire is offered again
        let again = plan.peek_due(t(3)).expect("still due");
        assert_eq!(fire.scheduled_at, again.scheduled_at);
    }

    #[test]
    fn redelivered_revision_does_not_move_the_schedule() {
        let mut plan = FirePlan::default();
        plan.upsert(job("a", "*/2 * * * * *"), 5, t(0));
        plan.upsert(job("a", "*/2 * * * * *"), 5, t(3));
        assert_eq!(plan.next_due_at(), Some(t(2)));
        plan.upsert(job("a", "*/10 * * * * *"), 6, t(3));
        assert_eq!(plan.next_due_at(), Some(t(10)));
    }

    #[test]
    fn edits_during_a_publish_win() {
        let mut plan = FirePlan::default();
        plan.upsert(job("a", "*/2 * * * * *"), 1, t(0));
        let fire = plan.peek_due(t(2)).expect("due");
        plan.upsert(job("a", "*/5 * * * * *"), 2, t(2));
        plan.fired(&fire);
        assert_eq!(plan.next_due_at(), Some(t(5)));
    }

    #[test]
    fn removed_and_paused_jobs_do_not_fire() {
        let mut plan = FirePlan::default();
        plan.upsert(job("a", "*/2 * * * * *"), 1, t(0));
        assert!(plan.remove("a"));
        assert!(plan.peek_due(t(10)).is_none());
        let mut paused = job("p", "*/2 * * * * *");
        paused.spec.paused = true;
        plan.upsert(paused, 2, t(0));
        assert_eq!(plan.len(), 1);
        assert!(plan.peek_due(t(10)).is_none());
    }

    #[test]
    fn one_shot_fires_once() {
        let mut plan = FirePlan::default();
        let at = jetcron_core::time_format::rfc3339_millis(t(4));
        plan.upsert(job("once", &format!("@at {at}")), 1, t(0));
        assert_eq!(drain(&mut plan, t(100)), [("once".into(), 4)]);
        assert!(plan.next_due_at().is_none());
    }
}
