//! Many teams on one set of executors: one team's burst does not starve
//! another's, and a team's `max_concurrent_runs` holds over every executor.
//!
//! - Team `bulk` fires 30 jobs at one instant on a target that takes 3 s,
//!   against an executor with 16 call slots; team `light` has a job every
//!   second. With the default fair slots every `light` call of the burst
//!   goes out on time (its fires find the slots the burst leaves free);
//!   with `--slot-sharing fifo` they wait for the burst's calls to end
//!   (the starvation the fair slots remove, measured at scale in
//!   `e2e-bench fair-share`, docs/benchmarks.md).
//! - Team `lim` has `max_concurrent_runs: 2` in its policy and six jobs
//!   firing at one instant over two executors: never more than two of its
//!   calls at once, every fire called once, none skipped; team `free`,
//!   firing beside it without a limit, runs all at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Timelike as _, Utc};
use futures::StreamExt as _;
use jetcron_executor::fair_slots::Sharing;
use jetcron_testkit::reqwest::Method;
use jetcron_testkit::{test_executor_config, wait_until, Stack, StackOptions, API_TOKEN};

/// What a target saw: each call's job, run, scheduled time and arrival,
/// and the most calls it had under way at once, per namespace.
#[derive(Default)]
struct Seen {
    calls: Vec<Call>,
    now: HashMap<String, usize>,
    most: HashMap<String, usize>,
}

struct Call {
    job: String,
    run: String,
    scheduled: DateTime<Utc>,
    arrived: DateTime<Utc>,
}

/// Answer requests to `subject` (wildcards allowed) after `takes`,
/// recording them.
async fn serve(stack: &Stack, subject: &str, takes: Duration, seen: Arc<Mutex<Seen>>) {
    let mut requests = stack
        .client
        .subscribe(subject.to_string())
        .await
        .expect("subscribe");
    let client = stack.client.clone();
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let arrived = Utc::now();
            let header = |name: &str| {
                request
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            };
            let job = header("Jetcron-Job-Id");
            let namespace = jetcron_core::job::name::namespace_of(&job).to_string();
            let scheduled = DateTime::parse_from_rfc3339(&header("Jetcron-Scheduled-At"))
                .expect("scheduled at")
                .with_timezone(&Utc);
            {
                let mut seen = seen.lock().expect("lock");
                let now = seen.now.entry(namespace.clone()).or_default();
                *now += 1;
                let now = *now;
                let most = seen.most.entry(namespace.clone()).or_default();
                *most = (*most).max(now);
                seen.calls.push(Call {
                    job,
                    run: header("Jetcron-Run-Id"),
                    scheduled,
                    arrived,
                });
            }
            let (client, seen) = (client.clone(), seen.clone());
            tokio::spawn(async move {
                tokio::time::sleep(takes).await;
                *seen
                    .lock()
                    .expect("lock")
                    .now
                    .get_mut(&namespace)
                    .expect("test value") -= 1;
                if let Some(reply) = request.reply {
                    let _ = client.publish(reply, "ok".into()).await;
                }
            });
        }
    });
}

fn job(id: &str, schedule: &str, subject: &str) -> String {
    format!(
        r#"{{"id":"{id}","schedule":"{schedule}","target":{{"type":"nats","subject":"{subject}"}}}}"#
    )
}

/// A whole second at least `ahead` from now, as `@at` takes it.
fn instant_after(ahead: Duration) -> DateTime<Utc> {
    let at = Utc::now()
        + chrono::Duration::from_std(ahead).expect("test value")
        + chrono::Duration::seconds(1);
    at.with_nanosecond(0).expect("test value")
}

/// The calls of `job_prefix` jobs as (job, run) pairs, and whether any
/// run was called twice.
fn runs_called(seen: &Seen, job_prefix: &str) -> (usize, usize) {
    let mut runs: Vec<&str> = seen
        .calls
        .iter()
        .filter(|c| c.job.starts_with(job_prefix))
        .map(|c| c.run.as_str())
        .collect();
    let calls = runs.len();
    runs.sort_unstable();
    runs.dedup();
    (calls, runs.len())
}

