//! The life of a run on the executor: retries on the job's backoff schedule,
//! timeouts of every target type, long runs kept alive past `ack_wait`,
//! failure notifications that survive a flaky webhook, and the shell's
//! working directory and environment. Jobs are put with `nats req` and run by
//! hand (`jetcron.api.jobs.trigger`), so the test controls when they start.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use jetcron_core::events::{AttemptOutcome, RunEvent, RunEventKind, RunId};
use jetcron_testkit::stack::test_executor_config;
use jetcron_testkit::{wait_until, Stack, StackOptions};
use serde_json::Value;

/// Put `job` and start one manual run of it; the run id.
async fn put_and_trigger(stack: &Stack, job: &str) -> String {
    let (reply, code) = stack.api_put(job).await;
    assert_eq!(code, None, "{reply}");
    let id = reply["job"]["id"].as_str().expect("id").to_string();
    let (reply, code) = stack
        .api("jetcron.api.jobs.trigger", &format!(r#"{{"id":"{id}"}}"#))
        .await;
    assert_eq!(code, None, "{reply}");
    reply["run_id"].as_str().expect("run_id").to_string()
}

/// The events of one run, in (attempt, step) order.
async fn events_of(stack: &Stack, job_id: &str, run_id: &str) -> Vec<RunEvent> {
    let mut events: Vec<RunEvent> = stack
        .run_events(job_id)
        .await
        .into_iter()
        .filter(|e| e.run_id.as_str() == run_id)
        .collect();
    events.sort_by_key(|e| (e.attempt, e.kind.rank_in_attempt()));
    events
}

/// A stack with shell targets whose executors run with `configs`.
async fn stack_with_executors(
    configs: impl IntoIterator<Item = jetcron_executor::ExecutorConfig>,
) -> Stack {
    let mut stack = Stack::start(StackOptions {
        executor: false,
        enable_shell: true,
        ..Default::default()
    })
    .await;
    for config in configs {
        stack.spawn_executor(config).await;
    }
    stack
}

fn millis(d: chrono::Duration) -> i64 {
    d.num_milliseconds()
}

#[tokio::test]
async fn retries_follow_the_jobs_backoff_schedule_and_stop_at_max_attempts() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    retries_follow_the_backoff(&stack).await;
    stack.stop().await;
}

/// The pool's consumer gives a redelivery a much shorter wait than a first
/// delivery (a `backoff` of 10 s, then 2 s); nats-server counts a delayed
/// nak of a redelivery as if the first wait had passed, so uncorrected the
/// third and fourth attempts started 8 s early: at once.
#[tokio::test]
async fn retries_keep_their_backoff_when_redeliveries_have_a_shorter_ack_wait() {
    let mut config = test_executor_config("short-redeliveries", true);
    config.ack_wait = Duration::from_secs(10);
    config.redelivery_ack_wait = Duration::from_secs(2);
    let stack = stack_with_executors([config]).await;
    let consumer = wait_until("the pool's consumer", Duration::from_secs(10), || async {
        let stream = stack
            .js
            .get_stream(jetcron_core::subjects::DUE_STREAM)
            .await
            .ok()?;
        let name = jetcron_core::subjects::executor_consumer("default");
        Some(stream.consumer_info(name).await.ok()?.config.clone())
    })
    .await;
    assert_eq!(
        (consumer.ack_wait, consumer.backoff),
        (
            Duration::from_secs(10),
            vec![Duration::from_secs(10), Duration::from_secs(2)]
        )
    );
    retries_follow_the_backoff(&stack).await;
    stack.stop().await;
}

/// A job failing every attempt is retried on its backoff schedule (each
/// attempt starts its promised delay after the failure before it) and
/// fails for good at its last attempt.
async fn retries_follow_the_backoff(stack: &Stack) {
    let job = r#"{"id":"flaky","schedule":"@daily","timeout":"10s",
        "retry":{"max_attempts":4,"backoff":"1s","multiplier":2,"max_backoff":"3s","jitter":0.25},
        "target":{"type":"shell","command":"echo nope; exit 7"}}"#;
    let run_id = put_and_trigger(stack, job).await;
    let run = stack
        .wait_for_run_status(&run_id, "failed", Duration::from_secs(40))
        .await;
    assert_eq!(run["attempt"], 4);
    assert_eq!(run["exit_code"], 7);
    let events = events_of(stack, "flaky", &run_id).await;
    let kinds: Vec<(u32, RunEventKind)> = events.iter().map(|e| (e.attempt, e.kind)).collect();
    use RunEventKind::*;
    assert_eq!(
        kinds,
        [
            (1, Started),
            (1, Retrying),
            (2, Started),
            (2, Retrying),
            (3, Started),
            (3, Retrying),
            (4, Started),
            (4, Failed)
        ]
    );
    // The delays the job's backoff gives for this run (jitter is a function
    // of run id and attempt), and what the events show.
    let spec = jetcron_core::job::parse_job(job.as_bytes(), None).expect("job");
    let seed = RunId(run_id.clone()).0;
    for attempt in 1..=3u32 {
        let retrying = &events[(attempt as usize - 1) * 2 + 1];
        let next_start = &events[attempt as usize * 2];
        let delay = spec.retry_delay(attempt + 1, &seed);
        let ceiling = spec.backoff.ceiling(attempt + 1);
        assert!(delay <= ceiling && delay.as_secs_f64() >= ceiling.as_secs_f64() * 0.75);
        let promised = retrying.retry_at.expect("retry_at") - retrying.at;
        // Both instants are stored in milliseconds: allow the rounding.
        assert!(
            (millis(promised) - delay.as_millis() as i64).abs() <= 1,
            "attempt {attempt}: promised {promised:?}, backoff says {delay:?}"
        );
        let waited = millis(next_start.at - retrying.at);
        assert!(
            waited >= delay.as_millis() as i64 - 50 && waited <= delay.as_millis() as i64 + 1500,
            "attempt {} started {waited} ms after the failure, promised {delay:?}",
            attempt + 1
        );
        assert_eq!(retrying.outcome, Some(AttemptOutcome::Failed));
    }
    // The last failure terminated the message: no fifth delivery.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(events_of(stack, "flaky", &run_id).await.len(), 8);
}

