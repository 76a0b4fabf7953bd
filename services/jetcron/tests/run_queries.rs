//! Reading history the way `curl` does: `GET /v1/runs` with filters and a
//! cursor that pages through every run exactly once, `GET /v1/stats` with
//! counts, percentiles and missed fires, and the `jetcron_missed_fires` gauge.
//! Every listed status agrees with the run's own event timeline. Missed fires
//! are also recorded as `fire.missed` rows in `jetcron.job_events`, once each.

use std::collections::BTreeSet;
use std::time::Duration;

use jetcron_testkit::{wait_until, Stack, StackOptions};
use serde_json::Value;

fn ids(runs: &Value) -> Vec<String> {
    runs["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["run_id"].as_str().expect("run_id").to_string())
        .collect()
}

#[tokio::test]
async fn runs_are_filtered_paged_with_a_cursor_and_agree_with_their_timelines() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    stack.put_job(r#"{"id":"ok-job","schedule":"@daily","target":{"type":"shell","command":"echo fine"}}"#,
    )
    .await;
    stack.put_job(r#"{"id":"bad-job","schedule":"@daily","retry":{"max_attempts":1},"target":{"type":"shell","command":"exit 7"}}"#).await;
    let mut ok_runs = Vec::new();
    for _ in 0..4 {
        ok_runs.push(stack.trigger("ok-job").await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bad_run = stack.trigger("bad-job").await;
    for run in &ok_runs {
        stack
            .wait_for_run_status(run, "succeeded", Duration::from_secs(20))
            .await;
    }
    stack
        .wait_for_run_status(&bad_run, "failed", Duration::from_secs(20))
        .await;
    // The list catches up with the projector's inserts. It reads
    // `jetcron.run_state`, which ClickHouse writes (materialized view) just
    // after the `run_events` a run's own page reads: for a moment a run's
    // page can show its outcome while the list still says running.
    wait_until(
        "runs listed with their outcomes",
        Duration::from_secs(10),
        || async {
            let (_, page) = stack.get("/v1/runs?limit=500").await;
            let runs = page["runs"].as_array()?;
            let ended = runs
                .iter()
                .filter(|r| r["status"] == "succeeded" || r["status"] == "failed")
                .count();
            (runs.len() == 5 && ended == 5).then_some(())
        },
    )
    .await;

    // Pages of two, following the cursor, give every run once, newest first.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/runs?limit=2&cursor={c}"),
            None => "/v1/runs?limit=2".to_string(),
        };
        let (status, page) = stack.get(&path).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        for run in page["runs"].as_array().expect("runs") {
            seen.push((
                run["scheduled_at"].as_str().expect("time").to_string(),
                run["run_id"].as_str().expect("id").to_string(),
                run["status"].as_str().expect("status").to_string(),
            ));
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let distinct: BTreeSet<_> = seen.iter().map(|s| s.1.clone()).collect();
    assert_eq!(distinct.len(), 5, "{seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0].0 >= w[1].0),
        "newest first: {seen:?}"
    );
    for (_, run_id, status) in &seen {
        let run = stack.run(run_id).await.expect("run");
        assert_eq!(run["status"].as_str(), Some(status.as_str()), "{run_id}");
    }

    let (_, failed) = stack.get("/v1/runs?status=failed").await;
    assert_eq!(ids(&failed), std::slice::from_ref(&bad_run));
    let listed = &failed["runs"][0];
    assert_eq!(listed["job_id"], "bad-job");
    assert!(
        listed["fire_lag_ms"].as_i64().is_some_and(|l| l >= 0),
        "{listed}"
    );
    let error = listed["error"].as_str().expect("error").to_string();
    let word = error
        .split_whitespace()
        .last()
        .expect("a word")
        .to_uppercase();
    let (_, searched) = stack.get(&format!("/v1/runs?q={word}")).await;
    assert_eq!(
        ids(&searched),
        std::slice::from_ref(&bad_run),
        "search {word:?} in {error:?}"
    );
    let (_, by_job) = stack
        .get("/v1/runs?job=ok-job&status=succeeded,failed&pool=default")
        .await;
    assert_eq!(ids(&by_job).len(), 4);
    let (_, none) = stack
        .get("/v1/runs?from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z")
        .await;
    assert_eq!(ids(&none).len(), 0);

    for (query, field) in [
        ("status=bogus", "status"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("cursor=123", "cursor"),
        ("from=yesterday", "from"),
        ("from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z", "from"),
        ("from=2025-01-01T00:00:00Z&to=2026-01-01T00:00:00Z", "from"),
        ("job=../etc", "job"),
        ("pool=a%20b", "pool"),
    ] {
        let (status, reply) = stack.get(&format!("/v1/runs?{query}")).await;
        assert_eq!(status, 400, "{query}: {reply}");
        assert_eq!(reply["error"]["field"], field, "{query}: {reply}");
    }
    let (status, _) = stack.get("/v1/runs?sql=1").await;
    assert_eq!(status, 400, "unknown parameters are refused");

    let (status, stats) = stack.get("/v1/stats?job=ok-job").await;
    assert_eq!(status, 200, "{stats}");
    let job = &stats["jobs"][0];
    assert_eq!(job["job_id"], "ok-job");
    assert_eq!(job["runs"], 4);
    assert_eq!(job["by_status"]["succeeded"], 4);
    assert_eq!(job["success_rate"], 1.0);
    assert!(job["duration_ms"]["p99"].as_i64().is_some(), "{job}");
    assert!(job["fire_lag_ms"]["p50"].as_i64().is_some(), "{job}");
    let (_, all) = stack.get("/v1/stats").await;
    let bad = all["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["job_id"] == "bad-job")
        .expect("bad-job")
        .clone();
    assert_eq!(bad["success_rate"], 0.0);
    assert_eq!(bad["by_status"]["failed"], 1);
    let (_, job) = stack.get("/v1/jobs/ok-job").await;
    assert_eq!(
        (job["runs_24h"].as_u64(), job["success_rate_24h"].as_f64()),
        (Some(4), Some(1.0)),
        "{job}"
    );
    stack.stop().await;
}

#[tokio::test]
async fn fires_nobody_ran_are_counted_as_missed_in_stats_and_metrics() {
    // The grace outlasts a served fire's way into ClickHouse on a loaded
    // machine (2 s fell short with the whole suite running).
    let options = StackOptions {
        limits: jetcron_gateway::limits::Limits {
            missed_grace: chrono::Duration::seconds(4),
            ..Default::default()
        },
        ..StackOptions::with_shell()
    };
    let stack = Stack::start(options).await;
    // Due every second in a pool no executor serves: every fire waits, so
    // past the grace each is missed. The served twin runs them all.
    stack.put_job(r#"{"id":"lonely","schedule":"* * * * * *","pool":"nobody","target":{"type":"shell","command":"true"}}"#).await;
    stack.put_job(r#"{"id":"served","schedule":"* * * * * *","target":{"type":"shell","command":"true"}}"#,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (status, stats) = stack.get("/v1/stats").await;
    assert_eq!(status, 200, "{stats}");
    let job = |id: &str| {
        stats["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .find(|j| j["job_id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} in {stats}"))
    };
    let lonely = job("lonely");
    let missed = lonely["missed_fires"].as_u64().expect("count");
    assert!((2..=5).contains(&missed), "{lonely}");
    assert_eq!(lonely["runs"], 0);
    assert_eq!(
        lonely["missed_examples"].as_array().map(Vec::len),
        Some(missed as usize)
    );
    assert_eq!(job("served")["missed_fires"], 0, "{stats}");

    let metrics = stack
        .http
        .get(format!("{}/metrics", stack.http_base))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let line = metrics
        .lines()
        .find(|l| l.starts_with("jetcron_missed_fires{job=\"lonely\"}"))
        .unwrap_or_else(|| panic!("{metrics}"));
    let gauge: u64 = line
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("value");
    assert!(gauge >= missed, "{line}");
    assert!(
        !metrics.contains("jetcron_missed_fires{job=\"served\"}"),
        "{metrics}"
    );
    stack.stop().await;
}

/// One `fire.missed` row of `jetcron.job_events`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct MissedRow {
    at_ms: i64,
    event_id: String,
    job_id: String,
    source: String,
    message: String,
}

/// Every `fire.missed` row as stored (no dedup: a repeat would show).
async fn missed_rows(stack: &Stack) -> Vec<MissedRow> {
    let text = stack
        .clickhouse_sql(
            "SELECT at_ms, event_id, job_id, source, message FROM jetcron.job_events \
             WHERE kind = 'fire.missed' ORDER BY at_ms, event_id FORMAT JSONEachRow",
        )
        .await;
    text.lines()
        .map(|line| {
            let row: Value = serde_json::from_str(line).expect("row");
            let text = |name: &str| row[name].as_str().expect(name).to_string();
            MissedRow {
                // Int64 is quoted in JSON formats by default.
                at_ms: row["at_ms"]
                    .as_i64()
                    .or_else(|| row["at_ms"].as_str().and_then(|s| s.parse().ok()))
                    .expect("at_ms"),
                event_id: text("event_id"),
                job_id: text("job_id"),
                source: text("source"),
                message: text("message"),
            }
        })
        .collect()
}

/// The Grafana panel's count of missed fires (dedup on `event_id`) between
/// two instants, with `$__fromTime`/`$__toTime` as Grafana expands them.
fn missed_panel_sql(from_s: i64, to_s: i64) -> String {
    MISSED_PANEL_SQL
        .replace("$__fromTime", &format!("toDateTime({from_s})"))
        .replace("$__toTime", &format!("toDateTime({to_s})"))
}

/// (event id, scheduled ms) of every `fire.missed` message stored in
/// `JETCRON_RUNS`, in stream order.
async fn stored_missed_fires(stack: &Stack) -> Vec<(String, i64)> {
    stack
        .runs_stream_payloads(jetcron_core::subjects::FIRE_MISSED_SUBJECT)
        .await
        .iter()
        .map(|payload| {
            let event: Value = serde_json::from_slice(payload).expect("json");
            assert_eq!(event["kind"], "fire.missed", "{event}");
            let id = event["event_id"].as_str().expect("event_id").to_string();
            let at = jetcron_testkit::instant(&event["scheduled_at"]);
            (id, at.timestamp_millis())
        })
        .collect()
}

const MISSED_PANEL_SQL: &str = "SELECT uniqExact(event_id) AS missed_fires\n\
    FROM jetcron.job_events\n\
    WHERE kind = 'fire.missed'\n  \
    AND at_ms >= toInt64(toUnixTimestamp($__fromTime)) * 1000\n  \
    AND at_ms < (toInt64(toUnixTimestamp($__toTime)) + 1) * 1000";

#[tokio::test]
async fn missed_fires_are_recorded_once_each_as_job_events() {
    // The grace must outlast the served job's fire-to-ClickHouse delay even
    // on a loaded machine (2 s was seen to fall short with 14 tests at once,
    // and 5 s for the served job's first fire in a fresh-clone CI run).
    let limits = jetcron_gateway::limits::Limits {
        missed_grace: chrono::Duration::seconds(10),
        missed_scan_interval: Duration::from_millis(300),
        ..Default::default()
    };
    let stack = Stack::start(StackOptions {
        limits: limits.clone(),
        ..StackOptions::with_shell()
    })
    .await;
    // A second gateway scans the same jobs: each fire is still stored once.
    let second_stop = tokio_util::sync::CancellationToken::new();
    let (_, second) = stack
        .another_gateway(Vec::new(), limits, second_stop.clone())
        .await;
    let written = chrono::Utc::now();
    // Due every second in a pool no executor serves; the served twin runs.
    stack.put_job(r#"{"id":"lonely","schedule":"* * * * * *","pool":"nobody","target":{"type":"shell","command":"true"}}"#).await;
    stack.put_job(r#"{"id":"served","schedule":"* * * * * *","target":{"type":"shell","command":"true"}}"#)
        .await;
    // And a refused definition: /v1/rejections lists it and no missed fire.
    stack
        .client
        .publish(
            "jetcron.api.jobs.put",
            r#"{"id":"lonely-typo","schedule":"never"}"#.into(),
        )
        .await
        .expect("publish");
    stack.client.flush().await.expect("flush");

    // The gateway applies the DDL once ClickHouse answers; wait for it.
    wait_until("jetcron.job_events exists", Duration::from_secs(20), || async {
        let n = stack
            .clickhouse_sql(
                "SELECT count() FROM system.tables WHERE database = 'jetcron' AND name = 'job_events'",
            )
            .await;
        (n.trim() == "1").then_some(())
    })
    .await;
    let first = wait_until("missed fires recorded", Duration::from_secs(40), || async {
        let rows = missed_rows(&stack).await;
        (rows.len() >= 4).then_some(rows)
    })
    .await;
    // Both gateways keep scanning (about ten scans each); then the job is
    // paused, so nothing new is expected and the history settles.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (reply, code) = stack
        .api("jetcron.api.jobs.pause", r#"{"id":"lonely"}"#)
        .await;
    assert_eq!(code, None, "{reply}");
    tokio::time::sleep(Duration::from_secs(1)).await;

    // JetStream stored each once: every message on the subject, read back.
    let stored = stored_missed_fires(&stack).await;
    let unique: BTreeSet<&str> = stored.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(unique.len(), stored.len(), "stored twice: {stored:?}");
    let rows = wait_until(
        "every stored fire projected",
        Duration::from_secs(20),
        || async {
            let rows = missed_rows(&stack).await;
            (rows.len() >= stored.len()).then_some(rows)
        },
    )
    .await;

    assert!(
        first.iter().all(|r| rows.contains(r)),
        "rows stay: {first:?}\n{rows:?}"
    );
    assert!(rows.len() > first.len(), "new fires kept being recorded");
    let ids: BTreeSet<&str> = rows.iter().map(|r| r.event_id.as_str()).collect();
    assert_eq!(ids.len(), rows.len(), "one row per fire: {rows:?}");
    assert_eq!(ids, unique, "the rows are the stored events");
    for row in &rows {
        assert_eq!(row.job_id, "lonely", "only the unserved job: {row:?}");
        let at = chrono::DateTime::from_timestamp_millis(row.at_ms).expect("at");
        let run_id = jetcron_core::events::RunId::for_fire("lonely", at);
        assert_eq!(row.event_id, format!("{}:fire.missed", run_id.as_str()));
        assert_eq!(row.source, "gateway");
        assert!(row.message.contains(run_id.as_str()), "{row:?}");
        assert!(at >= written - chrono::Duration::seconds(1), "{row:?}");
    }
    for (id, scheduled_ms) in &stored {
        assert!(
            rows.iter()
                .any(|r| &r.event_id == id && r.at_ms == *scheduled_ms),
            "at_ms is the scheduled time: {id}"
        );
    }
    // Every second from the first recorded time to the last: none skipped.
    let times: Vec<i64> = rows.iter().map(|r| r.at_ms).collect();
    assert!(
        times.windows(2).all(|w| w[1] - w[0] == 1000),
        "one per scheduled second: {times:?}"
    );

    // /v1/rejections shows the rejection only.
    let listed = wait_until("rejection listed", Duration::from_secs(20), || async {
        let (status, reply) = stack.get("/v1/rejections").await;
        let listed = reply["rejections"].as_array().cloned().unwrap_or_default();
        (status == 200 && !listed.is_empty()).then_some(listed)
    })
    .await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["job_id"], "lonely-typo");
    let (_, of_lonely) = stack.get("/v1/rejections?job=lonely").await;
    assert_eq!(
        of_lonely["rejections"],
        serde_json::json!([]),
        "{of_lonely}"
    );

    // The Grafana count, on 18.16 and on a current ClickHouse.
    let from_s = times[0] / 1000;
    let to_s = times[times.len() - 1] / 1000;
    let sql = missed_panel_sql(from_s, to_s);
    let old: Value =
        serde_json::from_str(&stack.clickhouse_sql(&format!("{sql} FORMAT JSON")).await)
            .expect("json");
    let counted = |answer: &Value| {
        let v = &answer["data"][0]["missed_fires"];
        v.as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .unwrap_or_else(|| panic!("{answer}"))
    };
    assert_eq!(counted(&old), times.len() as u64, "{sql}");
    let export = stack
        .clickhouse_sql("SELECT * FROM jetcron.job_events FORMAT JSONEachRow")
        .await;
    let (version, current) = jetcron_testkit::chdb::run_on_chdb(
        serde_json::json!({ "jetcron.job_events": export }),
        &[&sql],
    )
    .await;
    assert!(
        current[0].get("error").is_none(),
        "chdb {version}: {}",
        current[0]
    );
    assert_eq!(counted(&current[0]), times.len() as u64, "chdb {version}");

    second_stop.cancel();
    second.await.expect("join").expect("second gateway");
    stack.stop().await;
}

/// The value of the first sample of `name` whose labels include `labels`.
fn sample(metrics: &str, name: &str, labels: &[&str]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            (l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
                && labels.iter().all(|label| l.contains(label))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_count_fires_runs_projection_and_requests() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    stack.put_job(r#"{"id":"every-second","schedule":"* * * * * *","target":{"type":"shell","command":"true"}}"#).await;
    wait_until("three runs", Duration::from_secs(20), || async {
        let (_, runs) = stack
            .get("/v1/runs?job=every-second&status=succeeded")
            .await;
        (runs["runs"].as_array().map_or(0, Vec::len) >= 3).then_some(())
    })
    .await;
    let text = stack
        .http
        .get(format!("{}/metrics", stack.http_base))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let at_least = |name: &str, labels: &[&str], min: f64| {
        let value =
            sample(&text, name, labels).unwrap_or_else(|| panic!("{name} {labels:?} in:\n{text}"));
        assert!(value >= min, "{name} {labels:?} = {value} < {min}");
    };
    at_least("jetcron_fires_total", &[], 3.0);
    at_least("jetcron_fire_lag_seconds_count", &[], 3.0);
    at_least("jetcron_runs_total", &["status=\"succeeded\""], 3.0);
    at_least("jetcron_run_start_lag_seconds_count", &[], 3.0);
    at_least(
        "jetcron_attempt_duration_seconds_bucket",
        &["target=\"shell\"", "le=\"+Inf\""],
        3.0,
    );
    at_least("jetcron_projector_events_stored_total", &[], 6.0);
    at_least("jetcron_projector_batch_size_count", &[], 1.0);
    at_least(
        "jetcron_api_requests_total",
        &["endpoint=\"jobs.put\"", "result=\"ok\""],
        1.0,
    );
    at_least(
        "jetcron_http_requests_total",
        &["route=\"/v1/runs\"", "status=\"200\""],
        1.0,
    );
    at_least(
        "jetcron_http_request_duration_seconds_count",
        &["route=\"/v1/runs\""],
        1.0,
    );
    at_least(
        "jetcron_pool_pending_due_events",
        &["pool=\"default\""],
        0.0,
    );
    at_least("jetcron_projector_backlog", &[], 0.0);
    // One family per name: Prometheus refuses a scrape that repeats one.
    let mut families: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    let all = families.len();
    families.sort_unstable();
    families.dedup();
    assert_eq!(families.len(), all, "a metric family is repeated:\n{text}");
    stack.stop().await;
}

#[tokio::test]
async fn fires_are_not_called_missed_while_the_projector_is_behind() {
    let mut stack = Stack::start(StackOptions {
        projector: false,
        limits: jetcron_gateway::limits::Limits {
            missed_grace: chrono::Duration::seconds(2),
            ..Default::default()
        },
        ..StackOptions::with_shell()
    })
    .await;
    // The projector's consumer exists but nobody drains it: a projector
    // that stopped, with run events queued behind it.
    stack
        .js
        .get_stream(jetcron_core::subjects::RUNS_STREAM)
        .await
        .expect("runs stream")
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some(jetcron_core::subjects::PROJECTOR_CONSUMER.into()),
            ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .expect("projector consumer");
    stack.put_job(r#"{"id":"queued","schedule":"* * * * * *","target":{"type":"shell","command":"true"}}"#)
        .await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    // A job with no runs and nothing missed is not listed at all.
    let queued = |stats: &Value| {
        stats["jobs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|j| j["job_id"] == "queued"))
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"runs": 0, "missed_fires": 0}))
    };
    let missed = |stats: &Value| queued(stats)["missed_fires"].as_u64();
    // Every fire ran, but ClickHouse holds none of it yet: judged only up
    // to the oldest event not stored, nothing is missed.
    let (status, stats) = stack.get("/v1/stats?job=queued").await;
    assert_eq!(status, 200, "{stats}");
    assert_eq!(missed(&stats), Some(0), "{stats}");
    assert_eq!(queued(&stats)["runs"], 0, "nothing projected yet: {stats}");
    // Once the projector drains the queue the runs are there, still none missed.
    let mut config = jetcron_projector::ProjectorConfig::new(
        jetcron_io::clickhouse_schema::ClickHouseOptions::new(stack.clickhouse.url()),
    );
    config.batch_wait = Duration::from_millis(100);
    stack.spawn_projector(config).await;
    let stats = wait_until("runs projected", Duration::from_secs(20), || async {
        let (_, stats) = stack.get("/v1/stats?job=queued").await;
        (queued(&stats)["runs"].as_u64() >= Some(5)).then_some(stats)
    })
    .await;
    assert_eq!(missed(&stats), Some(0), "{stats}");
    stack.stop().await;
}

/// A scan judges the jobs that had fires in its window a batch at a time
/// (at most `MAX_STATS_JOBS` to one ClickHouse query, parsed a few hundred
/// at a time): with more unserved jobs than one batch holds, every one of
/// them still gets its missed fires recorded.
#[tokio::test]
async fn a_scan_over_more_jobs_than_one_batch_records_every_jobs_missed_fires() {
    let limits = jetcron_gateway::limits::Limits {
        missed_grace: chrono::Duration::seconds(2),
        missed_scan_interval: Duration::from_millis(500),
        ..Default::default()
    };
    let stack = Stack::start(StackOptions {
        limits,
        ..StackOptions::with_shell()
    })
    .await;
    let jobs = jetcron_gateway::runs::stats::MAX_STATS_JOBS + 300;
    for i in 0..jobs {
        stack
            .put_job(&format!(
                r#"{{"id":"unserved-{i:04}","schedule":"* * * * * *","pool":"nobody","target":{{"type":"shell","command":"true"}}}}"#
            ))
            .await;
    }
    let with_missed = wait_until(
        "every job's missed fires recorded",
        Duration::from_secs(90),
        || async {
            let text = stack
                .clickhouse_sql(
                    "SELECT uniqExact(job_id) FROM jetcron.job_events WHERE kind = 'fire.missed'",
                )
                .await;
            let n: usize = text.trim().parse().ok()?;
            (n >= jobs).then_some(n)
        },
    )
    .await;
    assert_eq!(with_missed, jobs, "only the jobs put");
}

/// The executor goes on when storing a run's `started` event fails (a
/// stream electing a leader); the outcome event carries the attempt's
/// start. The run list (`jetcron.runs`, folded by ClickHouse) then takes the
/// start from there, as the run's own page does, on 18.16 and on a current
/// ClickHouse alike; an install with the views from before is moved to the
/// new one.
#[tokio::test]
async fn a_run_whose_started_event_was_lost_lists_the_start_its_outcome_carries() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    stack
        .put_job(r#"{"id":"lost-start","schedule":"@daily","target":{"type":"shell","command":"echo fine"}}"#)
        .await;
    let run = stack.trigger("lost-start").await;
    stack
        .wait_for_run_status(&run, "succeeded", Duration::from_secs(20))
        .await;
    let outcomes = stack
        .runs_stream_payloads("jetcron.runs.lost-start.succeeded")
        .await;
    let mut outcome: Value = serde_json::from_slice(&outcomes[0]).expect("json");

    // The same outcome for a run an hour earlier whose `started` event
    // never reached the stream.
    let at = |field: &str, event: &Value| {
        chrono::DateTime::parse_from_rfc3339(event[field].as_str().expect(field))
            .expect(field)
            .with_timezone(&chrono::Utc)
    };
    let scheduled = at("scheduled_at", &outcome) - chrono::Duration::hours(1);
    let started = at("started_at", &outcome);
    let lost = jetcron_core::RunId::for_fire("lost-start", scheduled).to_string();
    let event_id = outcome["event_id"]
        .as_str()
        .expect("event_id")
        .replace(&run, &lost);
    outcome["run_id"] = lost.clone().into();
    outcome["event_id"] = event_id.into();
    outcome["scheduled_at"] = jetcron_core::time_format::rfc3339_millis(scheduled).into();
    stack
        .js
        .publish(
            "jetcron.runs.lost-start.succeeded",
            outcome.to_string().into(),
        )
        .await
        .expect("publish")
        .await
        .expect("stored");

    let listed = wait_until("both runs listed", Duration::from_secs(20), || async {
        let (_, page) = stack.get("/v1/runs?job=lost-start").await;
        let runs = page["runs"].as_array()?.clone();
        (runs.len() == 2).then_some(runs)
    })
    .await;
    let row = listed
        .iter()
        .find(|r| r["run_id"] == lost.as_str())
        .expect("the run without a started event");
    assert_eq!(row["status"], "succeeded", "{row}");
    assert_eq!(at("started_at", row), started, "{row}");
    assert_eq!(
        row["fire_lag_ms"],
        (started - scheduled).num_milliseconds(),
        "{row}"
    );
    let page = stack
        .wait_for_run_status(&lost, "succeeded", Duration::from_secs(10))
        .await;
    assert_eq!(
        at("started_at", &page),
        started,
        "the run's own page: {page}"
    );

    // The same fold on a current ClickHouse, over the rows 18.16 holds.
    let starts = format!(
        "SELECT run_id, first_started_ms, started_ms FROM jetcron.runs \
         WHERE job_id = 'lost-start' AND run_id = '{lost}'"
    );
    let rows = serde_json::json!({
        "jetcron.run_events": stack
            .clickhouse_sql("SELECT * FROM jetcron.run_events FORMAT JSONEachRow")
            .await,
    });
    let (version, current) = jetcron_testkit::chdb::run_on_chdb(rows, &[&starts]).await;
    let on_chdb = &current[0]["data"][0];
    for column in ["first_started_ms", "started_ms"] {
        let ms = on_chdb[column]
            .as_i64()
            .or_else(|| on_chdb[column].as_str().and_then(|s| s.parse().ok()));
        assert_eq!(
            ms,
            Some(started.timestamp_millis()),
            "{column} on chdb {version}: {}",
            current[0]
        );
    }

    // An install from before: its views are dropped by the migration, the
    // new one folds.
    let view = jetcron_io::clickhouse_schema::MIGRATIONS
        .iter()
        .flat_map(|(_, sql)| jetcron_io::clickhouse_schema::statements(sql))
        .find(|s| s.starts_with("CREATE MATERIALIZED VIEW"))
        .expect("the view");
    let views = "SELECT name FROM system.tables WHERE database = 'jetcron' \
                 AND engine = 'MaterializedView' ORDER BY name FORMAT TSV";
    for old in ["run_state_mv", "run_state_mv_v2"] {
        stack
            .clickhouse_sql(&view.replace("run_state_mv_v3", old))
            .await;
    }
    assert_eq!(
        stack.clickhouse_sql(views).await,
        "run_state_mv\nrun_state_mv_v2\nrun_state_mv_v3\n"
    );
    let client =
        jetcron_io::clickhouse_schema::ClickHouseOptions::new(stack.clickhouse.url()).client();
    jetcron_io::clickhouse_schema::apply(&client)
        .await
        .expect("migrate");
    assert_eq!(stack.clickhouse_sql(views).await, "run_state_mv_v3\n");
}
