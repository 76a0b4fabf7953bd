//! Chains, as a user builds them with `nats req jetcron.api.jobs.put`:
//! `load` runs after `extract` succeeds, `cleanup` after it fails, `report`
//! after `load` whatever its end; each chained run calls its target once,
//! carrying its parent run, with two executors sharing the work and a run's
//! end seen twice. Cycles are refused at put with the cycle named; a paused
//! or deleted parent shows on the child.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::context::ConsumerInfoErrorKind;
use futures::StreamExt as _;
use jetcron_testkit::{test_executor_config, wait_until, Stack, StackOptions};
use serde_json::Value;

/// One call of a target: its job (the subject's last token) and headers.
#[derive(Debug, Clone)]
struct Call {
    job: String,
    headers: BTreeMap<String, String>,
    body: Value,
}

type Calls = Arc<Mutex<Vec<Call>>>;

/// Answer `svc.chain.<job>`: "ok", or a service error when the request's
/// job (or `job#shard`) is in `failing`.
async fn serve(stack: &Stack, failing: Arc<Mutex<Vec<String>>>) -> Calls {
    let calls: Calls = Arc::default();
    let mut requests = stack
        .client
        .subscribe("svc.chain.*")
        .await
        .expect("subscribe");
    let client = stack.client.clone();
    let recorded = calls.clone();
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let job = request.subject.as_str().trim_start_matches("svc.chain.");
            let headers = request
                .headers
                .iter()
                .flat_map(|h| h.iter())
                .map(|(name, values)| {
                    let value = values.first().map(|v| v.as_str()).unwrap_or_default();
                    (name.to_string(), value.to_string())
                })
                .collect();
            recorded.lock().expect("calls").push(Call {
                job: job.to_string(),
                headers,
                body: serde_json::from_slice(&request.payload).unwrap_or(Value::Null),
            });
            // `job`, or `job#k` for shard k of a sharded job.
            let shard = request
                .headers
                .as_ref()
                .and_then(|h| h.get("Jetcron-Shard"))
                .map(|v| format!("{job}#{}", v.as_str()));
            let fail = failing
                .lock()
                .expect("failing")
                .iter()
                .any(|f| f == job || Some(f) == shard.as_ref());
            if let Some(reply) = request.reply {
                let mut headers = async_nats::HeaderMap::new();
                if fail {
                    headers.insert(async_nats::service::NATS_SERVICE_ERROR_CODE, "500");
                    headers.insert(async_nats::service::NATS_SERVICE_ERROR, "extract broke");
                }
                let _ = client
                    .publish_with_headers(reply, headers, "ok".into())
                    .await;
            }
        }
    });
    calls
}

fn calls_of(calls: &Calls, job: &str) -> Vec<Call> {
    calls
        .lock()
        .expect("calls")
        .iter()
        .filter(|c| c.job == job)
        .cloned()
        .collect()
}

fn job(id: &str, extra: &str) -> String {
    format!(
        r#"{{"id":"{id}","target":{{"type":"nats","subject":"svc.chain.{id}"}},"retry":{{"max_attempts":1}}{extra}}}"#
    )
}

