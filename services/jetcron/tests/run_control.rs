//! Steering runs: kill (over NATS and HTTP, running or still queued), the
//! overlap policies across two executors, pools nobody serves yet, sharded
//! runs, and targets that complete asynchronously.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::HeaderMap;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use futures::StreamExt as _;
use jetcron_core::events::{RunEvent, RunEventKind};
use jetcron_executor::ExecutorConfig;
use jetcron_testkit::{instant, test_executor_config, wait_until, Stack, StackOptions};
use serde_json::Value;

async fn wait_for_event(stack: &Stack, job_id: &str, run_id: &str, kind: RunEventKind) -> RunEvent {
    wait_until(
        &format!("{kind:?} of {run_id}"),
        Duration::from_secs(20),
        || async {
            stack
                .run_events(job_id)
                .await
                .into_iter()
                .find(|e| e.run_id.as_str() == run_id && e.kind == kind)
        },
    )
    .await
}

/// Whether process `pid` still runs (a zombie counts as gone).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn a_killed_run_stops_its_whole_process_group_and_is_not_retried() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let dir = std::env::temp_dir().join(format!("jetcron-kill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    stack.put_job(&format!(
            r#"{{"id":"doomed","schedule":"@daily","timeout":"5m","retry":{{"max_attempts":3,"backoff":"100ms"}},
                "target":{{"type":"shell","working_dir":"{}","command":"sleep 300 & echo $! > child; echo $$ > shell; wait"}}}}"#,
            dir.display()
        ),
    )
    .await;
    let run_id = stack.trigger("doomed").await;
    wait_for_event(&stack, "doomed", &run_id, RunEventKind::Started).await;
    let pids: Vec<i32> = wait_until("pid files", Duration::from_secs(10), || async {
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok())
        };
        Some(vec![read("shell")?, read("child")?])
    })
    .await;
    assert!(pids.iter().all(|p| alive(*p)));

    // Refusals first: they change nothing.
    let (reply, code) = stack
        .api("jetcron.api.runs.kill", r#"{"run_id":"not-a-run"}"#)
        .await;
    assert_eq!(code.as_deref(), Some("400"));
    assert_eq!(reply["error"]["field"], "run_id");
    let (_, code) = stack
        .api(
            "jetcron.api.runs.kill",
            &format!(r#"{{"run_id":"{run_id}","force":true}}"#),
        )
        .await;
    assert_eq!(code.as_deref(), Some("400"));
    assert!(pids.iter().all(|p| alive(*p)));

    let (reply, code) = stack
        .api(
            "jetcron.api.runs.kill",
            &format!(r#"{{"run_id":"{run_id}","reason":"operator said so"}}"#),
        )
        .await;
    assert_eq!(code, None, "{reply}");
    assert_eq!(reply["stopped"][0]["executor_id"], "test-executor");
    assert_eq!(reply["stopped"][0]["attempts"], 1);
    let run = stack
        .wait_for_run_status(&run_id, "killed", Duration::from_secs(10))
        .await;
    assert_eq!(run["error"], "killed: operator said so");
    wait_until("process group gone", Duration::from_secs(5), || async {
        pids.iter().all(|p| !alive(*p)).then_some(())
    })
    .await;
    // No retry after a kill.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let run = stack.run(&run_id).await.expect("run");
    assert_eq!(
        (run["status"].as_str(), run["attempt"].as_u64()),
        (Some("killed"), Some(1))
    );
    std::fs::remove_dir_all(&dir).ok();
    stack.stop().await;
}

#[tokio::test]
async fn a_pool_nobody_serves_waits_visibly_and_its_runs_can_be_killed_before_they_start() {
    let mut stack = Stack::start(StackOptions::with_shell()).await;
    stack.put_job(r#"{"id":"render","schedule":"@daily","pool":"gpu","target":{"type":"shell","command":"echo rendered"}}"#,
    )
    .await;
    stack.put_job(r#"{"id":"render-later","schedule":"@daily","pool":"gpu","target":{"type":"shell","command":"echo should not run"}}"#,
    )
    .await;
    let waiting = stack.trigger("render").await;
    let cancelled = stack.trigger("render-later").await;
    let (status, pools) = stack.get("/v1/pools").await;
    assert_eq!(status, 200);
    let gpu = pools["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .find(|p| p["pool"] == "gpu")
        .cloned()
        .expect("gpu pool listed");
    assert_eq!(gpu["pending"], 2);
    assert_eq!(gpu["consumer"], false);
    assert_eq!(gpu["waiting_pulls"], 0);
    let metrics = stack
        .http
        .get(format!("{}/metrics", stack.http_base))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("jetcron_pool_pending_due_events{pool=\"gpu\"} 2"),
        "{metrics}"
    );
    // The default pool's executor never touched them.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(stack.run_events("render").await.is_empty());

    let (status, reply) = stack
        .post(
            &format!("/v1/runs/{cancelled}/kill"),
            r#"{"reason":"not needed any more"}"#,
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["stopped"], serde_json::json!([]));
    let (status, reply) = stack.post("/v1/runs/xyz/kill", "").await;
    assert_eq!(
        (status, reply["error"]["field"].as_str()),
        (400, Some("run_id"))
    );

    let mut config = test_executor_config("gpu-executor", true);
    config.pools = vec!["gpu".into()];
    stack.spawn_executor(config).await;
    let run = stack
        .wait_for_run_status(&waiting, "succeeded", Duration::from_secs(20))
        .await;
    assert_eq!(run["executor_id"], "gpu-executor");
    assert_eq!(run["pool"], "gpu");
    let run = stack
        .wait_for_run_status(&cancelled, "killed", Duration::from_secs(20))
        .await;
    assert_eq!(run["error"], "killed: not needed any more");
    assert_eq!(run["first_started_at"], Value::Null, "it never started");
    stack.stop().await;
}

/// Start and end of every run of `job_id` that ran, and the skipped ones.
async fn runs_by_status(stack: &Stack, job_id: &str) -> (Vec<(i64, i64, String)>, Vec<RunEvent>) {
    let events = stack.run_events(job_id).await;
    let mut ran = Vec::new();
    for started in events.iter().filter(|e| e.kind == RunEventKind::Started) {
        let end = events
            .iter()
            .find(|e| e.run_id == started.run_id && e.kind.is_terminal())
            .map(|e| e.at.timestamp_millis())
            .unwrap_or(i64::MAX);
        ran.push((started.at.timestamp_millis(), end, started.run_id.0.clone()));
    }
    ran.sort();
    let skipped = events
        .into_iter()
        .filter(|e| e.kind == RunEventKind::Skipped)
        .collect();
    (ran, skipped)
}

/// One line per event (when, kind, run, attempt, executor, error), for a
/// failed assertion to show what happened.
fn event_lines(events: &[RunEvent]) -> String {
    events
        .iter()
        .map(|e| {
            format!(
                "{} {:?} {} scheduled {} attempt {} on {} {}",
                e.at.format("%H:%M:%S%.3f"),
                e.kind,
                e.run_id.0,
                e.scheduled_at.format("%H:%M:%S%.3f"),
                e.attempt,
                e.executor_id,
                e.error.as_deref().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn two_executor_stack() -> Stack {
    two_executors(None).await
}

/// Two executors (`exec-a`, `exec-b`) of `slots` attempts at once each,
/// each pulling only as many due events as it has slots.
async fn two_executors_of_slots(slots: usize) -> Stack {
    two_executors(Some(slots)).await
}

/// Two executors (`exec-a`, `exec-b`), of `slots` call slots and intake
/// each when given (the defaults otherwise).
async fn two_executors(slots: Option<usize>) -> Stack {
    stack_with_executors(&["exec-a", "exec-b"], |config| {
        if let Some(slots) = slots {
            config.max_in_flight = slots;
            config.max_pulled = Some(slots);
        }
    })
    .await
}

/// A stack whose executors are `ids` (none of its own), with shell
/// targets, each configured by `configure`.
async fn stack_with_executors(ids: &[&str], configure: impl Fn(&mut ExecutorConfig)) -> Stack {
    let mut stack = Stack::start(StackOptions {
        executor: false,
        enable_shell: true,
        ..Default::default()
    })
    .await;
    for id in ids {
        let mut config = test_executor_config(id, true);
        configure(&mut config);
        stack.spawn_executor(config).await;
    }
    stack
}

#[tokio::test]
async fn forbid_skips_fires_while_the_previous_run_goes_on_across_two_executors() {
    let stack = two_executor_stack().await;
    stack
        .put_job(
            r#"{"id":"nightly-etl","schedule":"* * * * * *","concurrency":"forbid","misfire":"skip",
            "target":{"type":"shell","command":"sleep 2.5"}}"#,
        )
        .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    stack.kv_delete("nightly-etl").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (ran, skipped) = runs_by_status(&stack, "nightly-etl").await;
    assert!(ran.len() >= 2, "{ran:?}");
    assert!(skipped.len() >= 3, "{} skipped", skipped.len());
    for pair in ran.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "runs overlap: {pair:?}");
    }
    let executors: BTreeSet<String> = stack
        .run_events("nightly-etl")
        .await
        .into_iter()
        .map(|e| e.executor_id)
        .collect();
    assert_eq!(
        executors.len(),
        2,
        "both executors took fires: {executors:?}"
    );
    for s in &skipped {
        let error = s.error.as_deref().expect("why");
        assert!(
            error.ends_with("is still going (concurrency: forbid)"),
            "{error}"
        );
        assert!(
            !ran.iter().any(|r| r.2 == s.run_id.0),
            "a skipped run also ran"
        );
    }
    // The claim remembers every skip (noted by the skipping executor while
    // the holder ran), and the last run marks it ended on top of the notes.
    // The last run may still be in its `sleep 2.5` when the job is deleted
    // and, on a loaded machine, still storing its outcome 4 s later: wait
    // for the release rather than read the claim once.
    let running = stack
        .js
        .get_key_value(jetcron_core::subjects::RUNNING_BUCKET)
        .await
        .expect("running bucket");
    let claim_key = jetcron_core::subjects::claim_key("nightly-etl", None);
    let claim = wait_until(
        "the last run to release its claim",
        Duration::from_secs(20),
        || async {
            let claim: Value = running
                .get(claim_key.clone())
                .await
                .expect("read claim")
                .map(|bytes| serde_json::from_slice(&bytes).expect("claim json"))
                .expect("a claim");
            (claim["ended"] == true).then_some(claim)
        },
    )
    .await;
    let remembered: BTreeSet<&str> = claim["recent"]
        .as_array()
        .map(|visits| visits.iter().filter_map(|v| v["run_id"].as_str()).collect())
        .unwrap_or_default();
    for s in &skipped {
        assert!(
            remembered.contains(s.run_id.as_str()),
            "skip of {} lost from the claim: {claim}",
            s.run_id.as_str()
        );
    }
    stack.stop().await;
}

#[tokio::test]
async fn replace_kills_the_running_run_and_starts_the_new_one_across_two_executors() {
    // One slot and one pulled due event each: an executor busy with the
    // running run pulls nothing, so every replacing fire lands on the other
    // executor and its kill must cross to the one running the victim. (With
    // the default intake, twice the slots, the busy executor pulled one
    // too: overlap_is_decided_before_a_fire_waits_for_a_call_slot.)
    let stack = two_executors_of_slots(1).await;
    stack.put_job(r#"{"id":"refresh-cache","schedule":"*/2 * * * * *","concurrency":"replace","misfire":"skip",
            "timeout":"5m","target":{"type":"shell","command":"sleep 300"}}"#,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    stack.kv_delete("refresh-cache").await;
    let (ran, _) = runs_by_status(&stack, "refresh-cache").await;
    let events = stack.run_events("refresh-cache").await;
    assert!(ran.len() >= 3, "{ran:?}\n{}", event_lines(&events));
    let last = ran.last().expect("runs").2.clone();
    let executor_of = |run_id: &str| {
        events
            .iter()
            .find(|e| e.run_id.0 == run_id && e.kind == RunEventKind::Started)
            .map(|e| e.executor_id.clone())
            .expect("started")
    };
    for pair in ran.windows(2) {
        // The earlier run ended (killed) before the later one started.
        assert!(pair[1].0 >= pair[0].1, "runs overlap: {pair:?}");
        assert_ne!(
            executor_of(&pair[0].2),
            executor_of(&pair[1].2),
            "the replacing run ran beside its victim on one executor: {pair:?}"
        );
        let killed = events
            .iter()
            .find(|e| e.run_id.0 == pair[0].2 && e.kind == RunEventKind::Killed)
            .expect("earlier run killed");
        assert_eq!(
            killed.error.as_deref(),
            Some(
                format!(
                    "killed: replaced by run {} (concurrency: replace)",
                    pair[1].2
                )
                .as_str()
            )
        );
    }
    stack.kill_run(&last).await;
    stack
        .wait_for_run_status(&last, "killed", Duration::from_secs(10))
        .await;
    stack.stop().await;
}

/// One executor with one call slot, pulling three due events at once (the
/// one called and two waiting for the slot).
async fn one_slot_stack() -> Stack {
    stack_with_executors(&["exec-a"], |config| {
        config.max_in_flight = 1;
        config.max_pulled = Some(3);
    })
    .await
}

#[tokio::test]
async fn overlap_is_decided_before_a_fire_waits_for_a_call_slot() {
    // The run in the only slot is the one a `replace` fire must stop: had
    // that fire waited for the slot first, it had waited for the run's end.
    let stack = one_slot_stack().await;
    stack
        .put_job(
            r#"{"id":"refresh-cache","schedule":"@daily","concurrency":"replace",
            "timeout":"5m","target":{"type":"shell","command":"sleep 300"}}"#,
        )
        .await;
    let first = stack.trigger("refresh-cache").await;
    wait_for_event(&stack, "refresh-cache", &first, RunEventKind::Started).await;
    let second = stack.trigger("refresh-cache").await;
    let killed = wait_for_event(&stack, "refresh-cache", &first, RunEventKind::Killed).await;
    assert_eq!(
        killed.error.as_deref(),
        Some(format!("killed: replaced by run {second} (concurrency: replace)").as_str())
    );
    wait_for_event(&stack, "refresh-cache", &second, RunEventKind::Started).await;

    // A `forbid` fire is skipped while the slot is busy with the run that
    // forbids it, not left waiting for that slot.
    stack
        .put_job(
            r#"{"id":"nightly-etl","schedule":"@daily","concurrency":"forbid",
            "timeout":"5m","target":{"type":"shell","command":"sleep 300"}}"#,
        )
        .await;
    stack.kill_run(&second).await;
    wait_for_event(&stack, "refresh-cache", &second, RunEventKind::Killed).await;
    let running = stack.trigger("nightly-etl").await;
    wait_for_event(&stack, "nightly-etl", &running, RunEventKind::Started).await;
    let forbidden = stack.trigger("nightly-etl").await;
    let skipped = wait_for_event(&stack, "nightly-etl", &forbidden, RunEventKind::Skipped).await;
    assert_eq!(
        skipped.error.as_deref(),
        Some(format!("run {running} of this job is still going (concurrency: forbid)").as_str())
    );

    // A fire that holds its claim while it waits for the busy slot is
    // killed there by the fire that replaces it, before it ran anything.
    stack
        .put_job(
            r#"{"id":"warm-index","schedule":"@daily","concurrency":"replace",
            "target":{"type":"shell","command":"sleep 300"}}"#,
        )
        .await;
    let waiting = stack.trigger("warm-index").await;
    let running_bucket = stack
        .js
        .get_key_value(jetcron_core::subjects::RUNNING_BUCKET)
        .await
        .expect("running bucket");
    let claim_key = jetcron_core::subjects::claim_key("warm-index", None);
    wait_until(
        "the waiting run to hold its claim",
        Duration::from_secs(10),
        || async {
            let claim: Value = running_bucket
                .get(claim_key.clone())
                .await
                .expect("read claim")
                .map(|bytes| serde_json::from_slice(&bytes).expect("claim json"))?;
            (claim["run_id"] == waiting.as_str()).then_some(())
        },
    )
    .await;
    let replacing = stack.trigger("warm-index").await;
    let killed = wait_for_event(&stack, "warm-index", &waiting, RunEventKind::Killed).await;
    assert_eq!(
        killed.error.as_deref(),
        Some(format!("killed: replaced by run {replacing} (concurrency: replace)").as_str())
    );
    let started = stack.events_of_run("warm-index", &waiting).await;
    assert!(
        started.iter().all(|e| e.kind != RunEventKind::Started),
        "the replaced run started: {}",
        event_lines(&started)
    );
    stack.kill_run(&running).await;
    wait_for_event(&stack, "warm-index", &replacing, RunEventKind::Started).await;
    stack.kill_run(&replacing).await;
    wait_for_event(&stack, "warm-index", &replacing, RunEventKind::Killed).await;
    stack.stop().await;
}

