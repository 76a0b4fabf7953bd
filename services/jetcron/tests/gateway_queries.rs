//! Every ClickHouse query of the gateway (`jetcron_gateway::sql::query_catalog`)
//! on both engines: the 18.16 server the harness runs and a current one
//! (chdb 26.x), over the same projected history, with the same answers. The
//! run list, which ClickHouse folds, says what a run's own page says when an
//! earlier attempt's events are stored after a later attempt's outcome.

use std::time::Duration;

use chrono::{DateTime, Utc};
use jetcron_core::{subjects, RunEvent, RunEventKind, RunId};
use jetcron_io::clickhouse_schema::ClickHouseOptions;
use jetcron_testkit::{instant, wait_until, Stack, StackOptions};
use serde_json::{json, Value};

/// Numbers as text: 18.16 quotes 64-bit integers in JSON, current versions not.
fn normalized(value: &Value) -> Value {
    match value {
        Value::Number(n) => Value::String(n.to_string()),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[tokio::test]
async fn every_gateway_query_answers_the_same_on_18_16_and_current_clickhouse() {
    let started = chrono::Utc::now() - chrono::Duration::minutes(1);
    let stack = Stack::start(StackOptions::with_shell()).await;
    for job in [
        r#"{"id":"fine","schedule":"@daily","target":{"type":"shell","command":"echo fine"}}"#,
        r#"{"id":"broken","schedule":"@daily","retry":{"max_attempts":2,"backoff":"100ms"},"target":{"type":"shell","command":"exit 7"}}"#,
    ] {
        let (reply, code) = stack.api_put(job).await;
        assert_eq!(code, None, "{reply}");
    }
    let mut broken_run = String::new();
    for (job, status) in [("fine", "succeeded"), ("broken", "failed")] {
        let (reply, _) = stack
            .api("jetcron.api.jobs.trigger", &format!(r#"{{"id":"{job}"}}"#))
            .await;
        let run_id = reply["run_id"].as_str().expect("run id").to_string();
        stack
            .wait_for_run_status(&run_id, status, Duration::from_secs(20))
            .await;
        broken_run = run_id;
    }
    stack
        .client
        .publish(
            "jetcron.api.jobs.put",
            r#"{"id":"broken","schedule":"often"}"#.into(),
        )
        .await
        .expect("publish");
    // A notification of the broken run given up, as an executor records it.
    let ended = stack
        .runs_stream_payloads("jetcron.runs.broken.failed")
        .await;
    let mut gave_up: Value =
        serde_json::from_slice(ended.last().expect("failed event")).expect("json");
    gave_up["kind"] = "notify_failed".into();
    gave_up["event_id"] = format!("{broken_run}:2:notify_failed:ops-mail").into();
    gave_up["error"] =
        "alert failed (firing) to channel \"ops-mail\" not delivered after 5 tries".into();
    stack
        .js
        .publish(
            "jetcron.runs.broken.notify_failed",
            gave_up.to_string().into(),
        )
        .await
        .expect("publish")
        .await
        .expect("stored");
    wait_until("history projected", Duration::from_secs(20), || async {
        let (_, r) = stack.get("/v1/rejections").await;
        let (_, runs) = stack.get("/v1/runs").await;
        let (_, stats) = stack.get("/v1/stats?job=broken").await;
        (r["rejections"].as_array().map_or(0, Vec::len) == 1
            && runs["runs"].as_array().map_or(0, Vec::len) == 2
            && stats["jobs"][0]["notifications_failed"] == 1)
            .then_some(())
    })
    .await;

    let client = ClickHouseOptions::new(stack.clickhouse.url()).client();
    let to = chrono::Utc::now() + chrono::Duration::minutes(1);
    let samples =
        jetcron_gateway::sql::query_catalog::samples(&client, "broken", &broken_run, started, to);
    let mut old = Vec::new();
    for (name, sql) in &samples {
        let text = stack.clickhouse_sql(&format!("{sql} FORMAT JSON")).await;
        let answer: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}: {text}"));
        old.push(answer);
    }
    let export = |table: &str| format!("SELECT * FROM {table} FORMAT JSONEachRow");
    let rows = json!({
        "jetcron.run_events": stack.clickhouse_sql(&export("jetcron.run_events")).await,
        "jetcron.job_events": stack.clickhouse_sql(&export("jetcron.job_events")).await,
    });
    let sqls: Vec<&str> = samples.iter().map(|(_, sql)| sql.as_str()).collect();
    let (version, current) = jetcron_testkit::chdb::run_on_chdb(rows, &sqls).await;
    assert!(version.starts_with("2"), "a current ClickHouse: {version}");
    let mut with_rows = 0;
    for (((name, sql), old), new) in samples.iter().zip(&old).zip(&current) {
        assert!(
            new.get("error").is_none(),
            "{name} on chdb {version}: {}\n{sql}",
            new["error"]
        );
        let names = |meta: &Value| -> Vec<String> {
            meta.as_array()
                .expect("meta")
                .iter()
                .map(|m| m["name"].as_str().expect("name").to_string())
                .collect()
        };
        let new_columns: Vec<String> = new["columns"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| c[0].as_str().expect("name").to_string())
            .collect();
        assert_eq!(names(&old["meta"]), new_columns, "{name}: columns");
        // Row order is part of the answer only where the outer query sorts.
        let ordered = sql
            .rfind(" ORDER BY ")
            .is_some_and(|at| at > sql.rfind(')').unwrap_or(0));
        let rows = |data: &Value| {
            let mut rows: Vec<String> = data
                .as_array()
                .expect("rows")
                .iter()
                .map(|r| normalized(r).to_string())
                .collect();
            if !ordered {
                rows.sort();
            }
            rows
        };
        assert_eq!(
            rows(&old["data"]),
            rows(&new["data"]),
            "{name}: rows on 18.16 and chdb {version}\n{sql}"
        );
        if old["data"].as_array().is_some_and(|d| !d.is_empty()) {
            with_rows += 1;
        }
    }
    // The history makes every query but the cursor page answer something.
    assert!(
        with_rows >= samples.len() - 1,
        "{with_rows} of {} queries had rows",
        samples.len()
    );
    stack.stop().await;
}

#[tokio::test]
async fn a_jobs_runs_page_with_a_cursor_and_bad_parameters_get_400s() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    stack
        .put_job(
            r#"{"id":"paged","schedule":"@daily","target":{"type":"shell","command":"echo page"}}"#,
        )
        .await;
    let mut triggered = Vec::new();
    for _ in 0..5 {
        let run_id = stack.trigger("paged").await;
        stack
            .wait_for_run_status(&run_id, "succeeded", Duration::from_secs(20))
            .await;
        triggered.push(run_id);
    }
    // Pages of two, newest first, until no next cursor: every run once.
    let mut seen = Vec::new();
    let mut path = "/v1/jobs/paged/runs?limit=2".to_string();
    let mut pages = 0;
    loop {
        let (status, page) = stack.get(&path).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        for run in page["runs"].as_array().expect("runs") {
            seen.push((
                jetcron_testkit::instant(&run["scheduled_at"]),
                run["run_id"].as_str().expect("run id").to_string(),
            ));
        }
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/jobs/paged/runs?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(pages, 3, "{seen:?}");
    let mut newest_first = seen.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen, newest_first, "pages are newest first");
    let mut ids: Vec<&str> = seen.iter().map(|(_, id)| id.as_str()).collect();
    ids.sort();
    let mut expected: Vec<&str> = triggered.iter().map(String::as_str).collect();
    expected.sort();
    assert_eq!(ids, expected, "every run exactly once");

    // The job's page names its last run. Its counts come from run_state,
    // which the materialized view writes after the run_events part the list
    // reads is already visible: under load they may trail by that write.
    let (status, job) = stack.get("/v1/jobs/paged").await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["last_run"]["run_id"], seen[0].1.as_str(), "{job}");
    assert_eq!(job["last_run"]["status"], "succeeded");
    wait_until(
        "the job page counts 5 runs",
        Duration::from_secs(10),
        || async {
            let (_, job) = stack.get("/v1/jobs/paged").await;
            (job["runs_24h"] == 5).then_some(())
        },
    )
    .await;

    for (path, field) in [
        ("/v1/jobs/paged/runs?cursor=garbage", "cursor"),
        ("/v1/jobs/paged/runs?limit=0", "limit"),
        ("/v1/runs/not-a-uuid", "run_id"),
        (
            "/v1/stats?from=2026-01-01T00:00:00Z&to=2026-06-01T00:00:00Z",
            "from",
        ),
        ("/v1/stats?from=yesterday", "from"),
        ("/v1/stats?job=a.b.c", "job"),
        ("/v1/runs?namespace=a.b", "namespace"),
        ("/v1/stats?window=1h", ""),
    ] {
        let (status, reply) = stack.get(path).await;
        assert_eq!(status, 400, "GET {path}: {reply}");
        let message = reply["error"]["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "GET {path}: {reply}");
        if !field.is_empty() {
            assert_eq!(reply["error"]["field"], field, "GET {path}: {reply}");
        }
    }
    stack.stop().await;
}

/// One run of the job `stalled`, whose events the test records as
/// executors do.
struct RecordedRun {
    run_id: RunId,
    scheduled_at: DateTime<Utc>,
}

impl RecordedRun {
    fn new(scheduled_at: DateTime<Utc>) -> Self {
        Self {
            run_id: RunId::for_fire("stalled", scheduled_at),
            scheduled_at,
        }
    }

    fn at(&self, seconds: i64) -> DateTime<Utc> {
        self.scheduled_at + chrono::Duration::seconds(seconds)
    }

    /// `started` of `attempt` by `executor`, `at` seconds after the
    /// scheduled time.
    fn started(&self, attempt: u32, executor: &str, at: i64) -> RunEvent {
        let at = self.at(at);
        RunEvent {
            max_attempts: 2,
            executor_id: executor.into(),
            target_type: "shell".into(),
            pool: "default".into(),
            started_at: Some(at),
            ..RunEvent::step(
                self.run_id.clone(),
                "stalled".into(),
                RunEventKind::Started,
                attempt,
                self.scheduled_at,
                at,
            )
        }
    }

    /// The outcome `kind` of `attempt`, which started `started` seconds
    /// after the scheduled time and ended `at` seconds after it.
    fn ended(
        &self,
        kind: RunEventKind,
        attempt: u32,
        executor: &str,
        started: i64,
        at: i64,
    ) -> RunEvent {
        let succeeded = kind == RunEventKind::Succeeded;
        RunEvent {
            kind,
            event_id: RunEvent::event_id_for(&self.run_id, None, attempt, kind),
            finished_at: Some(self.at(at)),
            duration_ms: Some((at - started) * 1000),
            exit_code: Some(if succeeded { 0 } else { 1 }),
            error: (!succeeded).then(|| "exit code 1".to_string()),
            at: self.at(at),
            ..self.started(attempt, executor, started)
        }
    }
}

/// Store `event` in `JETCRON_RUNS` as an executor would.
async fn record(stack: &Stack, event: &RunEvent) {
    stack
        .js
        .publish(
            subjects::run_event_subject(&event.job_id, event.kind.as_str()),
            serde_json::to_vec(event).expect("encode").into(),
        )
        .await
        .expect("publish")
        .await
        .expect("stored");
}

/// The run as `GET /v1/runs?job=stalled` lists it, once `ready` says so.
async fn listed(stack: &Stack, run_id: &RunId, ready: impl Fn(&Value) -> bool) -> Value {
    wait_until(
        &format!("run {run_id} listed"),
        Duration::from_secs(20),
        || async {
            let (_, page) = stack.get("/v1/runs?job=stalled").await;
            page["runs"]
                .as_array()?
                .iter()
                .find(|r| r["run_id"] == run_id.as_str() && ready(r))
                .cloned()
        },
    )
    .await
}

/// An executor that stalled (SIGSTOP) and woke could record a `started`
/// and a `retrying` of its attempt after another executor recorded the
/// next attempt's success. By time alone those stale events won in
/// ClickHouse, and the run list said `retrying` while the run's own page
/// said `succeeded`; a later attempt's events now win over an earlier
/// one's whatever their times, on 18.16 and on a current ClickHouse, and
/// with the view from before still folding beside the new one. A run of one
/// attempt is listed as before.
#[tokio::test]
async fn a_later_attempts_outcome_outlives_an_earlier_attempts_stale_events() {
    let stack = Stack::start(StackOptions {
        ticker: false,
        executor: false,
        ..Default::default()
    })
    .await;
    // Whole minutes, ten ago: in the list's default range, and every
    // instant exact in milliseconds.
    let now = Utc::now().timestamp();
    let scheduled = DateTime::from_timestamp(now - now % 60 - 600, 0).expect("instant");

    // One attempt: running, then succeeded.
    let once = RecordedRun::new(scheduled);
    record(&stack, &once.started(1, "e1", 1)).await;
    let row = listed(&stack, &once.run_id, |r| r["status"] == "running").await;
    let page = stack
        .wait_for_run_status(once.run_id.as_str(), "running", Duration::from_secs(10))
        .await;
    assert_eq!((&row["attempt"], &page["attempt"]), (&json!(1), &json!(1)));
    record(&stack, &once.ended(RunEventKind::Succeeded, 1, "e1", 1, 3)).await;
    let row = listed(&stack, &once.run_id, |r| r["status"] == "succeeded").await;
    let page = stack
        .wait_for_run_status(once.run_id.as_str(), "succeeded", Duration::from_secs(10))
        .await;
    for field in ["attempt", "executor_id", "duration_ms"] {
        assert_eq!(row[field], page[field], "{field}: {row}\n{page}");
    }
    assert_eq!(
        (&row["attempt"], &row["duration_ms"]),
        (&json!(1), &json!(2000))
    );

    // The view from before 2026-12-05 folds beside the new one, as on a
    // replicated install until it is dropped by hand: no answer changes.
    let view = jetcron_io::clickhouse_schema::MIGRATIONS
        .iter()
        .flat_map(|(_, sql)| jetcron_io::clickhouse_schema::statements(sql))
        .find(|s| s.starts_with("CREATE MATERIALIZED VIEW"))
        .expect("the view");
    let by_time = view
        .replace("run_state_mv_v3", "run_state_mv_v2")
        .replace("toInt64(attempt) * 35184372088832 + ", "");
    assert_eq!(by_time.matches("at_ms * 8").count(), 4, "{by_time}");
    stack.clickhouse_sql(&by_time).await;

    // Attempt 1 by e1, which stalls; attempt 2 by e2 succeeds; e1 wakes
    // and records its attempt again, later than all of that.
    let stalled = RecordedRun::new(scheduled + chrono::Duration::minutes(1));
    for event in [
        stalled.started(1, "e1", 1),
        stalled.started(2, "e2", 20),
        stalled.ended(RunEventKind::Succeeded, 2, "e2", 20, 21),
    ] {
        record(&stack, &event).await;
    }
    listed(&stack, &stalled.run_id, |r| r["status"] == "succeeded").await;
    record(&stack, &stalled.started(1, "e1", 29)).await;
    record(
        &stack,
        &stalled.ended(RunEventKind::Retrying, 1, "e1", 1, 30),
    )
    .await;
    // The retry counted: both stale events are folded (stored in order,
    // the later in the same insert as the earlier or after it).
    let row = listed(&stack, &stalled.run_id, |r| r["retries"] == 1).await;
    let page = stack
        .wait_for_run_status(
            stalled.run_id.as_str(),
            "succeeded",
            Duration::from_secs(10),
        )
        .await;
    // started#1 twice (one event id), started#2, succeeded#2, retrying#1.
    assert_eq!(page["events"].as_array().map(Vec::len), Some(4), "{page}");
    assert_eq!(row["status"], "succeeded", "{row}");
    for field in ["status", "attempt", "executor_id", "duration_ms"] {
        assert_eq!(row[field], page[field], "{field}: {row}\n{page}");
    }
    assert_eq!(
        (&row["attempt"], &row["executor_id"], &row["duration_ms"]),
        (&json!(2), &json!("e2"), &json!(1000)),
        "{row}"
    );
    assert_eq!(instant(&row["finished_at"]), stalled.at(21), "{row}");
    assert_eq!(instant(&page["finished_at"]), stalled.at(21), "{page}");
    assert!(row.get("error").is_none(), "{row}");
    let (_, succeeded) = stack.get("/v1/runs?job=stalled&status=succeeded").await;
    assert_eq!(
        succeeded["runs"].as_array().map(Vec::len),
        Some(2),
        "{succeeded}"
    );

    // The same fold on a current ClickHouse (the new view alone), over the
    // rows 18.16 holds.
    let runs = "SELECT run_id, status, attempt, executor_id, duration_ms FROM jetcron.runs \
                WHERE job_id = 'stalled' ORDER BY run_id";
    let on_18_16: Value =
        serde_json::from_str(&stack.clickhouse_sql(&format!("{runs} FORMAT JSON")).await)
            .expect("json");
    let rows = json!({
        "jetcron.run_events": stack
            .clickhouse_sql("SELECT * FROM jetcron.run_events FORMAT JSONEachRow")
            .await,
    });
    let (version, current) = jetcron_testkit::chdb::run_on_chdb(rows, &[runs]).await;
    assert_eq!(
        normalized(&current[0]["data"]),
        normalized(&on_18_16["data"]),
        "chdb {version}: {}",
        current[0]
    );
    let statuses: Vec<&Value> = on_18_16["data"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| &r["status"])
        .collect();
    assert_eq!(statuses, [&json!("succeeded"); 2], "{on_18_16}");
    stack.stop().await;
}
