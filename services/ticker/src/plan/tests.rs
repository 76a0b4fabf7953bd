use super::*;
use chrono::TimeZone;
use jetcron_core::job::{parse_job, ValidJob};

/// The held form of `job` at `revision`, written at `defined_at`.
fn held(job: &ValidJob, revision: u64, defined_at: DateTime<Utc>) -> HeldJob {
    HeldJob::of(job, revision, defined_at)
}

fn upsert(
    plan: &mut FirePlan,
    job: ValidJob,
    revision: u64,
    written_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) {
    plan.upsert(
        held(&job, revision, written_at.unwrap_or(now)),
        written_at,
        now,
    );
}

fn job_with(id: &str, schedule: &str, extra: &str) -> ValidJob {
    let json = format!(
        r#"{{"id":"{id}","schedule":"{schedule}","target":{{"type":"shell","command":"true"}}{extra}}}"#
    );
    parse_job(json.as_bytes(), None).expect("valid job")
}

fn job(id: &str, schedule: &str) -> ValidJob {
    job_with(id, schedule, "")
}

fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + s, 0)
        .single()
        .expect("instant")
}

fn secs(at: DateTime<Utc>) -> i64 {
    at.timestamp() - 1_800_000_000
}

fn drain(plan: &mut FirePlan, now: DateTime<Utc>) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    loop {
        let due = plan.due(now, 1);
        let Some(fire) = due.first() else { break };
        out.push((fire.job.id.to_string(), secs(fire.scheduled_at)));
        plan.fired(fire);
    }
    out
}