#[tokio::test]
async fn replace_takes_over_at_once_from_a_run_waiting_for_its_retry() {
    let stack = two_executor_stack().await;
    stack
        .put_job(
            r#"{"id":"flaky-sync","schedule":"@daily","concurrency":"replace",
            "retry":{"max_attempts":3,"backoff":"1m","jitter":0},
            "target":{"type":"shell","command":"exit 1"}}"#,
        )
        .await;
    let waiting = stack.trigger("flaky-sync").await;
    wait_until(
        "first run waits for its retry",
        Duration::from_secs(10),
        || async {
            stack
                .events_of_run("flaky-sync", &waiting)
                .await
                .into_iter()
                .find(|e| e.kind == RunEventKind::Retrying)
        },
    )
    .await;
    // Its claim reaches a minute ahead (the backoff): nobody runs it, so the
    // replacing fire must not wait for the claim to expire.
    let triggered = chrono::Utc::now();
    let replacing = stack.trigger("flaky-sync").await;
    let started = wait_until("replacing run starts", Duration::from_secs(10), || async {
        stack
            .events_of_run("flaky-sync", &replacing)
            .await
            .into_iter()
            .find(|e| e.kind == RunEventKind::Started)
    })
    .await;
    let took = started.at - triggered;
    assert!(
        took < chrono::Duration::seconds(3),
        "the replacing run waited {took} for a claim nobody was using"
    );
    let waiting_started = stack
        .events_of_run("flaky-sync", &waiting)
        .await
        .into_iter()
        .filter(|e| e.kind == RunEventKind::Started)
        .count();
    assert_eq!(waiting_started, 1, "the replaced run ran again");
    stack.stop().await;
}