/// An HTTP endpoint that never answers, and one that counts.
async fn start_slow_server() -> String {
    let app = Router::new().route(
        "/hang",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            "never"
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

#[tokio::test]
async fn timeouts_cancel_every_target_type_and_count_as_failed_attempts() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let base = start_slow_server().await;
    let marker = tempfile_path("timeout-child");
    let shell = format!(
        r#"{{"id":"slow-shell","schedule":"@daily","timeout":"1s","retry":{{"max_attempts":2,"backoff":"100ms"}},
            "target":{{"type":"shell","command":"(sleep 3; touch {}) & sleep 30"}}}}"#,
        marker.display()
    );
    let http = format!(
        r#"{{"id":"slow-http","schedule":"@daily","timeout":"1s","retry":{{"max_attempts":1}},
            "target":{{"type":"http","url":"{base}/hang"}}}}"#
    );
    // A subscriber that takes the request and never replies.
    let _silent = stack
        .client
        .subscribe("jobs.silent")
        .await
        .expect("subscribe");
    let nats = r#"{"id":"slow-nats","schedule":"@daily","timeout":"1s","retry":{"max_attempts":1},
        "target":{"type":"nats","subject":"jobs.silent"}}"#;
    let runs = [
        (put_and_trigger(&stack, &shell).await, "slow-shell", 2),
        (put_and_trigger(&stack, &http).await, "slow-http", 1),
        (put_and_trigger(&stack, nats).await, "slow-nats", 1),
    ];
    for (run_id, job_id, attempts) in &runs {
        let run = stack
            .wait_for_run_status(run_id, "timed_out", Duration::from_secs(20))
            .await;
        assert_eq!(run["attempt"], *attempts, "{job_id}");
        assert_eq!(run["error"], "timed out after 1s", "{job_id}");
        assert!(
            run["duration_ms"].as_i64().expect("duration") < 3_000,
            "{run}"
        );
        let events = events_of(&stack, job_id, run_id).await;
        let last = events.last().expect("events");
        assert_eq!(
            (last.kind, last.outcome),
            (RunEventKind::TimedOut, Some(AttemptOutcome::TimedOut))
        );
        if *attempts == 2 {
            assert_eq!(events[1].kind, RunEventKind::Retrying);
            assert_eq!(events[1].outcome, Some(AttemptOutcome::TimedOut));
        }
    }
    // The shell's background child died with its process group.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!marker.exists(), "a child of the timed-out shell survived");
    stack.stop().await;
}

