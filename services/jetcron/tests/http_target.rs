//! A job written straight into the bucket (`nats kv put jetcron_jobs ...`)
//! calls an HTTP endpoint; status, body and headers reach the run history.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use jetcron_testkit::{Stack, StackOptions};

#[derive(Default, Clone)]
struct Received {
    calls: Arc<Mutex<Vec<(String, String, String)>>>,
}

async fn start_receiver() -> (String, Received) {
    let received = Received::default();
    let calls = received.clone();
    let app = Router::new()
        .route(
            "/hook",
            post(move |headers: HeaderMap, body: String| {
                let calls = calls.clone();
                async move {
                    let header = |name: &str| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string()
                    };
                    calls.calls.lock().expect("lock").push((
                        header("jetcron-run-id"),
                        header("x-team"),
                        body,
                    ));
                    "accepted"
                }
            }),
        )
        .route(
            "/broken",
            post(|| async {
                (
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "database is on fire",
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, received)
}

#[tokio::test]
async fn http_job_runs_end_to_end() {
    let stack = Stack::start(StackOptions::default()).await;
    let (base, received) = start_receiver().await;

    let job = format!(
        r#"{{"schedule":"* * * * * *","target":{{"type":"http","url":"{base}/hook","method":"POST","headers":{{"X-Team":"billing"}},"body":"ping"}}}}"#
    );
    stack.kv_put("webhook", job.as_bytes()).await;

    let runs = stack
        .wait_for_runs("webhook", "succeeded", 2, Duration::from_secs(20))
        .await;
    let run = &runs[0];
    assert_eq!(run["status_code"], 200);
    assert_eq!(run["output"], "accepted");
    assert_eq!(run["target_type"], "http");
    let run_ids: Vec<String> = runs
        .iter()
        .map(|r| r["run_id"].as_str().expect("id").to_string())
        .collect();
    let calls = received.calls.lock().expect("lock").clone();
    for (run_id, team, body) in &calls {
        assert_eq!(team, "billing");
        assert_eq!(body, "ping");
        assert!(!run_id.is_empty());
    }
    // Every listed run is a call the receiver saw.
    for id in &run_ids {
        assert!(
            calls.iter().any(|(r, _, _)| r == id),
            "run {id} never reached the receiver"
        );
    }
    stack.stop().await;
}

#[tokio::test]
async fn http_error_status_fails_after_retries() {
    let stack = Stack::start(StackOptions::default()).await;
    let (base, _) = start_receiver().await;
    let at = (chrono::Utc::now() + chrono::Duration::seconds(1)).to_rfc3339();
    let job = format!(
        r#"{{"id":"broken","schedule":"@at {at}","retry":{{"max_attempts":3,"backoff":"200ms"}},
            "target":{{"type":"http","url":"{base}/broken","method":"POST"}}}}"#
    );
    let (reply, code) = stack.api_put(&job).await;
    assert_eq!(code, None, "{reply}");

    let runs = stack
        .wait_for_runs("broken", "failed", 1, Duration::from_secs(20))
        .await;
    assert_eq!(runs.len(), 1, "a one-shot job runs once");
    let run = &runs[0];
    assert_eq!(run["attempt"], 3);
    assert_eq!(run["status_code"], 500);
    assert_eq!(run["output"], "database is on fire");
    assert_eq!(run["error"], "HTTP status 500 Internal Server Error");
    let (_, body) = stack
        .get(&format!("/v1/runs/{}", run["run_id"].as_str().expect("id")))
        .await;
    let steps: Vec<(u64, String)> = body["run"]["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["attempt"].as_u64().expect("attempt"),
                e["kind"].as_str().expect("kind").to_string(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            (1, "started".into()),
            (1, "retrying".into()),
            (2, "started".into()),
            (2, "retrying".into()),
            (3, "started".into()),
            (3, "failed".into())
        ]
    );
    stack.stop().await;
}