/// Wait until `job`'s target was called `count` times, then a little longer
/// to see that no more calls come.
async fn exactly(calls: &Calls, job: &str, count: usize) -> Vec<Call> {
    wait_until(
        &format!("{count} calls of {job}"),
        Duration::from_secs(30),
        || async { (calls_of(calls, job).len() >= count).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen = calls_of(calls, job);
    assert_eq!(seen.len(), count, "{job}: {seen:#?}");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chained_jobs_run_once_per_parent_run_with_their_parent() {
    let mut stack = Stack::start(StackOptions::default()).await;
    stack
        .spawn_executor(test_executor_config("second", false))
        .await;
    let failing: Arc<Mutex<Vec<String>>> = Arc::default();
    let calls = serve(&stack, failing.clone()).await;

    // extract has its own schedule (far away: it runs when triggered here);
    // the others have none, only parents.
    stack
        .put_job(&job("extract", r#","schedule":"0 0 0 1 1 * 2090""#))
        .await;
    stack
        .put_job(&job(
            "load",
            r#","after":[{"job":"extract","on":"success"}]"#,
        ))
        .await;
    stack
        .put_job(&job(
            "cleanup",
            r#","after":[{"job":"extract","on":"failure"}]"#,
        ))
        .await;
    stack
        .put_job(&job(
            "report",
            r#","after":[{"job":"load","on":"completed"}]"#,
        ))
        .await;

    // The relations, as GET /v1/jobs/{id} shows them.
    let (_, extract) = stack.get("/v1/jobs/extract").await;
    let children: Vec<(&str, &str)> = extract["children"]
        .as_array()
        .expect("children")
        .iter()
        .map(|c| {
            (
                c["job"].as_str().unwrap_or(""),
                c["on"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        children,
        [("cleanup", "failure"), ("load", "success")],
        "{extract}"
    );
    let (_, load) = stack.get("/v1/jobs/load").await;
    assert_eq!(load["parents"][0]["job"], "extract", "{load}");
    assert_eq!(load["parents"][0]["state"], "active", "{load}");
    assert_eq!(load["next_fires"], serde_json::json!([]), "{load}");
    assert_eq!(load["children"][0]["job"], "report", "{load}");

    // A run of extract that succeeds starts load, which starts report.
    let parent_run = stack.trigger("extract").await;
    let load_calls = exactly(&calls, "load", 1).await;
    let headers = &load_calls[0].headers;
    assert_eq!(headers["Jetcron-Parent-Run-Id"], parent_run);
    assert_eq!(headers["Jetcron-Parent-Job-Id"], "extract");
    assert_eq!(headers["Jetcron-Parent-Status"], "succeeded");
    assert_eq!(load_calls[0].body["parent"]["run_id"], parent_run.as_str());
    let load_run = headers["Jetcron-Run-Id"].clone();
    let report_calls = exactly(&calls, "report", 1).await;
    assert_eq!(report_calls[0].headers["Jetcron-Parent-Run-Id"], load_run);
    assert!(calls_of(&calls, "cleanup").is_empty());

    // The chained run's detail names its parent (from ClickHouse).
    let run = stack
        .wait_for_run_status(&load_run, "succeeded", Duration::from_secs(30))
        .await;
    assert_eq!(run["trigger"], "chain", "{run}");
    assert_eq!(run["parent_run_id"], parent_run.as_str(), "{run}");
    assert_eq!(run["parent_job_id"], "extract", "{run}");
    let html = stack.get_text(&format!("/ui/runs/{load_run}")).await;
    assert!(
        html.contains(&format!("/ui/runs/{parent_run}")),
        "the console links the parent run"
    );

    // The parent's end seen again (an executor that died before its ack,
    // here: the same event stored a second time): no second run.
    let ended = stack
        .runs_stream_payloads("jetcron.runs.extract.succeeded")
        .await;
    let again = ended.last().expect("extract's succeeded event").clone();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", "replayed-end-of-extract");
    stack
        .js
        .publish_with_headers("jetcron.runs.extract.succeeded", headers, again)
        .await
        .expect("publish")
        .await
        .expect("stored");
    // Seen again (the consumer started the same run id: a duplicate), and
    // still one run.
    wait_until(
        "the replayed end handled",
        Duration::from_secs(30),
        || async {
            let metrics = stack.get_text("/metrics").await;
            metrics
                .lines()
                .any(|l| l == r#"jetcron_chained_runs_total{result="duplicate"} 1"#)
                .then_some(())
        },
    )
    .await;
    exactly(&calls, "load", 1).await;

    // A run of extract that fails starts cleanup, not load.
    failing.lock().expect("failing").push("extract".into());
    let failed_run = stack.trigger("extract").await;
    let cleanup_calls = exactly(&calls, "cleanup", 1).await;
    assert_eq!(
        cleanup_calls[0].headers["Jetcron-Parent-Run-Id"],
        failed_run
    );
    assert_eq!(cleanup_calls[0].headers["Jetcron-Parent-Status"], "failed");
    exactly(&calls, "load", 1).await;
    failing.lock().expect("failing").clear();

    // A paused child does not start; a paused or deleted parent shows on it.
    let (reply, code) = stack
        .api("jetcron.api.jobs.pause", r#"{"id":"load"}"#)
        .await;
    assert_eq!(code, None, "{reply}");
    stack.trigger("extract").await;
    exactly(&calls, "extract", 3).await;
    exactly(&calls, "load", 1).await;
    let (reply, code) = stack
        .api("jetcron.api.jobs.pause", r#"{"id":"extract"}"#)
        .await;
    assert_eq!(code, None, "{reply}");
    let (_, load) = stack.get("/v1/jobs/load").await;
    assert_eq!(load["parents"][0]["state"], "paused", "{load}");
    let (reply, code) = stack
        .api("jetcron.api.jobs.delete", r#"{"id":"extract"}"#)
        .await;
    assert_eq!(code, None, "{reply}");
    let (_, load) = stack.get("/v1/jobs/load").await;
    assert_eq!(load["parents"][0]["state"], "missing", "{load}");
    let page = stack.get_text("/ui/jobs/load").await;
    assert!(page.contains("this parent does not exist"), "{page}");
    stack.stop().await;
}

#[tokio::test]
async fn a_sharded_parent_starts_its_child_once_when_every_shard_ended() {
    let stack = Stack::start(StackOptions::default()).await;
    let failing: Arc<Mutex<Vec<String>>> = Arc::default();
    let calls = serve(&stack, failing.clone()).await;
    stack
        .put_job(&job(
            "split",
            r#","schedule":"0 0 0 1 1 * 2090","shards":3"#,
        ))
        .await;
    stack
        .put_job(&job("merge", r#","after":[{"job":"split"}]"#))
        .await;
    stack
        .put_job(&job("mend", r#","after":[{"job":"split","on":"failure"}]"#))
        .await;
    let parent_run = stack.trigger("split").await;
    exactly(&calls, "split", 3).await;
    let merged = exactly(&calls, "merge", 1).await;
    assert_eq!(merged[0].headers["Jetcron-Parent-Run-Id"], parent_run);
    // One shard fails: the run failed, though two shards ended well, so
    // only the failure's child starts (a shard's end is not the run's).
    failing.lock().expect("failing").push("split#2".into());
    let failed_run = stack.trigger("split").await;
    exactly(&calls, "split", 6).await;
    let mended = exactly(&calls, "mend", 1).await;
    assert_eq!(mended[0].headers["Jetcron-Parent-Run-Id"], failed_run);
    assert_eq!(mended[0].headers["Jetcron-Parent-Status"], "failed");
    exactly(&calls, "merge", 1).await;
    stack.stop().await;
}

/// Whether the executors' consumer of run endings exists.
async fn chains_consumer_exists(stack: &Stack) -> bool {
    let runs = stack
        .js
        .get_stream(jetcron_core::subjects::RUNS_STREAM)
        .await
        .expect("runs stream");
    match runs
        .consumer_info(jetcron_core::subjects::CHAINS_CONSUMER)
        .await
    {
        Ok(_) => true,
        Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => false,
        Err(e) => panic!("consumer info: {e}"),
    }
}

/// While no job names a parent, run endings are not delivered to the
/// executors at all (no consumer reads them); the first chained job makes
/// the consumer, and a parent run triggered right after its child was
/// written (no wait for the executors to see it) starts the child once.
#[tokio::test]
async fn run_endings_are_read_only_once_a_job_names_a_parent() {
    let stack = Stack::start(StackOptions::default()).await;
    let calls = serve(&stack, Arc::default()).await;
    stack
        .put_job(&job("solo", r#","schedule":"0 0 0 1 1 * 2090""#))
        .await;
    stack.trigger("solo").await;
    exactly(&calls, "solo", 1).await;
    assert!(
        !chains_consumer_exists(&stack).await,
        "no job names a parent, yet run endings are delivered"
    );
    // Well past the 2 s the consumer reaches back before the first chain.
    tokio::time::sleep(Duration::from_secs(3)).await;

    stack
        .put_job(&job("first", r#","schedule":"0 0 0 1 1 * 2090""#))
        .await;
    stack
        .put_job(&job("then", r#","after":[{"job":"first"}]"#))
        .await;
    let parent_run = stack.trigger("first").await;
    let started = exactly(&calls, "then", 1).await;
    assert_eq!(started[0].headers["Jetcron-Parent-Run-Id"], parent_run);
    assert!(chains_consumer_exists(&stack).await);
    // Made from 2 s before the child was written: solo's ending (5 s
    // earlier) is not among what it delivered; first's and then's are.
    let runs = stack
        .js
        .get_stream(jetcron_core::subjects::RUNS_STREAM)
        .await
        .expect("runs stream");
    let info = runs
        .consumer_info(jetcron_core::subjects::CHAINS_CONSUMER)
        .await
        .expect("consumer info");
    assert!(
        matches!(
            info.config.deliver_policy,
            async_nats::jetstream::consumer::DeliverPolicy::ByStartTime { .. }
        ),
        "{:?}",
        info.config.deliver_policy
    );
    assert_eq!(
        info.delivered.consumer_sequence, 2,
        "run endings delivered: first's and then's only"
    );
    stack.stop().await;
}

#[tokio::test]
async fn cycles_and_jobs_without_schedule_or_parent_are_refused() {
    let stack = Stack::start(StackOptions::api_only()).await;
    stack.put_job(&job("a", r#","schedule":"@daily""#)).await;
    stack.put_job(&job("b", r#","after":[{"job":"a"}]"#)).await;
    stack.put_job(&job("c", r#","after":[{"job":"b"}]"#)).await;
    let refused = |reply: &Value| -> Vec<(String, String, String)> {
        reply["error"]["problems"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                (
                    p["field"].as_str().unwrap_or("").to_string(),
                    p["code"].as_str().unwrap_or("").to_string(),
                    p["message"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    // a after c closes a → c → b → a, named; nothing changes.
    let (reply, code) = stack
        .api_put(&job("a", r#","schedule":"@daily","after":[{"job":"c"}]"#))
        .await;
    assert!(code.is_some(), "{reply}");
    let problems = refused(&reply);
    assert_eq!(problems.len(), 1, "{reply}");
    assert_eq!(
        (problems[0].0.as_str(), problems[0].1.as_str()),
        ("after[0].job", "cycle")
    );
    assert!(problems[0].2.contains("a → c → b → a"), "{reply}");
    let (_, a) = stack.get("/v1/jobs/a").await;
    assert_eq!(a["job"]["revision"], 1, "{a}");
    assert!(a["parents"].as_array().is_some_and(|p| p.is_empty()), "{a}");

    for (body, field, code_expected) in [
        (
            job("d", r#","after":[{"job":"d"}]"#),
            "after[0].job",
            "cycle",
        ),
        (job("d", ""), "schedule", "required"),
        (job("d", r#","after":[]"#), "schedule", "required"),
        (
            job("d", r#","after":[{"job":"a"},{"job":"a","on":"failure"}]"#),
            "after[1].job",
            "duplicate",
        ),
        (
            job("d", r#","after":[{"job":"no such id!"}]"#),
            "after[0].job",
            "",
        ),
        (
            job("d", r#","after":[{"job":"a","on":"sometimes"}]"#),
            "after[0].on",
            "",
        ),
    ] {
        let (reply, code) = stack.api_put(&body).await;
        assert!(code.is_some(), "{body} accepted: {reply}");
        let problems = refused(&reply);
        assert!(
            problems
                .iter()
                .any(|(f, c, _)| f == field && (code_expected.is_empty() || c == code_expected)),
            "{body}: {reply}"
        );
    }
    let (status, _) = stack.get("/v1/jobs/d").await;
    assert_eq!(status, 404);
    stack.stop().await;
}

/// `schemas/clickhouse/002_run_events.sql` as it was before chains: without
/// the two parent columns (the last two lines of its column list).
fn run_events_before_chains() -> String {
    let sql = jetcron_io::clickhouse_schema::MIGRATIONS
        .iter()
        .find(|(name, _)| *name == "002_run_events.sql")
        .expect("002")
        .1;
    let old = sql.replace(
        ",\n    parent_run_id    String DEFAULT '',\n    parent_job_id    String DEFAULT ''",
        "",
    );
    assert_ne!(old, sql, "002 lists the parent columns last");
    old
}

#[tokio::test]
async fn a_run_events_table_made_before_chains_gets_the_parent_columns() {
    use jetcron_io::clickhouse_schema::{self, statements, ClickHouseOptions, MIGRATIONS};
    let parents = |names: Vec<String>| -> Vec<String> {
        names
            .into_iter()
            .filter(|n| n.starts_with("parent_"))
            .collect()
    };
    // On the 18.16 server, through the projector's start-up.
    let server = jetcron_testkit::ClickHouseServer::start();
    let client = ClickHouseOptions::new(server.url()).client();
    client
        .query("CREATE DATABASE IF NOT EXISTS jetcron")
        .execute()
        .await
        .expect("database");
    for statement in statements(&run_events_before_chains()) {
        client.query(&statement).execute().await.expect("old table");
    }
    let columns = || async {
        client
            // In table order (18.16's system.columns has no position column).
            .query("SELECT name FROM system.columns WHERE database = 'jetcron' AND table = 'run_events'")
            .fetch_all::<String>()
            .await
            .expect("columns")
    };
    assert!(parents(columns().await).is_empty());
    clickhouse_schema::apply(&client).await.expect("apply");
    clickhouse_schema::apply(&client)
        .await
        .expect("apply again");
    let after = columns().await;
    assert_eq!(parents(after.clone()), ["parent_run_id", "parent_job_id"]);
    assert_eq!(
        after.last().map(String::as_str),
        Some("parent_job_id"),
        "appended last"
    );

    // On current ClickHouse (chdb), the DDL files themselves: old table,
    // then every migration (IF NOT EXISTS adds the columns once).
    let mut on_chdb = vec!["CREATE DATABASE IF NOT EXISTS jetcron".to_string()];
    on_chdb.extend(statements(&run_events_before_chains()));
    on_chdb.extend(MIGRATIONS.iter().flat_map(|(_, sql)| statements(sql)));
    on_chdb.push(
        "SELECT name FROM system.columns WHERE database = 'jetcron' AND table = 'run_events' AND name LIKE 'parent_%' ORDER BY position"
            .into(),
    );
    let (version, results) = jetcron_testkit::chdb::run_statements_on_chdb(&on_chdb).await;
    for (statement, result) in on_chdb.iter().zip(&results) {
        assert!(
            result.get("error").is_none(),
            "chdb {version}: {statement}: {result}"
        );
    }
    let names: Vec<&str> = results.last().expect("columns")["data"]
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|row| row["name"].as_str())
        .collect();
    assert_eq!(names, ["parent_run_id", "parent_job_id"], "chdb {version}");
}
