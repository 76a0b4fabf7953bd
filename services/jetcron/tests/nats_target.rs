//! A job created with `nats req jetcron.api.jobs.put` calls a NATS
//! microservice every 2 seconds, and its runs come back out over HTTP.

use std::time::Duration;

use futures::StreamExt as _;
use jetcron_testkit::{Stack, StackOptions};

#[tokio::test]
async fn nats_job_runs_end_to_end() {
    let stack = Stack::start(StackOptions::default()).await;

    // The "microservice" the job calls: replies with what it received.
    let mut requests = stack
        .client
        .subscribe("demo.hello")
        .await
        .expect("subscribe");
    let responder = stack.client.clone();
    let service = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(msg) = requests.next().await {
            let run_id = msg
                .headers
                .as_ref()
                .and_then(|h| h.get("Jetcron-Run-Id"))
                .map(|v| v.as_str().to_string())
                .unwrap_or_default();
            seen.push(run_id.clone());
            if let Some(reply) = msg.reply {
                responder
                    .publish(reply, format!("hello from run {run_id}").into())
                    .await
                    .expect("reply");
            }
        }
        seen
    });

    let (reply, error_code) = stack
        .api_put(r#"{"id":"hello","schedule":"*/2 * * * * *","target":{"type":"nats","subject":"demo.hello"}}"#)
        .await;
    assert_eq!(error_code, None, "{reply}");
    assert_eq!(reply["ok"], true);
    assert_eq!(reply["job"]["id"], "hello");
    assert!(reply["revision"].as_u64().expect("revision") >= 1);

    let runs = stack
        .wait_for_runs("hello", "succeeded", 2, Duration::from_secs(20))
        .await;
    let run = &runs[0];
    assert_eq!(run["job_id"], "hello");
    assert_eq!(run["attempt"], 1);
    assert_eq!(run["trigger"], "schedule");
    assert_eq!(run["target_type"], "nats");
    let run_id = run["run_id"].as_str().expect("run id");
    assert_eq!(run["output"], format!("hello from run {run_id}"));
    // Scheduled on an even second; started at or after it; finished after start.
    let scheduled =
        chrono::DateTime::parse_from_rfc3339(run["scheduled_at"].as_str().expect("scheduled_at"))
            .expect("rfc3339");
    let started =
        chrono::DateTime::parse_from_rfc3339(run["started_at"].as_str().expect("started_at"))
            .expect("rfc3339");
    let finished =
        chrono::DateTime::parse_from_rfc3339(run["finished_at"].as_str().expect("finished_at"))
            .expect("rfc3339");
    assert_eq!(scheduled.timestamp_subsec_millis(), 0);
    assert_eq!(scheduled.timestamp() % 2, 0);
    assert!(started >= scheduled && finished >= started);
    assert!(run["duration_ms"].as_i64().expect("duration") >= 0);

    // The single-run view carries the ordered timeline.
    let (status, body) = stack.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(status, 200, "{body}");
    let kinds: Vec<&str> = body["run"]["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["kind"].as_str().expect("kind"))
        .collect();
    assert_eq!(kinds, ["started", "succeeded"]);

    // The job itself is listed from the bucket with its next fire times.
    let (status, body) = stack.get("/v1/jobs/hello").await;
    assert_eq!(status, 200);
    assert_eq!(body["job"]["valid"], true);
    assert_eq!(body["next_fires"].as_array().expect("next fires").len(), 5);
    let (_, list) = stack.get("/v1/jobs").await;
    assert_eq!(list["jobs"][0]["id"], "hello");

    stack.stop().await;
    service.abort();
}