#[tokio::test]
async fn nats_shards_get_their_index_and_count_in_headers() {
    let stack = two_executor_stack().await;
    let mut requests = stack
        .client
        .subscribe("search.reindex")
        .await
        .expect("subscribe");
    let responder = stack.client.clone();
    let seen = Arc::new(Mutex::new(Vec::<(String, String, String)>::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Some(msg) = requests.next().await {
            let header = |name: &str| {
                msg.headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .map(|v| v.as_str().to_string())
                    .unwrap_or_default()
            };
            record.lock().expect("lock").push((
                header("Jetcron-Run-Id"),
                header("Jetcron-Shard"),
                header("Jetcron-Shards"),
            ));
            if let Some(reply) = msg.reply {
                let _ = responder.publish(reply, "indexed".into()).await;
            }
        }
    });
    stack
        .put_job(
            r#"{"id":"reindex-nats","schedule":"@daily","shards":3,
            "target":{"type":"nats","subject":"search.reindex"}}"#,
        )
        .await;
    let run_id = stack.trigger("reindex-nats").await;
    stack
        .wait_for_run_status(&run_id, "succeeded", Duration::from_secs(20))
        .await;
    let mut calls = seen.lock().expect("lock").clone();
    calls.sort();
    let expected: Vec<(String, String, String)> = (0..3)
        .map(|k| (run_id.clone(), k.to_string(), "3".to_string()))
        .collect();
    assert_eq!(calls, expected);
    stack.stop().await;
}

