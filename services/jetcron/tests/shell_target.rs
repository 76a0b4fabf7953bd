//! Shell targets: run by `/bin/sh -c` only on executors started with shell
//! enabled; exit code and (capped) output are recorded.

use std::time::Duration;

use jetcron_testkit::{Stack, StackOptions};

#[tokio::test]
async fn shell_job_runs_with_its_context() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let (reply, code) = stack
        .api_put(r#"{"id":"greet","schedule":"* * * * * *","target":{"type":"shell","command":"echo run $JETCRON_RUN_ID of $JETCRON_JOB_ID attempt $JETCRON_ATTEMPT; echo oops >&2"}}"#)
        .await;
    assert_eq!(code, None, "{reply}");
    let runs = stack
        .wait_for_runs("greet", "succeeded", 1, Duration::from_secs(20))
        .await;
    let run = &runs[0];
    let run_id = run["run_id"].as_str().expect("id");
    assert_eq!(run["exit_code"], 0);
    assert_eq!(
        run["output"],
        format!("run {run_id} of greet attempt 1\noops\n")
    );
    stack.stop().await;
}

#[tokio::test]
async fn failing_shell_job_retries_then_fails_with_its_exit_code() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let at = (chrono::Utc::now() + chrono::Duration::seconds(1)).to_rfc3339();
    let job = format!(
        r#"{{"id":"flaky","schedule":"@at {at}","retry":{{"backoff":"100ms"}},"target":{{"type":"shell","command":"echo attempt $JETCRON_ATTEMPT; exit 3"}}}}"#
    );
    let (reply, code) = stack.api_put(&job).await;
    assert_eq!(code, None, "{reply}");
    let runs = stack
        .wait_for_runs("flaky", "failed", 1, Duration::from_secs(20))
        .await;
    let run = &runs[0];
    assert_eq!(run["attempt"], 3, "default max_attempts is 3");
    assert_eq!(run["exit_code"], 3);
    assert_eq!(run["output"], "attempt 3\n");
    assert_eq!(run["error"], "exit status 3");
    stack.stop().await;
}

#[tokio::test]
async fn shell_output_is_capped_and_timeouts_kill() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let at = (chrono::Utc::now() + chrono::Duration::seconds(1)).to_rfc3339();
    let big = format!(
        r#"{{"id":"chatty","schedule":"@at {at}","target":{{"type":"shell","command":"head -c 200000 /dev/zero | tr '\\0' x"}}}}"#
    );
    let slow = format!(
        r#"{{"id":"slow","schedule":"@at {at}","timeout":"1s","retry":{{"max_attempts":1}},"target":{{"type":"shell","command":"sleep 30"}}}}"#
    );
    assert_eq!(stack.api_put(&big).await.1, None);
    assert_eq!(stack.api_put(&slow).await.1, None);
    let runs = stack
        .wait_for_runs("chatty", "succeeded", 1, Duration::from_secs(20))
        .await;
    assert_eq!(runs[0]["output"].as_str().expect("output").len(), 64 * 1024);
    assert_eq!(runs[0]["output_truncated"], true);
    let runs = stack
        .wait_for_runs("slow", "timed_out", 1, Duration::from_secs(20))
        .await;
    assert_eq!(runs[0]["error"], "timed out after 1s");
    assert!(runs[0]["duration_ms"].as_i64().expect("duration") < 5_000);
    stack.stop().await;
}

#[tokio::test]
async fn shell_is_refused_unless_enabled() {
    let stack = Stack::start(StackOptions::default()).await;
    let at = (chrono::Utc::now() + chrono::Duration::seconds(1)).to_rfc3339();
    let job = format!(
        r#"{{"id":"sneaky","schedule":"@at {at}","retry":{{"max_attempts":1}},"target":{{"type":"shell","command":"touch /tmp/jetcron-should-not-exist"}}}}"#
    );
    assert_eq!(stack.api_put(&job).await.1, None);
    let runs = stack
        .wait_for_runs("sneaky", "failed", 1, Duration::from_secs(20))
        .await;
    assert_eq!(
        runs[0]["error"],
        "shell targets are disabled on this executor (start it with --enable-shell)"
    );
    assert!(!std::path::Path::new("/tmp/jetcron-should-not-exist").exists());
    stack.stop().await;
}
