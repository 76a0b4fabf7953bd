//! The ticker's contract in the walking skeleton: one run per fire even when
//! a due event is published twice, deletes stop a job within a second, and
//! invalid definitions are never scheduled and never crash anything.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::HeaderMap;
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use jetcron_core::events::{DueEvent, RunId, Trigger};
use jetcron_core::job::parse_job;
use jetcron_core::{subjects, time_format};
use jetcron_testkit::{instant, Stack, StackOptions};

/// Record every due event published (as core NATS sees them) on `jetcron.due.>`.
async fn record_due_events(stack: &Stack) -> Arc<Mutex<Vec<DueEvent>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut sub = stack
        .client
        .subscribe("jetcron.due.>")
        .await
        .expect("subscribe");
    let sink = seen.clone();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            if let Ok(event) = serde_json::from_slice::<DueEvent>(&msg.payload) {
                sink.lock().expect("lock").push(event);
            }
        }
    });
    stack.client.flush().await.expect("flush");
    seen
}

#[tokio::test]
async fn the_same_due_event_published_twice_runs_once() {
    let stack = Stack::start(StackOptions {
        ticker: false,
        enable_shell: true,
        ..Default::default()
    })
    .await;
    let job = parse_job(
        br#"{"id":"twice","schedule":"@daily","target":{"type":"shell","command":"echo ran"}}"#,
        None,
    )
    .expect("valid job");
    let scheduled_at = Utc::now();
    let event = DueEvent {
        run_id: RunId::for_fire("twice", scheduled_at),
        job_id: "twice".into(),
        scheduled_at,
        trigger: Trigger::Schedule,
        pool: subjects::DEFAULT_POOL.into(),
        job_revision: 1,
        job: job.spec,
        shard: None,
        parent: None,
    };
    let payload = serde_json::to_vec(&event).expect("encode");
    let mut duplicates = Vec::new();
    for _ in 0..2 {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", event.run_id.as_str());
        let ack = stack
            .js
            .publish_with_headers(
                subjects::due_subject("default", "twice"),
                headers,
                payload.clone().into(),
            )
            .await
            .expect("publish")
            .await
            .expect("ack");
        duplicates.push(ack.duplicate);
    }
    assert_eq!(duplicates, [false, true]);

    let runs = stack
        .wait_for_runs("twice", "succeeded", 1, Duration::from_secs(20))
        .await;
    // Give a second delivery every chance to show up before counting.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs_after = stack.runs_of("twice").await;
    assert_eq!(runs_after.len(), 1, "{runs_after:?}");
    assert_eq!(runs[0]["run_id"], event.run_id.as_str());
    let (_, body) = stack.get(&format!("/v1/runs/{}", event.run_id)).await;
    assert_eq!(body["run"]["events"].as_array().expect("events").len(), 2);
    stack.stop().await;
}

#[tokio::test]
async fn two_tickers_fire_each_time_once() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    // A second ticker replica on the same bucket and stream.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let second = tokio::spawn(jetcron_ticker::run(
        jetcron_ticker::TickerConfig {
            leases: jetcron_testkit::fast_leases(),
            ..Default::default()
        },
        stack.nats.client().await,
        Arc::new(jetcron_core::clock::SystemClock),
        shutdown.clone(),
    ));
    let (reply, code) = stack
        .api_put(
            r#"{"id":"tick","schedule":"* * * * * *","target":{"type":"shell","command":"true"}}"#,
        )
        .await;
    assert_eq!(code, None, "{reply}");
    let runs = stack
        .wait_for_runs("tick", "succeeded", 4, Duration::from_secs(20))
        .await;
    shutdown.cancel();
    second.await.expect("join").expect("second ticker");
    let mut scheduled: Vec<DateTime<Utc>> =
        runs.iter().map(|r| instant(&r["scheduled_at"])).collect();
    scheduled.sort();
    let distinct: BTreeSet<_> = scheduled.iter().collect();
    assert_eq!(
        distinct.len(),
        scheduled.len(),
        "a fire ran twice: {scheduled:?}"
    );
    for pair in scheduled.windows(2) {
        assert_eq!(
            (pair[1] - pair[0]).num_milliseconds(),
            1000,
            "a fire is missing: {scheduled:?}"
        );
    }
    for run in &runs {
        assert_eq!(run["attempt"], 1);
    }
    stack.stop().await;
}

