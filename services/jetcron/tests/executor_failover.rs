//! Executors as real `jetcron executor` processes: one killed with SIGKILL in
//! the middle of a run (another finishes the run, the lost attempt shows), and
//! SIGTERM with a grace period that lets a short attempt finish and hands a
//! long one back at once. Both with `max_attempts: 1`: a lost or handed-back
//! attempt does not use up the retry budget. Plus the per-executor in-flight
//! limit.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jetcron_core::events::{AttemptOutcome, RunEvent, RunEventKind};
use jetcron_testkit::{test_executor_config, wait_until, Stack, StackOptions};

/// One `jetcron executor` process; killed on drop.
struct ExecutorProcess {
    child: Option<Child>,
    log: PathBuf,
}

impl ExecutorProcess {
    fn start(stack: &Stack, id: &str, extra: &[&str]) -> Self {
        let log =
            std::env::temp_dir().join(format!("jetcron-executor-{}-{id}.log", std::process::id()));
        let file = std::fs::File::create(&log).expect("executor log");
        let child = Command::new(env!("CARGO_BIN_EXE_jetcron"))
            .args(["executor", "--enable-shell", "--executor-id", id])
            .args(["--ack-wait", "3s", "--progress-interval", "500ms"])
            .args(extra)
            .env("JETCRON_NATS_URL", stack.nats.url())
            .env("RUST_LOG", "info,async_nats=warn")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start jetcron executor");
        Self {
            child: Some(child),
            log,
        }
    }