#[tokio::test]
async fn killing_a_sharded_run_stops_every_shard() {
    let stack = two_executor_stack().await;
    stack
        .put_job(
            r#"{"id":"backfill-all","schedule":"@daily","shards":3,"timeout":"5m",
            "target":{"type":"shell","command":"sleep 300"}}"#,
        )
        .await;
    let run_id = stack.trigger("backfill-all").await;
    wait_until("three shards running", Duration::from_secs(20), || async {
        let started: BTreeSet<Option<u32>> = stack
            .events_of_run("backfill-all", &run_id)
            .await
            .into_iter()
            .filter(|e| e.kind == RunEventKind::Started)
            .map(|e| e.shard)
            .collect();
        (started.len() == 3).then_some(())
    })
    .await;
    let (reply, code) = stack
        .api(
            "jetcron.api.runs.kill",
            &format!(r#"{{"run_id":"{run_id}","reason":"wrong input"}}"#),
        )
        .await;
    assert_eq!(code, None, "{reply}");
    let run = stack
        .wait_for_run_status(&run_id, "killed", Duration::from_secs(20))
        .await;
    let killed: BTreeSet<Option<u32>> = stack
        .events_of_run("backfill-all", &run_id)
        .await
        .into_iter()
        .filter(|e| e.kind == RunEventKind::Killed)
        .map(|e| e.shard)
        .collect();
    assert_eq!(killed, BTreeSet::from([Some(0), Some(1), Some(2)]), "{run}");
    stack.stop().await;
}