#[test]
fn fires_every_due_time_in_order() {
    let mut plan = FirePlan::default();
    upsert(&mut plan, job("a", "*/2 * * * * *"), 1, None, t(0));
    upsert(&mut plan, job("b", "*/3 * * * * *"), 2, None, t(0));
    assert_eq!(plan.next_fire_at(), Some(t(2)));
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
fn a_fire_not_recorded_stays_due_and_holds_the_watermark() {
    let mut plan = FirePlan::default();
    upsert(&mut plan, job("a", "*/2 * * * * *"), 1, None, t(0));
    assert_eq!(plan.watermark(t(1)), t(1));
    let fire = plan.due(t(2), 10).remove(0);
    // publish failed: nothing recorded, the same fire is offered again
    let again = plan.due(t(3), 10).remove(0);
    assert_eq!(fire.scheduled_at, again.scheduled_at);
    assert!(plan.watermark(t(3)) < t(2));
    plan.fired(&fire);
    assert_eq!(plan.watermark(t(3)), t(3));
}

#[test]
fn redelivered_revision_does_not_move_the_schedule() {
    let mut plan = FirePlan::default();
    upsert(&mut plan, job("a", "*/2 * * * * *"), 5, None, t(0));
    upsert(&mut plan, job("a", "*/2 * * * * *"), 5, None, t(3));
    assert_eq!(plan.next_fire_at(), Some(t(2)));
    upsert(&mut plan, job("a", "*/10 * * * * *"), 6, None, t(3));
    // The fire due at 2 (not yet published) still happens, then the new schedule.
    assert_eq!(drain(&mut plan, t(3)), [("a".into(), 2)]);
    assert_eq!(plan.next_fire_at(), Some(t(10)));
}

#[test]
fn edits_during_a_publish_keep_the_due_fire_and_plan_the_new_schedule() {
    let mut plan = FirePlan::default();
    upsert(&mut plan, job("a", "*/2 * * * * *"), 1, None, t(0));
    let fire = plan.due(t(2), 1).remove(0);
    upsert(&mut plan, job("a", "*/5 * * * * *"), 2, None, t(2));
    plan.fired(&fire);
    assert_eq!(plan.next_fire_at(), Some(t(5)));
}

#[test]
fn an_edit_at_the_fire_time_does_not_drop_the_fire() {
    let mut plan = FirePlan::default();
    upsert(&mut plan, job("a", "*/2 * * * * *"), 1, None, t(0));
    // Due at 2, not yet published (a burst is draining), edited at 2.02.
    let edited_at = t(2) + chrono::Duration::milliseconds(20);
    upsert(
        &mut plan,
        job_with("a", "*/2 * * * * *", r#","description":"x""#),
        2,
        None,
        edited_at,
    );
    assert_eq!(drain(&mut plan, t(4)), [("a".into(), 2), ("a".into(), 4)]);
}

#[test]
fn a_revision_seen_late_fires_the_times_since_it_was_written() {
    let mut plan = FirePlan::default();
    // Written at 10, delivered by the watch at 12.5: 11 and 12 fire late.
    upsert(
        &mut plan,
        job("a", "* * * * * *"),
        1,
        Some(t(10)),
        t(12) + chrono::Duration::milliseconds(500),
    );
    assert_eq!(
        drain(&mut plan, t(13)),
        [("a".into(), 11), ("a".into(), 12), ("a".into(), 13)]
    );
    // A write stamped after our clock (skew) adds nothing.
    let mut plan = FirePlan::default();
    upsert(&mut plan, job("b", "* * * * * *"), 1, Some(t(20)), t(12));
    assert_eq!(drain(&mut plan, t(13)), [("b".into(), 13)]);
}

#[test]
fn removed_and_paused_jobs_do_not_fire() {
    let mut plan = FirePlan::default();
    upsert(&mut plan, job("a", "*/2 * * * * *"), 1, None, t(0));
    assert!(plan.remove("a"));
    assert!(plan.due(t(10), 10).is_empty());
    upsert(
        &mut plan,
        job_with("p", "*/2 * * * * *", r#","paused":true"#),
        2,
        None,
        t(0),
    );
    assert_eq!(plan.len(), 1);
    assert!(plan.due(t(10), 10).is_empty());
}

#[test]
fn resuming_applies_the_misfire_policy() {
    for (policy, expected) in [
        ("skip", vec![("a".to_string(), 100)]),
        ("fire_once", vec![("a".into(), 99), ("a".into(), 100)]),
        (
            "fire_all",
            (80..=100).map(|s| ("a".to_string(), s)).collect::<Vec<_>>(),
        ),
    ] {
        let mut plan = FirePlan::default();
        let extra = format!(r#","misfire":"{policy}","catchup_window":"20s""#);
        upsert(
            &mut plan,
            job_with(
                "a",
                "* * * * * *",
                &format!(r#",\"paused\":true{extra}"#).replace('\\', ""),
            ),
            1,
            None,
            t(0),
        );
        upsert(
            &mut plan,
            job_with("a", "* * * * * *", &extra),
            2,
            None,
            t(99) + chrono::Duration::milliseconds(500),
        );
        assert_eq!(drain(&mut plan, t(100)), expected, "policy {policy}");
    }
}

#[test]
fn recovery_fires_late_times_after_a_failover_and_applies_policy_after_an_outage() {
    let threshold = chrono::Duration::seconds(60);
    // Failover: done 10s ago → every time fires, even with misfire=skip.
    let mut plan = FirePlan::default();
    plan.recover(
        held(
            &job_with("a", "*/5 * * * * *", r#","misfire":"skip""#),
            1,
            t(-1000),
        ),
        t(0),
        t(10),
        threshold,
    );
    assert_eq!(drain(&mut plan, t(10)), [("a".into(), 5), ("a".into(), 10)]);
    // Outage: done 1000s ago → the policy decides.
    let mut plan = FirePlan::default();
    plan.recover(
        held(
            &job_with("a", "*/5 * * * * *", r#","misfire":"skip""#),
            1,
            t(-1000),
        ),
        t(0),
        t(1000),
        threshold,
    );
    assert!(drain(&mut plan, t(1000)).is_empty());
    assert_eq!(plan.next_fire_at(), Some(t(1005)));
    let mut plan = FirePlan::default();
    plan.recover(
        held(&job("a", "*/5 * * * * *"), 1, t(-1000)),
        t(0),
        t(1001),
        threshold,
    );
    assert_eq!(drain(&mut plan, t(1001)), [("a".into(), 1000)]);
    // A job defined during the outage catches up only from its definition.
    let mut plan = FirePlan::default();
    plan.recover(
        held(
            &job_with("a", "*/5 * * * * *", r#","misfire":"fire_all""#),
            1,
            t(990),
        ),
        t(0),
        t(1000),
        threshold,
    );
    assert_eq!(
        drain(&mut plan, t(1000)),
        [("a".into(), 995), ("a".into(), 1000)]
    );
}

#[test]
fn jitter_delays_publish_but_not_the_scheduled_time() {
    let mut plan = FirePlan::default();
    upsert(
        &mut plan,
        job_with("j", "0 0 * * * *", r#","jitter":"30m""#),
        1,
        None,
        t(0),
    );
    let planned = plan
        .get("j")
        .expect("planned")
        .last_planned()
        .expect("next");
    let fire_at = plan.next_fire_at().expect("queued");
    assert!(fire_at >= planned && fire_at < planned + chrono::Duration::minutes(30));
    // The watermark waits for the scheduled time, not the jittered one.
    let between = planned + chrono::Duration::milliseconds(1);
    if fire_at > between {
        assert!(plan.watermark(between) < planned);
        assert!(plan.due(between, 1).is_empty());
    }
}

#[test]
fn taken_fires_are_not_offered_twice_and_failures_come_back() {
    let mut plan = FirePlan::default();
    upsert(&mut plan, job("a", "* * * * * *"), 1, None, t(0));
    upsert(&mut plan, job("b", "* * * * * *"), 1, None, t(0));
    let first = plan.take_due(t(1), 10);
    assert_eq!(first.len(), 2);
    assert!(
        plan.take_due(t(1), 10).is_empty(),
        "in-flight fires are not offered again"
    );
    assert!(
        plan.watermark(t(1)) < t(1),
        "in-flight fires hold the watermark"
    );
    plan.fired(&first[0]);
    plan.unfired(&first[1]);
    let again = plan.take_due(t(1), 10);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].job.id, first[1].job.id);
    plan.fired(&again[0]);
    assert_eq!(plan.watermark(t(1)), t(1));
}

#[test]
fn one_shot_fires_once() {
    let mut plan = FirePlan::default();
    let at = jetcron_core::time_format::rfc3339_millis(t(4));
    upsert(&mut plan, job("once", &format!("@at {at}")), 1, None, t(0));
    assert_eq!(drain(&mut plan, t(100)), [("once".into(), 4)]);
    assert!(plan.next_fire_at().is_none());
}

#[test]
fn recovery_after_an_owner_that_stored_ahead_resumes_past_its_watermark() {
    // The previous owner stored fires up to 5 with a lookahead; it is 3 now.
    let mut plan = FirePlan::default();
    plan.recover(
        held(&job("a", "* * * * * *"), 1, t(-1000)),
        t(5),
        t(3),
        chrono::Duration::seconds(60),
    );
    assert!(
        plan.due(t(5), 10).is_empty(),
        "fires up to 5 are stored already"
    );
    assert_eq!(drain(&mut plan, t(7)), [("a".into(), 6), ("a".into(), 7)]);
}

/// A removed job's slot goes to the next job added; the removed job's fire
/// coming back from publishing must touch neither that job's fires nor the
/// watermark.
#[test]
fn a_job_in_a_removed_jobs_slot_keeps_its_own_fires() {
    let mut plan = FirePlan::default();
    upsert(&mut plan, job("a", "* * * * * *"), 1, None, t(0));
    let taken = plan.take_due(t(1), 10);
    assert_eq!(taken.len(), 1);
    assert!(plan.remove("a"));
    upsert(&mut plan, job("b", "* * * * * *"), 1, None, t(0));
    assert_eq!(plan.slots.len(), 1, "b took a's slot");
    plan.fired(&taken[0]);
    plan.unfired(&taken[0]);
    assert_eq!(plan.pending_fires(), 1);
    assert!(plan.watermark(t(1)) < t(1), "b's fire at 1 is pending");
    assert_eq!(drain(&mut plan, t(2)), [("b".into(), 1), ("b".into(), 2)]);
    assert_eq!(plan.watermark(t(2)), t(2));
}

/// The watermark the plan keeps, against one computed from every pending
/// fire of every job, through takes, stores, failures and edits of jobs
/// with and without jitter.
#[test]
fn the_watermark_is_the_oldest_pending_scheduled_time_with_and_without_jitter() {
    fn by_hand(plan: &FirePlan, now: DateTime<Utc>) -> DateTime<Utc> {
        let oldest = plan
            .slots
            .iter()
            .flatten()
            .flat_map(|planned| planned.fires.iter().map(Millis::at))
            .min();
        match oldest {
            Some(oldest) if oldest <= now => oldest - chrono::Duration::milliseconds(1),
            _ => now,
        }
    }
    let mut plan = FirePlan::default();
    let mut rng = fastrand::Rng::with_seed(16);
    for i in 0..40 {
        let schedule = ["* * * * * *", "*/7 * * * * *", "*/3 * * * * *"][i % 3];
        let extra = if i % 4 == 0 { r#","jitter":"5s""# } else { "" };
        upsert(
            &mut plan,
            job_with(&format!("j{i}"), schedule, extra),
            1,
            None,
            t(0),
        );
    }
    let mut revision = 1;
    let mut flying = Vec::new();
    let mut jitter_held = 0;
    for step in 1..=120 {
        let now = t(step / 2) + chrono::Duration::milliseconds(rng.i64(0..1000));
        // Fires left in flight a step ago are stored now.
        for fire in flying.drain(..) {
            plan.fired(&fire);
        }
        let taken = plan.take_due(now, rng.usize(1..200));
        for fire in taken {
            match rng.u8(0..4) {
                0 => plan.unfired(&fire),
                1 => flying.push(fire),
                _ => plan.fired(&fire),
            }
        }
        if step % 10 == 0 {
            revision += 1;
            let i = rng.usize(0..40);
            let extra = if rng.bool() { r#","jitter":"3s""# } else { "" };
            upsert(
                &mut plan,
                job_with(&format!("j{i}"), "*/2 * * * * *", extra),
                revision,
                None,
                now,
            );
        }
        let unjittered_oldest = [plan.queue.first(), plan.in_flight.first()]
            .into_iter()
            .flatten()
            .map(|key| key.fire_at)
            .min();
        if plan.jittered.first().map(|(s, _)| *s) < unjittered_oldest {
            jitter_held += 1;
        }
        assert_eq!(plan.watermark(now), by_hand(&plan, now), "step {step}");
    }
    assert!(
        jitter_held > 10,
        "a jittered fire held the watermark {jitter_held} times"
    );
}

/// A million jobs hold a planned job (the held job in it) and a queue key
/// each: their sizes are what `e2e-bench memory` measured them at
/// (docs/benchmarks.md).
#[test]
fn a_planned_job_and_a_queue_key_stay_small() {
    assert_eq!(std::mem::size_of::<Option<PlannedJob>>(), 104);
    assert_eq!(std::mem::size_of::<FireKey>(), 16);
}

/// The queue is packed again as keys come and go (`FirePlan::queue_key`):
/// through many packs, with fires taken, stored, failed and offered again,
/// every job still fires once at each of its scheduled times, in order.
#[test]
fn a_queue_packed_again_and_again_fires_every_time_once_in_order() {
    let jobs = 3 * PACK_AT_LEAST;
    let mut plan = FirePlan::default();
    for i in 0..jobs {
        let schedule = if i % 2 == 0 {
            "* * * * * *"
        } else {
            "*/2 * * * * *"
        };
        plan.hold(held(&job(&format!("j{i:05}"), schedule), 1, t(0)));
    }
    plan.plan_all(t(0), t(0), chrono::Duration::seconds(60));
    let mut fired: Vec<(String, i64)> = Vec::new();
    let mut failed_once = std::collections::HashSet::new();
    for second in 1..=6 {
        loop {
            let taken = plan.take_due(t(second), 500);
            if taken.is_empty() {
                break;
            }
            for fire in &taken {
                let key = (fire.job.id.to_string(), secs(fire.scheduled_at));
                // One fire in seven fails its first publish and is offered again.
                if fired.len().is_multiple_of(7) && failed_once.insert(key.clone()) {
                    plan.unfired(fire);
                } else {
                    plan.fired(fire);
                    fired.push(key);
                }
            }
        }
    }
    // Each fire stored put its job's next one in the queue, and each one
    // offered again went back: it was packed again every `PACK_AT_LEAST`
    // keys put (a quarter of a queue this size is less).
    assert!(fired.len() > 4 * PACK_AT_LEAST, "{}", fired.len());
    assert!(plan.packs >= 4, "packed again {} times", plan.packs);
    let mut expected: Vec<(String, i64)> = (0..jobs)
        .flat_map(|i| {
            let step = if i % 2 == 0 { 1 } else { 2 };
            (1..=6)
                .filter(move |s| s % step == 0)
                .map(move |s| (format!("j{i:05}"), s))
        })
        .collect();
    let mut seen = fired.clone();
    seen.sort();
    expected.sort();
    assert_eq!(seen, expected, "every scheduled time once");
    let order: Vec<i64> = fired.iter().map(|(_, s)| *s).collect();
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "taken in scheduled order"
    );
    assert_eq!(plan.watermark(t(6)), t(6));
}

mod properties;