fn tempfile_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("jetcron-{}-{name}", std::process::id()))
}

#[tokio::test]
async fn a_long_run_outlives_ack_wait_on_one_executor() {
    // ack_wait 2 s: without in-progress acks the 5 s run would be handed to
    // the second executor twice over.
    let stack = stack_with_executors(["long-a", "long-b"].map(|id| {
        let mut config = test_executor_config(id, true);
        config.ack_wait = Duration::from_secs(2);
        config.progress_interval = Duration::from_millis(500);
        config
    }))
    .await;
    let run_id = put_and_trigger(
        &stack,
        r#"{"id":"long","schedule":"@daily","timeout":"30s","target":{"type":"shell","command":"sleep 5; echo finished"}}"#,
    )
    .await;
    let run = stack
        .wait_for_run_status(&run_id, "succeeded", Duration::from_secs(30))
        .await;
    assert_eq!(run["attempt"], 1);
    assert_eq!(run["output"], "finished\n");
    let events = events_of(&stack, "long", &run_id).await;
    assert_eq!(events.len(), 2, "{events:#?}");
    stack.stop().await;
}

/// A webhook receiver that fails `failures` times, then accepts.
#[derive(Clone, Default)]
struct Webhook {
    bodies: Arc<Mutex<Vec<Value>>>,
    authorized: Arc<Mutex<Vec<bool>>>,
}

