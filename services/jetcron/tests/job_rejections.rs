//! Definitions refused with nobody to answer — `nats pub jetcron.api.jobs.put`
//! and `nats kv put jetcron_jobs` — become `job.rejected` events, stored in
//! ClickHouse and shown by the gateway, and nothing is scheduled.

use std::time::Duration;

use jetcron_testkit::{wait_until, Stack, StackOptions};
use serde_json::Value;

/// The rejections listed; none while ClickHouse is not ready yet (503).
async fn rejections(stack: &Stack, query: &str) -> Vec<Value> {
    let (status, reply) = stack.get(&format!("/v1/rejections{query}")).await;
    assert!(status == 200 || status == 503, "{status} {reply}");
    reply["rejections"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_refused_fire_and_forget_put_is_recorded_with_its_problems() {
    let stack = Stack::start(StackOptions {
        executor: false,
        ..StackOptions::default()
    })
    .await;
    let body =
        r#"{"id":"nightly","schedule":"0 0 30 2 *","target":{"type":"http","url":"ftp://x"}}"#;
    stack
        .client
        .publish("jetcron.api.jobs.put", body.into())
        .await
        .expect("publish");
    stack
        .client
        .publish("jetcron.api.jobs.put", "{not json".into())
        .await
        .expect("publish");
    stack.client.flush().await.expect("flush");
    let found = wait_until("rejections projected", Duration::from_secs(20), || async {
        let all = rejections(&stack, "").await;
        (all.len() >= 2).then_some(all)
    })
    .await;
    let nightly = found
        .iter()
        .find(|r| r["job_id"] == "nightly")
        .expect("the named one");
    assert_eq!(nightly["source"], "api");
    let fields: Vec<&str> = nightly["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(|p| p["field"].as_str())
        .collect();
    assert!(
        fields.contains(&"schedule") && fields.contains(&"target.url"),
        "{nightly}"
    );
    let garbage = found
        .iter()
        .find(|r| r["job_id"] == "")
        .expect("the unnamed one");
    assert_eq!(garbage["problems"][0]["code"], "invalid_json", "{garbage}");
    // Filter by job, and the job's history shows it too; nothing was stored.
    assert_eq!(rejections(&stack, "?job=nightly").await.len(), 1);
    let (status, history) = stack.get("/v1/jobs/nightly/history").await;
    assert_eq!(status, 200, "{history}");
    assert_eq!(history["revisions"].as_array().map(Vec::len), Some(0));
    assert_eq!(history["rejections"][0]["source"], "api");
    assert_eq!(stack.get("/v1/jobs/nightly").await.0, 404);
    stack.stop().await;
}

#[tokio::test]
async fn an_invalid_value_written_into_the_bucket_is_recorded_once_per_revision() {
    let mut stack = Stack::start(StackOptions {
        executor: false,
        ..StackOptions::default()
    })
    .await;
    let revision = stack
        .kv_put(
            "raw",
            br#"{"id":"raw","schedule":"every day","target":{"type":"nats","subject":"svc.raw"}}"#,
        )
        .await;
    let found = wait_until(
        "kv rejection projected",
        Duration::from_secs(20),
        || async {
            let all = rejections(&stack, "?job=raw").await;
            (!all.is_empty()).then_some(all)
        },
    )
    .await;
    assert_eq!(found[0]["source"], "kv");
    assert_eq!(found[0]["revision"], revision);
    assert_eq!(found[0]["problems"][0]["field"], "schedule", "{}", found[0]);
    // The ticker rereads the bucket when its watch reopens (here: a NATS
    // restart); the same revision is still one rejection.
    stack.nats.restart();
    let fixed = wait_until("NATS back", Duration::from_secs(20), || async {
        let bucket = stack.js.get_key_value("jetcron_jobs").await.ok()?;
        bucket
            .put(
                "raw",
                br#"{"id":"raw","schedule":"@hourly","target":{"type":"nats","subject":"svc.raw"}}"#
                    .to_vec()
                    .into(),
            )
            .await
            .ok()
    })
    .await;
    assert!(fixed > revision);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = rejections(&stack, "?job=raw").await;
    assert_eq!(after.len(), 1, "{after:?}");
    let (_, job) = stack.get("/v1/jobs/raw").await;
    assert_eq!(job["job"]["valid"], true);
    stack.stop().await;
}