#[tokio::test]
async fn deleting_the_key_stops_the_job_within_a_second() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let due = record_due_events(&stack).await;
    let (_, code) = stack
        .api_put(r#"{"id":"doomed","schedule":"* * * * * *","target":{"type":"shell","command":"true"}}"#)
        .await;
    assert_eq!(code, None);
    stack
        .wait_for_runs("doomed", "succeeded", 2, Duration::from_secs(20))
        .await;
    stack.kv_delete("doomed").await;
    let deleted_at = Utc::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let fired: Vec<DateTime<Utc>> = due
        .lock()
        .expect("lock")
        .iter()
        .filter(|e| e.job_id == "doomed")
        .map(|e| e.scheduled_at)
        .collect();
    let late: Vec<String> = fired
        .iter()
        .filter(|t| **t > deleted_at + chrono::Duration::seconds(1))
        .map(|t| time_format::rfc3339_millis(*t))
        .collect();
    assert!(
        late.is_empty(),
        "fired after delete at {}: {late:?}",
        time_format::rfc3339_millis(deleted_at)
    );
    assert!(fired.len() >= 2);
    let (status, _) = stack.get("/v1/jobs/doomed").await;
    assert_eq!(status, 404);
    stack.stop().await;
}

#[tokio::test]
async fn invalid_definitions_in_the_bucket_are_not_scheduled() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let due = record_due_events(&stack).await;
    let bad: [(&str, &[u8]); 5] = [
        ("garbage", b"this is not json"),
        ("badcron", br#"{"schedule":"* * * *","target":{"type":"shell","command":"true"}}"#),
        ("mismatch", br#"{"id":"other","schedule":"* * * * * *","target":{"type":"shell","command":"true"}}"#),
        ("notarget", br#"{"schedule":"* * * * * *"}"#),
        ("binary", &[0xff, 0x00, 0xfe, 0x7b]),
    ];
    for (key, value) in bad {
        stack.kv_put(key, value).await;
    }
    // Past the definition limit, the bucket itself refuses the value.
    let huge = stack
        .jobs_bucket()
        .await
        .put("huge", vec![b' '; 70 * 1024].into())
        .await;
    assert!(huge.is_err(), "a 70 KiB value was stored");
    // The ticker is still alive and scheduling: a valid job put afterwards runs.
    let (_, code) = stack
        .api_put(r#"{"id":"canary","schedule":"* * * * * *","target":{"type":"shell","command":"true"}}"#)
        .await;
    assert_eq!(code, None);
    stack
        .wait_for_runs("canary", "succeeded", 2, Duration::from_secs(20))
        .await;
    let fired: BTreeSet<String> = due
        .lock()
        .expect("lock")
        .iter()
        .map(|e| e.job_id.clone())
        .collect();
    assert_eq!(fired, BTreeSet::from(["canary".to_string()]));

    // The gateway shows why a stored value is not scheduled.
    let (status, body) = stack.get("/v1/jobs/badcron").await;
    assert_eq!(status, 200);
    assert_eq!(body["job"]["valid"], false);
    assert_eq!(body["job"]["problems"][0]["field"], "schedule");
    assert_eq!(
        body["job"]["problems"][0]["message"],
        "expected 5, 6 or 7 fields, got 4"
    );
    assert_eq!(body["next_fires"].as_array().expect("list").len(), 0);

    // Fixing the value schedules it.
    stack
        .kv_put(
            "badcron",
            br#"{"schedule":"* * * * * *","target":{"type":"shell","command":"true"}}"#,
        )
        .await;
    stack
        .wait_for_runs("badcron", "succeeded", 1, Duration::from_secs(20))
        .await;
    stack.stop().await;
}