async fn start_webhook(failures: usize) -> (String, Webhook) {
    let hook = Webhook::default();
    let seen = hook.clone();
    let app = Router::new().route(
        "/notify",
        post(move |headers: axum::http::HeaderMap, body: String| {
            let seen = seen.clone();
            async move {
                let mut bodies = seen.bodies.lock().expect("lock");
                bodies.push(serde_json::from_str(&body).unwrap_or(Value::Null));
                seen.authorized.lock().expect("lock").push(
                    headers.get("authorization").and_then(|v| v.to_str().ok())
                        == Some("Bearer hook-secret"),
                );
                if bodies.len() <= failures {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, hook)
}

#[tokio::test]
async fn a_failure_notification_is_retried_until_the_webhook_takes_it() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let (base, hook) = start_webhook(2).await;
    let job = format!(
        r#"{{"id":"notify-me","schedule":"@daily","retry":{{"max_attempts":1}},
            "notify":{{"webhook":"{base}/notify","headers":{{"Authorization":"Bearer hook-secret"}}}},
            "target":{{"type":"shell","command":"echo broken >&2; exit 3"}}}}"#
    );
    let run_id = put_and_trigger(&stack, &job).await;
    stack
        .wait_for_run_status(&run_id, "failed", Duration::from_secs(20))
        .await;
    let run = wait_until("notification recorded", Duration::from_secs(30), || async {
        stack
            .run(&run_id)
            .await
            .filter(|r| r["notification"] == "notified")
    })
    .await;
    assert_eq!(run["status"], "failed");
    let bodies = hook.bodies.lock().expect("lock").clone();
    assert_eq!(bodies.len(), 3, "two refusals, then accepted: {bodies:#?}");
    assert!(hook.authorized.lock().expect("lock").iter().all(|a| *a));
    for body in &bodies {
        assert_eq!(body["status"], "failed");
        assert_eq!(body["run"]["run_id"], run_id.as_str());
        assert_eq!(body["run"]["exit_code"], 3);
        assert_eq!(body["run"]["error"], "exit status 3");
    }
    let events = events_of(&stack, "notify-me", &run_id).await;
    let notified: Vec<&RunEvent> = events
        .iter()
        .filter(|e| e.kind == RunEventKind::Notified)
        .collect();
    assert_eq!(notified.len(), 1);
    assert_eq!(
        notified[0].output.as_deref(),
        Some("delivered on try 3 (HTTP 200)")
    );
    stack.stop().await;
}

#[tokio::test]
async fn a_webhook_that_never_answers_ends_in_a_notify_failed_event() {
    let mut config = test_executor_config("notifier", true);
    config.notify_backoff = Duration::from_millis(200);
    config.notify_max_attempts = 3;
    let stack = stack_with_executors([config]).await;
    // Nothing listens on this port.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let job = format!(
        r#"{{"id":"notify-void","schedule":"@daily","retry":{{"max_attempts":1}},"timeout":"1s",
            "notify":{{"webhook":"http://127.0.0.1:{closed}/x"}},
            "target":{{"type":"shell","command":"sleep 5"}}}}"#
    );
    let run_id = put_and_trigger(&stack, &job).await;
    let run = wait_until(
        "notify_failed recorded",
        Duration::from_secs(30),
        || async {
            stack
                .run(&run_id)
                .await
                .filter(|r| r["notification"] == "notify_failed")
        },
    )
    .await;
    assert_eq!(run["status"], "timed_out");
    let events = events_of(&stack, "notify-void", &run_id).await;
    let failed = events
        .iter()
        .find(|e| e.kind == RunEventKind::NotifyFailed)
        .expect("notify_failed event");
    let error = failed.error.as_deref().expect("error");
    assert!(
        error.starts_with("not delivered after 3 tries: "),
        "{error}"
    );
    stack.stop().await;
}

#[tokio::test]
async fn shell_targets_get_their_working_dir_environment_and_run_context() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let dir = tempfile_path("workdir");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let job = format!(
        r#"{{"id":"shell-env","schedule":"@daily",
            "target":{{"type":"shell","working_dir":"{}","env":{{"MODE":"fast","PATH":"/usr/bin:/bin"}},
            "command":"pwd; echo $MODE $JETCRON_JOB_ID $JETCRON_RUN_ID $JETCRON_ATTEMPT; echo ${{JETCRON_SHARD:-none}}; echo ${{NATS_URL:-clean}}"}}}}"#,
        dir.display()
    );
    let run_id = put_and_trigger(&stack, &job).await;
    let run = stack
        .wait_for_run_status(&run_id, "succeeded", Duration::from_secs(20))
        .await;
    assert_eq!(
        run["output"],
        format!(
            "{}\nfast shell-env {run_id} 1\nnone\nclean\n",
            dir.display()
        )
    );
    // A working directory that does not exist is the attempt's failure, said plainly.
    let missing = r#"{"id":"shell-nodir","schedule":"@daily","retry":{"max_attempts":1},
        "target":{"type":"shell","working_dir":"/nonexistent/jetcron","command":"true"}}"#;
    let run_id = put_and_trigger(&stack, missing).await;
    let run = stack
        .wait_for_run_status(&run_id, "failed", Duration::from_secs(20))
        .await;
    let error = run["error"].as_str().expect("error");
    assert!(
        error.starts_with("cannot start /bin/sh in /nonexistent/jetcron:"),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).ok();
    stack.stop().await;
}
