//! What the fire plan promises, for any jobs and any order of stores and
//! failures, checked against the schedule's own enumeration
//! ([`jetcron_core::schedule::Schedule::next_fire`]) and a job's own
//! timing ([`jetcron_core::schedule::fire_times::Timing`]):
//! - every scheduled time is stored once, whatever fails on the way;
//! - a fire comes due at the job's own publish instant (its scheduled time
//!   plus its jitter), not before, in publish order, each job's scheduled
//!   times rising, none skipped (a job's fires go one after another: with
//!   a jitter longer than the period, one jittered less than the fire
//!   before it waits for that one);
//! - every scheduled time at or before the watermark is stored, and the
//!   watermark never passes the clock;
//! - a shard taken over fires nothing its last owner stored, every late
//!   time within the late threshold (the misfire policy beyond it), then
//!   every regular time;
//! - an edit keeps the old schedule's times up to it and fires the new
//!   one's after it.

use std::collections::HashSet;

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

/// A schedule line every job of a property run may have: every k
/// seconds by cron, or by interval.
fn any_line() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u32..=12).prop_map(|k| format!("*/{k} * * * * *")),
        (1u32..=9).prop_map(|k| format!("@every {k}s")),
    ]
}

/// Every scheduled time of `job` in (`from`, `to`], by its schedule.
fn scheduled_between(job: &ValidJob, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<i64> {
    let mut out = Vec::new();
    let mut after = from;
    while let Some(next) = job.schedule.next_fire(after, job.timezone) {
        if next > to {
            break;
        }
        out.push(secs(next));
        after = next;
    }
    out
}

/// `job_with`'s extra fields for a jitter of `ms` milliseconds.
fn jitter_ms(ms: u64) -> String {
    format!(r#","jitter":"{ms}ms""#)
}

/// Every scheduled time of `job` in (`from`, `to`], as instants.
fn scheduled_in(job: &ValidJob, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    std::iter::successors(job.schedule.next_fire(from, job.timezone), |after| {
        job.schedule.next_fire(*after, job.timezone)
    })
    .take_while(|at| *at <= to)
    .collect()
}

/// A jitter in milliseconds: none for some jobs (their fires are
/// published at their scheduled time), up to a few periods for others.
fn any_jitter_ms() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 1u64..4_000]
}