#[tokio::test]
async fn a_sharded_run_fans_out_and_succeeds_only_when_every_shard_does() {
    let stack = two_executor_stack().await;
    stack.put_job(r#"{"id":"reindex","schedule":"@daily","shards":3,
            "target":{"type":"shell","command":"sleep 1; echo shard $JETCRON_SHARD of $JETCRON_SHARDS"}}"#,
    )
    .await;
    stack
        .put_job(
            r#"{"id":"reindex-bad","schedule":"@daily","shards":3,"retry":{"max_attempts":1},
            "target":{"type":"shell","command":"test $JETCRON_SHARD != 1"}}"#,
        )
        .await;
    let good = stack.trigger("reindex").await;
    let bad = stack.trigger("reindex-bad").await;
    let run = stack
        .wait_for_run_status(&good, "succeeded", Duration::from_secs(20))
        .await;
    assert_eq!(run["shards"], 3);
    let states: Vec<(u64, String)> = run["shard_states"]
        .as_array()
        .expect("shard states")
        .iter()
        .map(|s| {
            (
                s["shard"].as_u64().expect("shard"),
                s["status"].as_str().expect("status").to_string(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            (0, "succeeded".into()),
            (1, "succeeded".into()),
            (2, "succeeded".into())
        ]
    );
    let outputs: BTreeSet<String> = stack
        .run_events("reindex")
        .await
        .into_iter()
        .filter(|e| e.kind == RunEventKind::Succeeded)
        .map(|e| e.output.expect("output"))
        .collect();
    assert_eq!(
        outputs,
        ["shard 0 of 3\n", "shard 1 of 3\n", "shard 2 of 3\n"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    // Shards ran in parallel: every shard started before any finished.
    let events = stack.run_events("reindex").await;
    let last_start = events
        .iter()
        .filter(|e| e.kind == RunEventKind::Started)
        .map(|e| e.at)
        .max();
    let first_end = events
        .iter()
        .filter(|e| e.kind == RunEventKind::Succeeded)
        .map(|e| e.at)
        .min();
    assert!(last_start < first_end, "shards ran one after another");

    let run = stack
        .wait_for_run_status(&bad, "failed", Duration::from_secs(20))
        .await;
    let failed: Vec<&Value> = run["shard_states"]
        .as_array()
        .expect("shard states")
        .iter()
        .filter(|s| s["status"] == "failed")
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["shard"], 1);
    stack.stop().await;
}

/// A NATS service that accepts work and reports back later.
async fn start_async_service(stack: &Stack, subject: &str) -> Arc<Mutex<Vec<String>>> {
    let run_ids = Arc::new(Mutex::new(Vec::new()));
    let seen = run_ids.clone();
    let client = stack.client.clone();
    let mut requests = client
        .subscribe(subject.to_string())
        .await
        .expect("subscribe");
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let run_id = request
                .headers
                .as_ref()
                .and_then(|h| h.get("Jetcron-Run-Id"))
                .map(|v| v.as_str().to_string())
                .unwrap_or_default();
            seen.lock().expect("lock").push(run_id);
            let mut headers = HeaderMap::new();
            headers.insert("Jetcron-Status", "accepted");
            if let Some(reply) = request.reply {
                let _ = client
                    .publish_with_headers(reply, headers, "queued".into())
                    .await;
            }
        }
    });
    run_ids
}

