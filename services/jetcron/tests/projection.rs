//! The projector under stress: ClickHouse killed for several ack waits
//! (nothing lost or doubled, the backlog visible, caught up afterwards), the
//! whole `JETCRON_RUNS` stream replayed by a second projector (no gateway
//! answer and no panel of the Grafana dashboards changes), and events it
//! cannot decode parked in the dead letter stream with a reason.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use jetcron_io::clickhouse_schema::ClickHouseOptions;
use jetcron_projector::ProjectorConfig;
use jetcron_testkit::{grafana, wait_until, Stack, StackOptions};
use serde_json::{json, Value};

/// The projector's ack wait in the outage test.
const ACK_WAIT: Duration = Duration::from_secs(3);

/// `curl <clickhouse>/?query=...`: the first column of every row.
async fn clickhouse_column(stack: &Stack, sql: &str) -> Vec<String> {
    let text = stack.clickhouse_sql(&format!("{sql} FORMAT TSV")).await;
    text.lines().map(str::to_string).collect()
}

#[tokio::test]
async fn clickhouse_down_past_the_ack_wait_loses_nothing_and_the_backlog_shows() {
    let mut stack = Stack::start(StackOptions {
        projector: false,
        ..StackOptions::with_shell()
    })
    .await;
    // A short ack wait, so the outage below outlasts it several times over and
    // the events of the batch that cannot be stored are handed out again
    // (as they would be in a real outage of minutes under the 2m default).
    let mut config = ProjectorConfig::new(ClickHouseOptions::new(stack.clickhouse.url()));
    config.batch_wait = Duration::from_millis(100);
    config.ack_wait = ACK_WAIT;
    stack.spawn_projector(config).await;
    let (reply, code) = stack
        .api_put(r#"{"id":"tick","schedule":"* * * * * *","misfire":"skip","target":{"type":"shell","command":"echo tick"}}"#)
        .await;
    assert_eq!(code, None, "{reply}");
    wait_until("first runs stored", Duration::from_secs(20), || async {
        let (_, runs) = stack.get("/v1/runs?job=tick").await;
        (runs["runs"].as_array().map_or(0, Vec::len) >= 2).then_some(())
    })
    .await;

    stack.clickhouse.kill();
    let down_since = std::time::Instant::now();
    // Runs go on without ClickHouse; their events wait in JetStream.
    let during = wait_until(
        "backlog while ClickHouse is down",
        Duration::from_secs(20),
        || async {
            let (status, ready) = stack.get("/readyz").await;
            (status == 503 && ready["projector_backlog"].as_u64().is_some_and(|b| b >= 10))
                .then_some(ready)
        },
    )
    .await;
    assert!(
        during["clickhouse"].as_str().is_some_and(|s| s != "ok"),
        "{during}"
    );
    // The gauge is sampled beside the projector's loop, which is stuck on a
    // batch it cannot store: it still moves during the outage.
    wait_until(
        "backlog gauge on /metrics while ClickHouse is down",
        Duration::from_secs(20),
        || async {
            let metrics = stack.get_text("/metrics").await;
            metrics
                .lines()
                .find_map(|l| l.strip_prefix("jetcron_projector_backlog "))
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|backlog| *backlog >= 10.0)
                .map(|_| ())
        },
    )
    .await;
    let outage = ACK_WAIT * 4;
    tokio::time::sleep(outage.saturating_sub(down_since.elapsed())).await;

    stack.clickhouse.restart();
    wait_until("caught up", Duration::from_secs(60), || async {
        let (status, ready) = stack.get("/readyz").await;
        (status == 200 && ready["projector_backlog"] == 0).then_some(())
    })
    .await;
    stack.kv_delete("tick").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_until("last events stored", Duration::from_secs(20), || async {
        let (_, ready) = stack.get("/readyz").await;
        (ready["projector_backlog"] == 0).then_some(())
    })
    .await;

    // Every event in the stream is in ClickHouse, once per event id.
    let in_stream: BTreeSet<String> = stack
        .run_events("tick")
        .await
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    let stored: BTreeSet<String> = clickhouse_column(
        &stack,
        "SELECT DISTINCT event_id FROM jetcron.run_events WHERE job_id = 'tick'",
    )
    .await
    .into_iter()
    .collect();
    assert!(in_stream.len() >= 20, "{} events", in_stream.len());
    assert_eq!(stored, in_stream);
    // And the runs of the outage are there, without a gap of scheduled seconds.
    let (_, runs) = stack.get("/v1/runs?job=tick&limit=500").await;
    let mut seconds: Vec<i64> = runs["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| jetcron_testkit::instant(&r["scheduled_at"]).timestamp())
        .collect();
    seconds.sort();
    assert!(seconds.windows(2).all(|w| w[1] - w[0] == 1), "{seconds:?}");
    assert!(seconds.len() >= 8, "{seconds:?}");
    stack.stop().await;
}

/// Everything a user reads, with explicit ranges so "now" does not move it.
async fn answers(stack: &Stack, run_ids: &[String]) -> Vec<Value> {
    let day = |offset: i64| {
        (chrono::Utc::now() + chrono::Duration::days(offset)).format("%Y-%m-%dT00:00:00Z")
    };
    let mut all = Vec::new();
    for path in [
        format!("/v1/runs?from={}&to={}&limit=500", day(-30), day(1)),
        format!("/v1/stats?from={}&to={}", day(-20), day(1)),
        "/v1/jobs/steady/runs?limit=500".to_string(),
        "/v1/jobs/flaky/runs?limit=500".to_string(),
        "/v1/rejections".to_string(),
    ] {
        let (status, body) = stack.get(&path).await;
        assert_eq!(status, 200, "{path}: {body}");
        all.push(body);
    }
    for run_id in run_ids {
        all.push(stack.run(run_id).await.expect("run"));
    }
    for sql in [
        "SELECT status, count() FROM jetcron.runs GROUP BY status ORDER BY status",
        "SELECT job_id, last_status, runs FROM jetcron.job_state ORDER BY job_id",
        "SELECT count(), uniqExact(event_id) FROM jetcron.run_events",
    ] {
        all.push(Value::from(clickhouse_column(stack, sql).await));
    }
    all
}

/// What every panel of both Grafana dashboards shows over `from`..`to`, as
/// Grafana runs it (for every value of `$job`): (label, SQL, rows).
async fn dashboard_answers(
    stack: &Stack,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<(String, String, Vec<Value>)> {
    let queries = grafana::panel_queries(stack, &grafana::dashboards(), from, to).await;
    let answers = grafana::run_panels(stack, &queries).await;
    queries
        .into_iter()
        .zip(answers)
        .map(|(q, a)| (q.label, q.sql, a.rows))
        .collect()
}

#[tokio::test]
async fn replaying_the_whole_stream_changes_no_answer() {
    let started = Utc::now();
    let mut stack = Stack::start(StackOptions::with_shell()).await;
    for job in [
        r#"{"id":"steady","schedule":"@daily","target":{"type":"shell","command":"echo ok"}}"#,
        r#"{"id":"flaky","schedule":"@daily","retry":{"max_attempts":2,"backoff":"100ms"},"target":{"type":"shell","command":"exit 1"}}"#,
    ] {
        let (reply, code) = stack.api_put(job).await;
        assert_eq!(code, None, "{reply}");
    }
    let mut run_ids = Vec::new();
    for (job, status) in [
        ("steady", "succeeded"),
        ("steady", "succeeded"),
        ("flaky", "failed"),
    ] {
        let (reply, _) = stack
            .api("jetcron.api.jobs.trigger", &format!(r#"{{"id":"{job}"}}"#))
            .await;
        let run_id = reply["run_id"].as_str().expect("run id").to_string();
        stack
            .wait_for_run_status(&run_id, status, Duration::from_secs(20))
            .await;
        run_ids.push(run_id);
    }
    stack
        .client
        .publish(
            "jetcron.api.jobs.put",
            r#"{"id":"oops","schedule":"nope"}"#.into(),
        )
        .await
        .expect("publish");
    wait_until("rejection stored", Duration::from_secs(20), || async {
        let (_, r) = stack.get("/v1/rejections").await;
        (r["rejections"].as_array().map_or(0, Vec::len) == 1).then_some(())
    })
    .await;
    let (_, ready) = stack.get("/readyz").await;
    assert_eq!(ready["projector_backlog"], 0, "{ready}");
    let before = answers(&stack, &run_ids).await;
    let (from, to) = (
        started - chrono::Duration::minutes(5),
        Utc::now() + chrono::Duration::minutes(1),
    );
    let panels_before = dashboard_answers(&stack, from, to).await;
    // The dashboards show this history: the job picker and the rejection.
    let shown = |label: &str, column: &str| -> Vec<Value> {
        let (_, _, rows) = panels_before
            .iter()
            .find(|(l, _, _)| l == label)
            .unwrap_or_else(|| panic!("no panel {label}"));
        rows.iter().map(|r| r[column].clone()).collect()
    };
    assert_eq!(
        shown("jetcron-job.json: variable job", "job_id"),
        [json!("flaky"), json!("oops"), json!("steady")]
    );
    assert_eq!(
        shown("jetcron-overview.json: Recent rejections (A)", "job_id"),
        [json!("oops")]
    );
    let with_rows = panels_before.iter().filter(|(_, _, r)| !r.is_empty());
    assert!(with_rows.count() >= 20, "most panels show something");

    let inserted_before = inserted_rows(&stack).await;
    let mut replay =
        jetcron_projector::ProjectorConfig::new(ClickHouseOptions::new(stack.clickhouse.url()));
    replay.consumer = "projector-replay".into();
    replay.batch_wait = Duration::from_millis(100);
    stack.spawn_projector(replay).await;
    let js = stack.js.clone();
    // (events the replay acked, events in the stream)
    let (acked, in_stream) = wait_until("replay done", Duration::from_secs(30), || async {
        let mut stream = js.get_stream("JETCRON_RUNS").await.ok()?;
        let last = stream.info().await.ok()?.state.last_sequence;
        let mut consumer: async_nats::jetstream::consumer::PullConsumer =
            stream.get_consumer("projector-replay").await.ok()?;
        let info = consumer.info().await.ok()?;
        (info.num_pending == 0 && info.num_ack_pending == 0 && info.delivered.stream_sequence > 0)
            .then_some((info.ack_floor.stream_sequence, last))
    })
    .await;
    let after = answers(&stack, &run_ids).await;
    // The replay stored every event again: it acked them all, and ClickHouse
    // counted the rows inserted. The raw row count shows it only until
    // ReplacingMergeTree merges the copies away (CI saw 8 → 8 once).
    assert_eq!(acked, in_stream, "the replay acked every event");
    let (raw_before, raw_after) = (&before[before.len() - 1], &after[after.len() - 1]);
    let (count_before, distinct_before) = split_counts(raw_before);
    let (count_after, distinct_after) = split_counts(raw_after);
    let inserted = inserted_rows(&stack).await - inserted_before;
    assert!(
        inserted >= count_before && count_after >= count_before,
        "replayed rows: {raw_before} → {raw_after}, {inserted} rows inserted"
    );
    assert_eq!(distinct_before, distinct_after);
    // Nothing a user reads changed, in the gateway or in Grafana.
    assert_eq!(before[..before.len() - 1], after[..after.len() - 1]);
    let panels_after = dashboard_answers(&stack, from, to).await;
    assert_eq!(panels_before.len(), panels_after.len());
    for (panel, replayed) in panels_before.iter().zip(&panels_after) {
        assert_eq!(panel, replayed, "{} changed by the replay", panel.0);
    }
    stack.stop().await;
}

/// Rows ClickHouse has inserted since it started (all tables).
async fn inserted_rows(stack: &Stack) -> u64 {
    clickhouse_column(
        stack,
        "SELECT value FROM system.events WHERE event = 'InsertedRows'",
    )
    .await
    .first()
    .and_then(|v| v.parse().ok())
    .unwrap_or(0)
}

/// "count\tdistinct" of the raw-rows query.
fn split_counts(value: &Value) -> (u64, u64) {
    let line = value[0].as_str().expect("one line");
    let mut parts = line.split('\t').map(|p| p.parse::<u64>().expect("number"));
    (
        parts.next().expect("count"),
        parts.next().expect("distinct"),
    )
}

#[tokio::test]
async fn undecodable_events_are_parked_with_a_reason_and_the_rest_goes_on() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    stack
        .js
        .publish("jetcron.runs.poisoned.started", "{not a run event".into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    let (reply, code) = stack
        .api_put(r#"{"id":"after","schedule":"@daily","target":{"type":"shell","command":"echo after"}}"#)
        .await;
    assert_eq!(code, None, "{reply}");
    let (reply, _) = stack
        .api("jetcron.api.jobs.trigger", r#"{"id":"after"}"#)
        .await;
    let run_id = reply["run_id"].as_str().expect("run id").to_string();
    stack
        .wait_for_run_status(&run_id, "succeeded", Duration::from_secs(20))
        .await;

    let parked = stack
        .js
        .get_stream("JETCRON_DEADLETTER")
        .await
        .expect("dead letter stream");
    let consumer = parked
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig::default())
        .await
        .expect("reader");
    let mut messages = consumer.messages().await.expect("messages");
    let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
        .await
        .expect("a parked event")
        .expect("message")
        .expect("ok");
    assert_eq!(
        message.subject.as_str(),
        "jetcron.deadletter.jetcron.runs.poisoned.started"
    );
    assert_eq!(&message.payload[..], b"{not a run event");
    let headers = message.headers.clone().expect("headers");
    let reason = headers
        .get("Jetcron-Dead-Letter-Reason")
        .expect("reason")
        .as_str()
        .to_string();
    assert!(reason.starts_with("not a run event"), "{reason}");
    assert_eq!(
        headers.get("Jetcron-Original-Subject").map(|v| v.as_str()),
        Some("jetcron.runs.poisoned.started")
    );
    // Acks follow the insert, so the backlog reaches 0 a moment after the
    // rows are queryable; a poison event retried forever would keep it above.
    wait_until(
        "backlog drained: parked, not retried",
        Duration::from_secs(10),
        || async {
            let (_, ready) = stack.get("/readyz").await;
            (ready["projector_backlog"] == 0).then_some(())
        },
    )
    .await;
    let metrics = stack.get_text("/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|line| line == "jetcron_projector_events_parked_total 1"),
        "parked counter: {metrics}"
    );
    stack.stop().await;
}

/// Publish a `started` event of attempt `n` of a run of `job_id`, as an
/// executor does, and wait until it is stored.
async fn publish_started(stack: &Stack, job_id: &str, n: u32) {
    stack
        .js
        .publish(
            jetcron_core::subjects::run_event_subject(job_id, "started"),
            run_event(job_id, n).into(),
        )
        .await
        .expect("publish")
        .await
        .expect("stored");
}

/// A run event as an executor publishes it (the fields the projector reads).
fn run_event(job_id: &str, n: u32) -> Vec<u8> {
    let scheduled_at = Utc::now();
    let run_id = jetcron_core::RunId::for_fire(job_id, scheduled_at);
    let event = json!({
        "event_id": format!("{}:{n}:started", run_id.as_str()),
        "run_id": run_id.as_str(),
        "job_id": job_id,
        "kind": "started",
        "trigger": "schedule",
        "scheduled_at": jetcron_core::time_format::rfc3339_millis(scheduled_at),
        "attempt": n,
        "max_attempts": 10,
        "executor_id": "test",
        "target_type": "nats",
        "pool": "default",
        "at": jetcron_core::time_format::rfc3339_millis(scheduled_at),
    });
    let bytes = serde_json::to_vec(&event).expect("json");
    serde_json::from_slice::<jetcron_core::RunEvent>(&bytes).expect("a run event");
    bytes
}

/// A projector asked to stop reads the batch it has open to its end, so the
/// events the server hands that batch meanwhile are in ClickHouse when it
/// exits. Before, it dropped the batch at once: the server had handed those
/// events out already, so the stopping projector's last fetch did not get
/// them, and they waited out the ack wait for the next start (three run
/// events of a `jetcron all` stopped mid-load were missing in one CI run).
#[tokio::test]
async fn a_stopping_projector_stores_what_its_open_batch_still_receives() {
    let stack = Stack::start(StackOptions {
        projector: false,
        ..StackOptions::api_only()
    })
    .await;
    let mut config = ProjectorConfig::new(ClickHouseOptions::new(stack.clickhouse.url()));
    config.consumer = "stopping".into();
    config.batch_wait = Duration::from_secs(5);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let projector = tokio::spawn(jetcron_projector::run(
        config,
        stack.nats.client().await,
        shutdown.clone(),
    ));
    // One event through. A batch is stored once it ends, and the next one
    // opens as it is stored: once the event is in ClickHouse the projector
    // waits in a batch with most of its 5 s ahead.
    publish_started(&stack, "stopping", 1).await;
    let count = || async {
        stack
            .clickhouse_sql("SELECT count() FROM jetcron.run_events WHERE job_id = 'stopping'")
            .await
            .trim()
            .parse::<u64>()
            .unwrap_or(0)
    };
    wait_until(
        "the first event stored",
        Duration::from_secs(30),
        || async { (count().await == 1).then_some(()) },
    )
    .await;

    shutdown.cancel();
    // Past the stopping projector's last fetch, had it dropped its batch.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for n in 2..=6 {
        publish_started(&stack, "stopping", n).await;
    }
    tokio::time::timeout(Duration::from_secs(20), projector)
        .await
        .expect("the projector stops")
        .expect("joined")
        .expect("stopped cleanly");
    assert_eq!(
        count().await,
        6,
        "every event published before the projector exited is in ClickHouse"
    );
    stack.stop().await;
}