fn any_policy() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("skip"), Just("fire_once"), Just("fire_all")]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the batch sizes and whichever taken fires fail to be
    /// stored and are offered again, every scheduled time of every job
    /// is stored once, and the watermark reaches the end.
    #[test]
    fn every_scheduled_time_is_stored_once_whatever_fails_on_the_way(
        lines in proptest::collection::vec(any_line(), 1..12),
        batches in proptest::collection::vec(1usize..8, 1..16),
        failures in proptest::collection::vec(any::<bool>(), 1..32),
        end in 5i64..40,
    ) {
        let mut plan = FirePlan::default();
        let jobs: Vec<ValidJob> = lines
            .iter()
            .enumerate()
            .map(|(i, line)| job(&format!("j{i}"), line))
            .collect();
        for (i, job) in jobs.iter().enumerate() {
            upsert(&mut plan, job.clone(), i as u64 + 1, None, t(0));
        }
        let mut stored: Vec<(String, i64)> = Vec::new();
        let mut round = 0usize;
        // One second at a time, as the ticker's clock moves.
        for now in 1..=end {
            // A few batches a second; a fire not stored is offered again.
            for _ in 0..20 {
                let limit = batches[round % batches.len()];
                let taken = plan.take_due(t(now), limit);
                if taken.is_empty() {
                    break;
                }
                for fire in &taken {
                    round += 1;
                    if failures[round % failures.len()] {
                        plan.unfired(fire);
                    } else {
                        plan.fired(fire);
                        stored.push((fire.job.id.to_string(), secs(fire.scheduled_at)));
                    }
                }
            }
            // What is still due is stored on the second's last try.
            for fire in plan.take_due(t(now), usize::MAX) {
                plan.fired(&fire);
                stored.push((fire.job.id.to_string(), secs(fire.scheduled_at)));
            }
            prop_assert_eq!(plan.watermark(t(now)), t(now));
        }
        let mut expected: Vec<(String, i64)> = jobs
            .iter()
            .flat_map(|job| {
                scheduled_between(job, t(0), t(end))
                    .into_iter()
                    .map(|s| (job.spec.id.to_string(), s))
            })
            .collect();
        stored.sort();
        expected.sort();
        prop_assert_eq!(stored, expected);
    }

    /// With every due event stored, each fire is published at its job's
    /// own publish instant, never before it, in publish order, each job's
    /// in scheduled order, and no scheduled time is skipped.
    #[test]
    fn fires_come_due_at_their_publish_instant_in_order_and_none_is_skipped(
        jobs in vec((any_line(), any_jitter_ms()), 1..8),
        step_ms in 100i64..1_500,
        end in 5i64..30,
    ) {
        let jobs: Vec<ValidJob> = jobs
            .iter()
            .enumerate()
            .map(|(i, (line, jitter))| job_with(&format!("j{i}"), line, &jitter_ms(*jitter)))
            .collect();
        let mut plan = FirePlan::default();
        for job in &jobs {
            upsert(&mut plan, job.clone(), 1, None, t(0));
        }
        let mut taken: Vec<Fire> = Vec::new();
        let mut now = t(0);
        while now < t(end) {
            now = (now + chrono::Duration::milliseconds(step_ms)).min(t(end));
            loop {
                let batch = plan.take_due(now, 3);
                if batch.is_empty() {
                    break;
                }
                prop_assert!(batch.windows(2).all(|w| w[0].fire_at <= w[1].fire_at));
                for fire in &batch {
                    prop_assert!(fire.fire_at <= now, "{:?} taken at {}", fire, now);
                    plan.fired(fire);
                }
                taken.extend(batch);
            }
        }
        for job in &jobs {
            let id = job.spec.id.as_str();
            let fires: Vec<&Fire> = taken.iter().filter(|f| &*f.job.id == id).collect();
            let scheduled: Vec<DateTime<Utc>> = fires.iter().map(|f| f.scheduled_at).collect();
            prop_assert!(scheduled.windows(2).all(|w| w[0] < w[1]), "{}: {:?}", id, scheduled);
            for fire in &fires {
                prop_assert_eq!(fire.fire_at, job.fire_instant(fire.scheduled_at));
                prop_assert!(fire.fire_at >= fire.scheduled_at);
            }
            // A job's next fire is planned once the one before is stored:
            // with a jitter longer than its period, a fire jittered less
            // than the one before waits for it (and goes late).
            let expected: Vec<DateTime<Utc>> = scheduled_in(job, t(0), t(end))
                .into_iter()
                .take_while(|at| job.fire_instant(*at) <= t(end))
                .collect();
            prop_assert_eq!(scheduled, expected, "{}", id);
        }
    }

    /// Whatever is stored, fails or is still in flight when it is asked,
    /// the watermark is at most the clock and every scheduled time at or
    /// before it is stored (the checkpoint a new owner resumes from).
    #[test]
    fn every_time_at_or_before_the_watermark_is_stored(
        jobs in vec((any_line(), any_jitter_ms()), 1..8),
        failures in vec(any::<bool>(), 1..32),
        step_ms in 200i64..1_500,
        end in 5i64..30,
    ) {
        let jobs: Vec<ValidJob> = jobs
            .iter()
            .enumerate()
            .map(|(i, (line, jitter))| job_with(&format!("j{i}"), line, &jitter_ms(*jitter)))
            .collect();
        let mut plan = FirePlan::default();
        for job in &jobs {
            upsert(&mut plan, job.clone(), 1, None, t(0));
        }
        let mut stored: HashSet<(String, DateTime<Utc>)> = HashSet::new();
        let mut round = 0usize;
        let mut now = t(0);
        while now < t(end) {
            now = (now + chrono::Duration::milliseconds(step_ms)).min(t(end));
            for _ in 0..4 {
                let taken = plan.take_due(now, 3);
                // Asked while the batch is out: in flight is not stored.
                check_watermark(&plan, &jobs, &stored, now)?;
                for fire in &taken {
                    round += 1;
                    if failures[round % failures.len()] {
                        plan.unfired(fire);
                    } else {
                        plan.fired(fire);
                        let first = stored.insert((fire.job.id.to_string(), fire.scheduled_at));
                        prop_assert!(first, "{:?} stored twice", fire);
                    }
                }
                check_watermark(&plan, &jobs, &stored, now)?;
            }
        }
    }

    /// A shard taken over (stored up to `done`, its job defined at
    /// `defined`, now `now`) fires nothing at or before either, every time
    /// in (both, now] when that gap is within the late threshold and what
    /// the misfire policy picks beyond it, then every regular time.
    #[test]
    fn a_shard_taken_over_fires_what_its_last_owner_did_not_store_as_the_rules_say(
        line in any_line(),
        policy in any_policy(),
        catchup_window_s in 1i64..120,
        done in 0i64..300,
        now_after_done in -20i64..300,
        defined_before_now in 0i64..400,
        // Often right at the gap since the watermark, where the rule turns.
        threshold_from_gap in prop_oneof![-2i64..=2, -300i64..300],
    ) {
        let extra = format!(r#","misfire":"{policy}","catchup_window":"{catchup_window_s}s""#);
        let job = job_with("a", &line, &extra);
        let now = done + now_after_done;
        let defined = now - defined_before_now;
        let from = done.max(defined);
        let threshold_s = (now - from + threshold_from_gap).max(0);
        let mut plan = FirePlan::default();
        let threshold = chrono::Duration::seconds(threshold_s);
        plan.recover(held(&job, 1, t(defined)), t(done), t(now), threshold);
        let horizon = now.max(done) + 30;
        let fired: Vec<i64> = (now..=horizon)
            .flat_map(|s| drain(&mut plan, t(s)))
            .map(|(_, at)| at)
            .collect();

        let late = if now - from <= threshold_s {
            scheduled_in(&job, t(from), t(now))
        } else {
            job.timing().missed(t(from), t(now))
        };
        let regular = scheduled_in(&job, t(now.max(done)), t(horizon));
        let expected: Vec<i64> = late.into_iter().chain(regular).map(secs).collect();
        prop_assert!(fired.iter().all(|at| *at > from), "{:?} after {}", fired, from);
        prop_assert_eq!(fired, expected);
    }

    /// A job edited at any instant, the plan drained every second before
    /// and after: the old schedule's times up to the edit fire (one due at
    /// the edit included), then the new schedule's, each once.
    #[test]
    fn an_edit_keeps_the_old_times_up_to_it_and_fires_the_new_ones_after(
        old_line in any_line(),
        new_line in any_line(),
        edit_s in 1i64..20,
        // Half the edits at a whole second, where a fire may be due.
        edit_ms in prop_oneof![Just(0i64), 1i64..1_000],
        end in 21i64..40,
    ) {
        let edit_at = t(edit_s) + chrono::Duration::milliseconds(edit_ms);
        let mut plan = FirePlan::default();
        upsert(&mut plan, job("a", &old_line), 1, None, t(0));
        let mut edited = false;
        let mut fired = Vec::new();
        for s in 1..=end {
            if !edited && t(s) >= edit_at {
                upsert(&mut plan, job("a", &new_line), 2, None, edit_at);
                edited = true;
            }
            fired.extend(drain(&mut plan, t(s)).into_iter().map(|(_, at)| at));
        }
        let expected: Vec<i64> = scheduled_in(&job("a", &old_line), t(0), edit_at)
            .into_iter()
            .chain(scheduled_in(&job("a", &new_line), edit_at, t(end)))
            .map(secs)
            .collect();
        prop_assert_eq!(fired, expected);
    }
}

/// The watermark at `now` is at most `now`, and every scheduled time of
/// `jobs` at or before it is in `stored`.
fn check_watermark(
    plan: &FirePlan,
    jobs: &[ValidJob],
    stored: &HashSet<(String, DateTime<Utc>)>,
    now: DateTime<Utc>,
) -> Result<(), TestCaseError> {
    let watermark = plan.watermark(now);
    prop_assert!(watermark <= now, "watermark {} past {}", watermark, now);
    for job in jobs {
        for at in scheduled_in(job, t(0), watermark) {
            let key = (job.spec.id.to_string(), at);
            prop_assert!(
                stored.contains(&key),
                "{:?} not stored, watermark {}",
                key,
                watermark
            );
        }
    }
    Ok(())
}