/// `light`'s call lags (ms) for the fires scheduled from `from` to `to`.
fn light_lags(seen: &Seen, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<i64> {
    seen.calls
        .iter()
        .filter(|c| c.job == "light.tick" && c.scheduled >= from && c.scheduled <= to)
        .map(|c| (c.arrived - c.scheduled).num_milliseconds())
        .collect()
}

/// Team `bulk`'s 30 fires of 3 s at one instant beside team `light`'s
/// every-second job, on one executor with 16 call slots shared as
/// `sharing` says; `light`'s lags over the burst, and the burst's calls
/// and distinct runs.
async fn light_beside_a_burst(sharing: Sharing) -> (Vec<i64>, (usize, usize)) {
    let mut stack = Stack::start(StackOptions {
        executor: false,
        lookahead: Duration::from_millis(1500),
        ..StackOptions::default()
    })
    .await;
    let mut config = test_executor_config("fair-executor", false);
    config.max_in_flight = 16;
    config.slot_sharing = sharing;
    config.ack_wait = Duration::from_secs(5);
    stack.spawn_executor(config).await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    serve(
        &stack,
        "svc.fair.bulk",
        Duration::from_secs(3),
        seen.clone(),
    )
    .await;
    serve(&stack, "svc.fair.light", Duration::ZERO, seen.clone()).await;
    stack
        .put_job(&job("light.tick", "* * * * * *", "svc.fair.light"))
        .await;
    let burst = instant_after(Duration::from_secs(5));
    let at = format!(
        "@at {}",
        burst.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    for i in 0..30 {
        stack
            .kv_put(
                &format!("bulk.j{i:02}"),
                job(&format!("bulk.j{i:02}"), &at, "svc.fair.bulk").as_bytes(),
            )
            .await;
    }
    let over = burst + chrono::Duration::seconds(7);
    wait_until("the burst and its calls", Duration::from_secs(40), || {
        let seen = seen.clone();
        async move {
            let seen = seen.lock().expect("lock");
            let light_after = seen
                .calls
                .iter()
                .any(|c| c.job == "light.tick" && c.scheduled >= over);
            let (bulk, _) = runs_called(&seen, "bulk.");
            (light_after && bulk >= 30).then_some(())
        }
    })
    .await;
    // Calls still coming in would show as doubles: wait for the retries a
    // double would come from (an ack wait).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (lags, bulk) = {
        let seen = seen.lock().expect("lock");
        let lags = light_lags(&seen, burst, burst + chrono::Duration::seconds(5));
        (lags, runs_called(&seen, "bulk."))
    };
    stack.stop().await;
    (lags, bulk)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_teams_burst_leaves_another_teams_every_second_job_on_time() {
    let (lags, bulk) = light_beside_a_burst(Sharing::Fair).await;
    println!("fair: light lags {lags:?} ms");
    assert_eq!(bulk, (30, 30), "every fire of the burst called once");
    assert!(
        lags.len() >= 5,
        "light fired every second of the burst: {lags:?}"
    );
    assert!(
        lags.iter().all(|lag| (0..500).contains(lag)),
        "light's calls during the burst went out on time: {lags:?} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn first_come_first_served_slots_make_the_other_team_wait_for_the_burst() {
    let (lags, bulk) = light_beside_a_burst(Sharing::Fifo).await;
    println!("fifo: light lags {lags:?} ms");
    assert_eq!(bulk, (30, 30), "every fire of the burst called once");
    assert!(
        lags.iter().any(|lag| *lag >= 1000),
        "with every slot held by the burst, light waited: {lags:?} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_teams_max_concurrent_runs_holds_over_every_executor() {
    let mut stack = Stack::start(StackOptions::default()).await;
    stack
        .spawn_executor(test_executor_config("second-executor", false))
        .await;
    let (status, body) = stack
        .send(
            Method::PUT,
            "/v1/namespaces/lim/policy",
            r#"{"max_concurrent_runs":2}"#,
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = stack
        .send(
            Method::PUT,
            "/v1/namespaces/lim/policy",
            r#"{"max_concurrent_runs":0}"#,
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["problems"][0]["field"], "max_concurrent_runs");
    let seen = Arc::new(Mutex::new(Seen::default()));
    serve(&stack, "svc.lim.>", Duration::from_secs(1), seen.clone()).await;
    let burst = instant_after(Duration::from_secs(3));
    let at = format!(
        "@at {}",
        burst.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    for namespace in ["lim", "free"] {
        for i in 0..6 {
            let id = format!("{namespace}.j{i}");
            let (reply, _) = stack
                .api_put(&job(&id, &at, &format!("svc.lim.{namespace}")))
                .await;
            assert_eq!(reply["ok"], true, "{reply}");
        }
    }
    wait_until("every fire called", Duration::from_secs(40), || {
        let seen = seen.clone();
        async move {
            let seen = seen.lock().expect("lock");
            (runs_called(&seen, "lim.").0 >= 6 && runs_called(&seen, "free.").0 >= 6).then_some(())
        }
    })
    .await;
    for i in 0..6 {
        stack
            .wait_for_runs(
                &format!("lim.j{i}"),
                "succeeded",
                1,
                Duration::from_secs(30),
            )
            .await;
    }
    {
        let seen = seen.lock().expect("lock");
        assert_eq!(runs_called(&seen, "lim."), (6, 6), "each fire called once");
        assert_eq!(runs_called(&seen, "free."), (6, 6));
        assert_eq!(seen.most["lim"], 2, "two at a time, never more");
        assert!(
            seen.most["free"] > 2,
            "a namespace without a limit is not held back"
        );
        let last = seen
            .calls
            .iter()
            .filter(|c| c.job.starts_with("lim."))
            .map(|c| (c.arrived - burst).num_milliseconds())
            .max()
            .expect("test value");
        assert!(
            last >= 2000,
            "the third pair waited for two calls of 1 s: {last} ms"
        );
    }
    stack.stop().await;
}

/// A `forbid` job in a namespace whose limit its own run fills (runs of
/// 5 s, a fire every 2 s): a fire that comes while the run lasts is
/// skipped as an overlap (not queued behind the limit and run later and
/// later, back to back), and a `replace` job's fire stops the run it
/// replaces rather than waiting for it to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlap_rules_come_before_a_namespaces_limit() {
    let stack = Stack::start(StackOptions::default()).await;
    for namespace in ["lone", "solo"] {
        let (status, body) = stack
            .send(
                Method::PUT,
                &format!("/v1/namespaces/{namespace}/policy"),
                r#"{"max_concurrent_runs":1}"#,
                Some(API_TOKEN),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    serve(&stack, "svc.lone.>", Duration::from_secs(5), seen.clone()).await;
    serve(&stack, "svc.solo.>", Duration::from_secs(5), seen.clone()).await;
    for (id, concurrency) in [("lone.forbidden", "forbid"), ("solo.replaced", "replace")] {
        let spec = format!(
            r#"{{"id":"{id}","schedule":"*/2 * * * * *","concurrency":"{concurrency}","target":{{"type":"nats","subject":"svc.{id}"}}}}"#
        );
        let (reply, _) = stack.api_put(&spec).await;
        assert_eq!(reply["ok"], true, "{reply}");
    }
    wait_until("three fires of each", Duration::from_secs(40), || {
        let seen = seen.clone();
        async move {
            let seen = seen.lock().expect("lock");
            let of = |job: &str| seen.calls.iter().filter(|c| c.job == job).count();
            (of("lone.forbidden") >= 3 && of("solo.replaced") >= 3).then_some(())
        }
    })
    .await;
    let skipped = stack
        .wait_for_runs("lone.forbidden", "skipped", 1, Duration::from_secs(30))
        .await;
    assert!(!skipped.is_empty());
    let killed = stack
        .wait_for_runs("solo.replaced", "killed", 1, Duration::from_secs(30))
        .await;
    assert!(!killed.is_empty());
    {
        let seen = seen.lock().expect("lock");
        // (A replaced run's call is stopped by its executor; the target
        // below, which does not listen, answers it later: not counted.)
        assert_eq!(seen.most["lone"], 1, "one call at a time in the namespace");
        let late: Vec<_> = seen
            .calls
            .iter()
            .filter(|c| c.job == "lone.forbidden")
            .map(|c| (c.arrived - c.scheduled).num_milliseconds())
            // A forbid fire waits up to 2 s for a short previous run to
            // end (`claims::FORBID_GRACE`) before it is skipped; queued
            // behind the limit, each waited for the last: 3 s, 6 s, 9 s…
            .filter(|lag| *lag > 3500)
            .collect();
        assert!(
            late.is_empty(),
            "no forbid fire queued behind the limit: {late:?} ms"
        );
        for job in ["lone.", "solo."] {
            let (calls, runs) = runs_called(&seen, job);
            assert_eq!(calls, runs, "each run called once");
        }
    }
    stack.stop().await;
}