    fn kill_9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL");
            child.wait().expect("reap");
        }
    }

    /// SIGTERM, then the time until the process exited with status 0.
    fn terminate(&mut self) -> Duration {
        let mut child = self.child.take().expect("running");
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let sent = Instant::now();
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let status = child.wait().expect("reap");
        assert!(
            status.success(),
            "executor exited with {status}: {}",
            self.log_text()
        );
        sent.elapsed()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ExecutorProcess {
    fn drop(&mut self) {
        self.kill_9();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A stack without an in-process executor.
async fn stack_without_executor() -> Stack {
    Stack::start(StackOptions {
        executor: false,
        enable_shell: true,
        ..Default::default()
    })
    .await
}

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

async fn wait_for_event(
    stack: &Stack,
    job_id: &str,
    run_id: &str,
    what: impl Fn(&RunEvent) -> bool,
) -> RunEvent {
    wait_until(
        &format!("event of {run_id}"),
        Duration::from_secs(20),
        || async {
            stack
                .events_of_run(job_id, run_id)
                .await
                .into_iter()
                .find(|e| what(e))
        },
    )
    .await
}

#[tokio::test]
async fn an_executor_killed_mid_run_loses_one_attempt_and_another_finishes_it_within_one_allowed_attempt(
) {
    let stack = stack_without_executor().await;
    let mut executors = [
        ExecutorProcess::start(&stack, "exec-a", &[]),
        ExecutorProcess::start(&stack, "exec-b", &[]),
    ];
    let marks = tempfile::tempdir().expect("marks dir");
    let run_id = put_and_trigger(
        &stack,
        &format!(
            r#"{{"id":"survivor","schedule":"@daily","timeout":"1m","retry":{{"max_attempts":1}},
            "target":{{"type":"shell","command":"sleep 3; touch {}/attempt-$JETCRON_ATTEMPT; echo done on attempt $JETCRON_ATTEMPT"}}}}"#,
            marks.path().display()
        ),
    )
    .await;
    let started = wait_for_event(&stack, "survivor", &run_id, |e| {
        e.kind == RunEventKind::Started
    })
    .await;
    let (victim, other) = if started.executor_id == "exec-a" {
        (0, "exec-b")
    } else {
        (1, "exec-a")
    };
    eprintln!(
        "attempt 1 seen started {} ms after its start",
        (chrono::Utc::now() - started.at).num_milliseconds()
    );
    executors[victim].kill_9();
    let run = stack
        .wait_for_run_status(&run_id, "succeeded", Duration::from_secs(30))
        .await;
    assert_eq!(run["attempt"], 2);
    assert_eq!(run["executor_id"], other);
    assert_eq!(run["output"], "done on attempt 2\n");
    let attempts: Vec<(u64, String, String)> = run["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| {
            (
                a["attempt"].as_u64().expect("attempt"),
                a["executor_id"].as_str().expect("executor").to_string(),
                a["outcome"].as_str().expect("outcome").to_string(),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        [
            (1, started.executor_id.clone(), "lost".to_string()),
            (2, other.to_string(), "succeeded".to_string())
        ]
    );
    let succeeded = stack
        .events_of_run("survivor", &run_id)
        .await
        .into_iter()
        .filter(|e| e.kind == RunEventKind::Succeeded)
        .count();
    assert_eq!(succeeded, 1);
    // The lost attempt's shell did not go on as an orphan of the dead executor.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(marks.path().join("attempt-2").exists());
    assert!(
        !marks.path().join("attempt-1").exists(),
        "the orphaned attempt 1 finished its command"
    );
    stack.stop().await;
}

#[tokio::test]
async fn sigterm_lets_a_short_attempt_finish() {
    let stack = stack_without_executor().await;
    let mut executor = ExecutorProcess::start(&stack, "graceful", &["--shutdown-grace", "10s"]);
    let run_id = put_and_trigger(
        &stack,
        r#"{"id":"short","schedule":"@daily","target":{"type":"shell","command":"sleep 2; echo done"}}"#,
    )
    .await;
    wait_for_event(&stack, "short", &run_id, |e| {
        e.kind == RunEventKind::Started
    })
    .await;
    let took = executor.terminate();
    assert!(took < Duration::from_secs(8), "shutdown took {took:?}");
    let run = stack
        .wait_for_run_status(&run_id, "succeeded", Duration::from_secs(10))
        .await;
    assert_eq!(
        (run["attempt"].as_u64(), run["output"].as_str()),
        (Some(1), Some("done\n"))
    );
    stack.stop().await;
}

#[tokio::test]
async fn sigterm_hands_a_long_attempt_back_after_the_grace_period_without_using_an_attempt() {
    let stack = stack_without_executor().await;
    let mut first = ExecutorProcess::start(&stack, "leaving", &["--shutdown-grace", "1s"]);
    let run_id = put_and_trigger(
        &stack,
        r#"{"id":"long-haul","schedule":"@daily","timeout":"1m","retry":{"max_attempts":1},
            "target":{"type":"shell","command":"sleep 30"}}"#,
    )
    .await;
    wait_for_event(&stack, "long-haul", &run_id, |e| {
        e.kind == RunEventKind::Started
    })
    .await;
    let took = first.terminate();
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
    let handed_back = wait_for_event(&stack, "long-haul", &run_id, |e| {
        e.kind == RunEventKind::Retrying
    })
    .await;
    assert_eq!(handed_back.outcome, Some(AttemptOutcome::Interrupted));
    assert_eq!(handed_back.attempt, 1);
    assert_eq!(handed_back.executor_id, "leaving");
    // The message was nacked without delay: a new executor takes it at once,
    // not after ack_wait.
    let _second = ExecutorProcess::start(&stack, "arriving", &[]);
    let restarted = wait_for_event(&stack, "long-haul", &run_id, |e| {
        e.kind == RunEventKind::Started && e.attempt == 2
    })
    .await;
    assert_eq!(restarted.executor_id, "arriving");
    stack.kill_run(&run_id).await;
    stack
        .wait_for_run_status(&run_id, "killed", Duration::from_secs(10))
        .await;
    stack.stop().await;
}

#[tokio::test]
async fn max_in_flight_bounds_concurrent_attempts() {
    let mut stack = stack_without_executor().await;
    let mut config = test_executor_config("narrow", true);
    config.max_in_flight = 2;
    stack.spawn_executor(config).await;
    let mut runs = Vec::new();
    for i in 0..5 {
        let job = format!(
            r#"{{"id":"wide-{i}","schedule":"@daily","target":{{"type":"shell","command":"sleep 1.5"}}}}"#
        );
        runs.push((format!("wide-{i}"), put_and_trigger(&stack, &job).await));
    }
    let mut spans = Vec::new();
    for (job_id, run_id) in &runs {
        let run = stack
            .wait_for_run_status(run_id, "succeeded", Duration::from_secs(30))
            .await;
        assert_eq!(run["job_id"], job_id.as_str());
        let events = stack.events_of_run(job_id, run_id).await;
        let start = events
            .iter()
            .find(|e| e.kind == RunEventKind::Started)
            .expect("started")
            .at;
        let end = events
            .iter()
            .find(|e| e.kind == RunEventKind::Succeeded)
            .expect("succeeded")
            .at;
        spans.push((start, end));
    }
    // Most attempts running at any instant: sweep the starts and ends.
    let mut edges: Vec<(chrono::DateTime<chrono::Utc>, i32)> = spans
        .iter()
        .flat_map(|(s, e)| [(*s, 1), (*e, -1)])
        .collect();
    edges.sort_by_key(|(t, delta)| (*t, *delta));
    let (mut running, mut most) = (0, 0);
    for (_, delta) in edges {
        running += delta;
        most = most.max(running);
    }
    assert_eq!(most, 2, "{spans:?}");
    stack.stop().await;
}

#[tokio::test]
async fn a_standalone_executor_serves_its_metrics_on_metrics_addr() {
    let stack = stack_without_executor().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let _executor = ExecutorProcess::start(&stack, "measured", &["--metrics-addr", &addr]);
    let run_id = put_and_trigger(
        &stack,
        r#"{"id":"measured","schedule":"@daily","target":{"type":"shell","command":"echo hi"}}"#,
    )
    .await;
    stack
        .wait_for_run_status(&run_id, "succeeded", Duration::from_secs(20))
        .await;
    let metrics = wait_until("executor metrics", Duration::from_secs(10), || async {
        let text = stack
            .http
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.contains("jetcron_runs_total{status=\"succeeded\"} 1")
            .then_some(text)
    })
    .await;
    assert!(
        metrics.contains("jetcron_attempt_duration_seconds_bucket{target=\"shell\""),
        "{metrics}"
    );
    stack.stop().await;
}