#[tokio::test]
async fn an_accepted_nats_request_completes_when_the_service_reports() {
    let stack = Stack::start(StackOptions::default()).await;
    let run_ids = start_async_service(&stack, "svc.export").await;
    stack.put_job(r#"{"id":"export","schedule":"@daily","timeout":"30s","target":{"type":"nats","subject":"svc.export"}}"#,
    )
    .await;
    stack
        .put_job(
            r#"{"id":"export-stuck","schedule":"@daily","timeout":"2s","retry":{"max_attempts":1},
            "target":{"type":"nats","subject":"svc.export"}}"#,
        )
        .await;
    let run_id = stack.trigger("export").await;
    let stuck = stack.trigger("export-stuck").await;
    wait_until("request received", Duration::from_secs(10), || async {
        run_ids
            .lock()
            .expect("lock")
            .contains(&run_id)
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(stack.run(&run_id).await.expect("run")["status"], "running");
    // A malformed report and one for another attempt are ignored.
    let subject = format!("jetcron.runs.{run_id}.complete");
    for ignored in [r#"{"status":"sure"}"#, r#"{"status":"failed","attempt":7}"#] {
        stack
            .js
            .publish(subject.clone(), ignored.into())
            .await
            .expect("publish")
            .await
            .expect("stored");
    }
    stack
        .js
        .publish(
            subject,
            r#"{"status":"succeeded","output":"42 rows"}"#.into(),
        )
        .await
        .expect("publish")
        .await
        .expect("stored");
    let run = stack
        .wait_for_run_status(&run_id, "succeeded", Duration::from_secs(10))
        .await;
    assert_eq!(run["output"], "42 rows");
    assert_eq!(run["attempt"], 1);
    // The timeout still applies while waiting for a report.
    let run = stack
        .wait_for_run_status(&stuck, "timed_out", Duration::from_secs(10))
        .await;
    assert_eq!(run["error"], "timed out after 2s");
    stack.stop().await;
}

#[tokio::test]
async fn an_accepted_http_request_completes_through_the_gateway_callback() {
    let stack = Stack::start(StackOptions::default()).await;
    let run_ids = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = run_ids.clone();
    let app = Router::new().route(
        "/jobs",
        post(move |headers: axum::http::HeaderMap| {
            let seen = seen.clone();
            async move {
                let run_id = headers
                    .get("jetcron-run-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                seen.lock().expect("lock").push(run_id);
                (StatusCode::ACCEPTED, "will call back")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    stack
        .put_job(&format!(
            r#"{{"id":"render-report","schedule":"@daily","retry":{{"max_attempts":1}},
                "target":{{"type":"http","method":"POST","url":"{base}/jobs"}}}}"#
        ))
        .await;
    let run_id = stack.trigger("render-report").await;
    wait_until("request received", Duration::from_secs(10), || async {
        run_ids
            .lock()
            .expect("lock")
            .contains(&run_id)
            .then_some(())
    })
    .await;
    let (status, reply) = stack
        .post(
            &format!("/v1/runs/{run_id}/complete"),
            r#"{"status":"done"}"#,
        )
        .await;
    assert_eq!(status, 400, "{reply}");
    let message = reply["error"]["message"].as_str().expect("message");
    assert!(
        message.starts_with("completion report: status:"),
        "{message}"
    );
    let (status, _) = stack
        .post("/v1/runs/nope/complete", r#"{"status":"failed"}"#)
        .await;
    assert_eq!(status, 400);
    // Still running (the started event may reach ClickHouse a moment later).
    stack
        .wait_for_run_status(&run_id, "running", Duration::from_secs(10))
        .await;
    let (status, reply) = stack
        .post(
            &format!("/v1/runs/{run_id}/complete"),
            r#"{"status":"failed","error":"upstream said no"}"#,
        )
        .await;
    assert_eq!(status, 202, "{reply}");
    let run = stack
        .wait_for_run_status(&run_id, "failed", Duration::from_secs(10))
        .await;
    assert_eq!(run["error"], "upstream said no");
    assert_eq!(run["status_code"], 202);
    assert!(instant(&run["finished_at"]) >= instant(&run["started_at"]));
    stack.stop().await;
}

#[tokio::test]
async fn one_executor_serves_several_pools_without_one_starving_the_other() {
    let stack = Stack::start(StackOptions {
        enable_shell: true,
        pools: vec!["default".into(), "gpu".into()],
        ..Default::default()
    })
    .await;
    stack.put_job(r#"{"id":"cpu-job","schedule":"@daily","target":{"type":"shell","command":"echo cpu"}}"#,
    )
    .await;
    stack.put_job(r#"{"id":"gpu-job","schedule":"@daily","pool":"gpu","target":{"type":"shell","command":"echo gpu"}}"#,
    )
    .await;
    for _ in 0..3 {
        for id in ["cpu-job", "gpu-job"] {
            let run_id = stack.trigger(id).await;
            let run = stack
                .wait_for_run_status(&run_id, "succeeded", Duration::from_secs(20))
                .await;
            // Prompt: well under the 5 s a pull request stays open.
            let lag = instant(&run["started_at"]) - instant(&run["scheduled_at"]);
            assert!(
                lag < chrono::Duration::seconds(2),
                "{id} started {lag} late"
            );
        }
    }
    stack.stop().await;
}

#[tokio::test]
async fn a_crashed_executors_overlap_claim_is_taken_over_but_a_retry_wait_blocks() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    stack
        .put_job(
            r#"{"id":"exclusive","schedule":"@daily","concurrency":"forbid",
            "target":{"type":"shell","command":"echo ran"}}"#,
        )
        .await;
    let running = stack
        .js
        .get_key_value("jetcron_running")
        .await
        .expect("running bucket");
    let claim = |run: &str, expires_at: chrono::DateTime<chrono::Utc>| {
        serde_json::json!({
            "run_id": run,
            "executor_id": "crashed",
            "attempt": 1,
            "expires_at_ms": expires_at.timestamp_millis(),
        })
        .to_string()
    };
    // A run waiting five minutes for its retry holds the claim: the fire
    // is skipped, naming it.
    let waiting = "00000000-0000-4000-8000-000000000002";
    running
        .put(
            "claim.exclusive",
            claim(waiting, chrono::Utc::now() + chrono::Duration::minutes(5)).into(),
        )
        .await
        .expect("claim of a run waiting for a retry");
    let blocked = stack.trigger("exclusive").await;
    let skipped = wait_for_event(&stack, "exclusive", &blocked, RunEventKind::Skipped).await;
    assert!(
        skipped
            .error
            .as_deref()
            .is_some_and(|e| e.contains(waiting)),
        "{skipped:?}"
    );
    // What an executor killed with SIGKILL mid-run leaves behind: its claim,
    // refreshed for the last time just now (expiry: 3 x the stack's 1 s
    // progress interval ahead), never released. No executor answers for its
    // run, so the next fire takes it over after 1 s, before it expires.
    let expires_at = chrono::Utc::now() + chrono::Duration::seconds(3);
    running
        .put(
            "claim.exclusive",
            claim("00000000-0000-4000-8000-000000000001", expires_at).into(),
        )
        .await
        .expect("stale claim");
    let freed = stack.trigger("exclusive").await;
    let run = stack
        .wait_for_run_status(&freed, "succeeded", Duration::from_secs(20))
        .await;
    assert_eq!(run["output"], "ran\n");
    let started = run["started_at"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .expect("started_at");
    assert!(
        started < expires_at,
        "started {started}, after the claim expired at {expires_at}: not taken over"
    );
    stack.stop().await;
}

#[tokio::test]
async fn an_attempt_whose_claim_another_run_took_stops_as_killed() {
    // A `replace` fire whose kill never arrived (lost while the victim's
    // executor reconnected) takes the claim once it expires; here the claim
    // is rewritten in another run's name directly, as that fire would.
    let stack = Stack::start(StackOptions::with_shell()).await;
    stack
        .put_job(
            r#"{"id":"lost-kill","schedule":"@daily","concurrency":"replace","timeout":"5m",
            "target":{"type":"shell","command":"sleep 300"}}"#,
        )
        .await;
    let run_id = stack.trigger("lost-kill").await;
    stack
        .wait_for_run_status(&run_id, "running", Duration::from_secs(20))
        .await;
    let running = stack
        .js
        .get_key_value(jetcron_core::subjects::RUNNING_BUCKET)
        .await
        .expect("running bucket");
    let key = jetcron_core::subjects::claim_key("lost-kill", None);
    let thief = "6a1c3f0e-9b7d-4e52-8c1a-5d2f7e90b3c4";
    let claim = serde_json::json!({
        "run_id": thief,
        "executor_id": "elsewhere",
        "attempt": 1,
        "expires_at_ms": (chrono::Utc::now() + chrono::Duration::minutes(5)).timestamp_millis(),
    });
    running
        .put(&key, claim.to_string().into())
        .await
        .expect("take the claim");
    // The holder notices at its next refresh (1 s in tests) and stops.
    let run = stack
        .wait_for_run_status(&run_id, "killed", Duration::from_secs(10))
        .await;
    assert_eq!(
        run["error"],
        format!("killed: replaced by run {thief} (concurrency: replace)"),
        "{run}"
    );
    // It did not release the claim it no longer held.
    let entry = running.get(&key).await.expect("get").expect("claim kept");
    let holder: Value = serde_json::from_slice(&entry).expect("claim json");
    assert_eq!(holder["run_id"], thief);
    stack.stop().await;
}
