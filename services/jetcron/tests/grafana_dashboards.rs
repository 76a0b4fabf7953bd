//! The Grafana dashboards (`infra/grafana/dashboards/*.json`) against real
//! history on both ClickHouse engines.
//!
//! Shell jobs that succeed, fail after a retry and time out, a definition
//! refused by the API and one refused in the bucket (a job that never ran),
//! go through the whole stack into ClickHouse 18.16. Then every panel's SQL
//! is expanded the way Grafana and the ClickHouse plugin expand it (template
//! variables in the browser, then the plugin's `$__` macros:
//! [`jetcron_testkit::grafana`]) and run on 18.16 over HTTP and on a current
//! ClickHouse (chdb, in a python3 subprocess, with the same DDL and the rows
//! exported from 18.16). Each panel's target declares the columns it produces in
//! `expectColumns`: both engines must answer with exactly those columns and
//! the same rows, value for value, and at least one row where the test's data
//! guarantees it; the key numbers (runs, failure rate, retries, rejections)
//! are what the history says, both rejections are listed and the job picker
//! offers the job that was only ever refused. Data links must name columns
//! the panel has, and the run link must open the run in the gateway.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::Utc;
use jetcron_testkit::grafana::{
    self, assert_clickhouse_datasource, clickhouse_query, dashboards, panels, str_of, Answer,
    PanelQuery,
};
use jetcron_testkit::{Stack, StackOptions};
use serde_json::{json, Value};

fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

/// The job whose history has every kind of row the dashboards show.
const FLAKY: &str = "grafana-flaky";
/// A job whose only definition was refused in the bucket: it never ran.
const REFUSED: &str = "grafana-refused";

/// Succeeding, failing-after-a-retry and timed-out runs, a definition refused
/// by the API and one refused in the bucket, a missed fire; waits until `jetcron.runs` and
/// `jetcron.job_events` show them. The bucket revision of the refused value.
async fn make_history(stack: &Stack) -> u64 {
    stack.put_job(r#"{"id":"grafana-ok","schedule":"@daily","target":{"type":"shell","command":"echo ok"}}"#,
    )
    .await;
    stack.put_job(r#"{"id":"grafana-flaky","schedule":"@daily","retry":{"max_attempts":2,"backoff":"100ms"},
        "target":{"type":"shell","command":"echo nope; exit 3"}}"#,
    )
    .await;
    stack
        .put_job(
            r#"{"id":"grafana-slow","schedule":"@daily","timeout":"1s","retry":{"max_attempts":1},
        "target":{"type":"shell","command":"sleep 5"}}"#,
        )
        .await;
    let mut expected = BTreeMap::new();
    for (job, status) in [
        ("grafana-ok", "succeeded"),
        ("grafana-ok", "succeeded"),
        (FLAKY, "failed"),
        ("grafana-slow", "timed_out"),
    ] {
        expected.insert(stack.trigger(job).await, status);
    }
    for (run_id, status) in &expected {
        stack
            .wait_for_run_status(run_id, status, Duration::from_secs(30))
            .await;
    }
    // `nats pub` of an invalid definition: nobody to answer, so job.rejected.
    let invalid =
        r#"{"id":"grafana-flaky","schedule":"* * * *","target":{"type":"shell","command":"true"}}"#;
    stack
        .client
        .publish("jetcron.api.jobs.put", invalid.into())
        .await
        .expect("publish");
    stack.client.flush().await.expect("flush");
    // `nats kv put jetcron_jobs` of an invalid value: the ticker refuses it.
    let revision = stack
        .kv_put(
            REFUSED,
            br#"{"id":"grafana-refused","schedule":"every day","target":{"type":"shell","command":"true"}}"#,
        )
        .await;
    // A fire the gateways' scan found missing, recorded twice (two gateways):
    // one missed fire.
    let missed = jetcron_core::job_events::FireMissed::new(
        "grafana-ok",
        Utc::now() - chrono::Duration::minutes(3),
        Utc::now(),
        chrono::Duration::minutes(2),
    );
    for _ in 0..2 {
        jetcron_io::job_events::publish_fire_missed(&stack.js, &missed)
            .await
            .expect("publish fire.missed");
    }
    jetcron_testkit::wait_until(
        "runs, rejections and the missed fire projected",
        Duration::from_secs(30),
        || async {
            let runs = clickhouse_query(stack, "SELECT run_id, status FROM jetcron.runs")
                .await
                .ok()?;
            let seen: BTreeMap<String, String> = runs
                .rows
                .iter()
                .map(|r| {
                    (
                        str_of(&r["run_id"], "run_id").to_string(),
                        str_of(&r["status"], "status").to_string(),
                    )
                })
                .collect();
            let all_there = expected
                .iter()
                .all(|(id, s)| seen.get(id).map(String::as_str) == Some(*s));
            let rejections = clickhouse_query(
                stack,
                "SELECT DISTINCT job_id, source FROM jetcron.job_events WHERE kind = 'job.rejected' ORDER BY job_id",
            )
            .await
            .ok()?;
            let both = [
                json!({"job_id": FLAKY, "source": "api"}),
                json!({"job_id": REFUSED, "source": "kv"}),
            ];
            let missed = clickhouse_query(
                stack,
                "SELECT DISTINCT job_id FROM jetcron.job_events WHERE kind = 'fire.missed'",
            )
            .await
            .ok()?;
            let one_missed = missed.rows == [json!({"job_id": "grafana-ok"})];
            let authors = clickhouse_query(
                stack,
                "SELECT DISTINCT job_id, actor, door FROM jetcron.job_events WHERE kind = 'job.changed' ORDER BY job_id",
            )
            .await
            .ok()?;
            let every_put = authors.rows.len() == 4;
            (all_there && rejections.rows == both && one_missed && every_put).then_some(())
        },
    )
    .await;
    revision
}

/// The same answer from both engines: 18.16 quotes 64-bit integers in JSON
/// and the two may print a float differently.
fn same_value(a: &Value, b: &Value) -> bool {
    let number = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse::<f64>().ok(),
        _ => None,
    };
    match (number(a), number(b)) {
        (Some(x), Some(y)) => (x - y).abs() <= 1e-9 * x.abs().max(1.0),
        _ => a == b,
    }
}

#[test]
fn provisioning_points_at_the_dashboards_and_the_datasource() {
    let datasource = std::fs::read_to_string(repo_path(
        "infra/grafana/provisioning/datasources/jetcron-clickhouse.yaml",
    ))
    .expect("datasource provisioning");
    for line in [
        "type: grafana-clickhouse-datasource",
        "uid: jetcron-clickhouse",
        "protocol: http",
        "defaultDatabase: jetcron",
        "password:",
    ] {
        assert!(datasource.contains(line), "datasource file lacks {line:?}");
    }
    let provider = std::fs::read_to_string(repo_path(
        "infra/grafana/provisioning/dashboards/jetcron.yaml",
    ))
    .expect("dashboard provider");
    assert!(provider.contains("type: file") && provider.contains("path:"));
    for (name, dashboard) in dashboards() {
        assert!(
            dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()),
            "{name}: uid"
        );
        let mut ids = BTreeSet::new();
        for panel in panels(&dashboard) {
            let title = panel["title"].as_str().unwrap_or_default();
            assert!(
                ids.insert(panel["id"].as_u64()),
                "{name}: duplicate panel id ({title})"
            );
            assert!(
                panel["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{name}: {title} says what it shows"
            );
            if panel["type"] == "text" || panel["type"] == "row" {
                continue;
            }
            assert_clickhouse_datasource(panel, title);
            let targets = panel["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{name}: {title} has a query");
            for target in targets {
                assert_clickhouse_datasource(target, title);
                assert_eq!(target["editorType"], "sql", "{title}");
                // sqlds: 0 time series, 1 table.
                let format = target["format"].as_u64();
                let query_type = if format == Some(0) {
                    "timeseries"
                } else {
                    "table"
                };
                assert!(matches!(format, Some(0 | 1)), "{title}: format");
                assert_eq!(target["queryType"], query_type, "{title}");
                assert!(
                    target["expectColumns"].is_array(),
                    "{name}: {title} declares expectColumns"
                );
                assert!(
                    target["pluginVersion"].as_str().is_some_and(|v| v >= "4"),
                    "{title}"
                );
            }
        }
    }
}

/// Rows are guaranteed for the variables' own queries, the overview and the
/// flaky job (runs, retries, a rejection).
fn rows_required(q: &PanelQuery) -> bool {
    q.variable.is_some() || q.vars.get("job").is_none_or(|j| j == FLAKY)
}

/// Every answer has the rows the test's data guarantees.
fn assert_rows_where_guaranteed(queries: &[PanelQuery], answers: &[Answer]) {
    for (q, answer) in queries.iter().zip(answers) {
        if rows_required(q) {
            assert!(
                !answer.rows.is_empty(),
                "{}: no rows on 18.16\n{}",
                q.label,
                q.sql
            );
        }
    }
}

/// What the panels show for the test's history.
fn assert_the_panels_tell_the_story(queries: &[PanelQuery], answers: &[Answer], revision: u64) {
    let rows = |panel: &str| -> &[Value] {
        let i = queries
            .iter()
            .position(|q| q.label == panel)
            .unwrap_or_else(|| panic!("no panel {panel}"));
        &answers[i].rows
    };
    let shown = |panel: &str, column: &str| -> Vec<Value> {
        rows(panel).iter().map(|r| r[column].clone()).collect()
    };
    let numbers = |panel: &str, column: &str, expected: &[f64]| {
        let values = shown(panel, column);
        let same = values.len() == expected.len()
            && values
                .iter()
                .zip(expected)
                .all(|(v, e)| same_value(v, &json!(e)));
        assert!(
            same,
            "{panel}: {column} is {values:?}, expected {expected:?}"
        );
    };
    let overview = |title: &str| format!("jetcron-overview.json: {title} (A)");
    let job = |title: &str, id: &str| format!("jetcron-job.json: {title} (A) job={id}");
    // The job picker: every job that ran, and the one that was only refused.
    let jobs = shown("jetcron-job.json: variable job", "job_id");
    let expected = [FLAKY, "grafana-ok", REFUSED, "grafana-slow"].map(|j| json!(j));
    assert_eq!(jobs, expected, "$job lists jobs with runs or rejections");
    // 4 runs: 2 succeeded, 1 failed, 1 timed out; two refused definitions.
    numbers(&overview("Runs"), "runs", &[4.0]);
    numbers(&overview("Failure rate"), "failure_rate", &[0.5]);
    numbers(&overview("Rejected definitions"), "rejections", &[2.0]);
    numbers(&overview("Missed fires"), "missed_fires", &[1.0]);
    // Both rejections are listed, the bucket one with its revision, each with
    // the field and code the API would have answered.
    let recent = overview("Recent rejections");
    let mut listed: Vec<(&str, &str)> = rows(&recent)
        .iter()
        .map(|r| {
            (
                str_of(&r["job_id"], "job_id"),
                str_of(&r["source"], "source"),
            )
        })
        .collect();
    listed.sort();
    assert_eq!(listed, [(FLAKY, "api"), (REFUSED, "kv")], "{recent}");
    for row in rows(&recent) {
        let what = format!("{recent}: {row}");
        let fields = str_of(&row["problem_fields"], "problem_fields");
        assert!(fields.split(", ").any(|f| f == "schedule"), "{what}");
        assert!(!str_of(&row["problem_codes"], "codes").is_empty(), "{what}");
        assert!(!str_of(&row["message"], "message").is_empty(), "{what}");
        if row["source"] == "kv" {
            assert!(same_value(&row["revision"], &json!(revision)), "{what}");
        }
    }
    let failures = overview("Recent failures");
    let mut failed: Vec<Value> = shown(&failures, "job_id")
        .into_iter()
        .zip(shown(&failures, "status"))
        .map(|(j, s)| json!([j, s]))
        .collect();
    failed.sort_by_key(Value::to_string);
    let expected = [
        json!([FLAKY, "failed"]),
        json!(["grafana-slow", "timed_out"]),
    ];
    assert_eq!(failed, expected, "{failures}");
    numbers(&job("Retries", FLAKY), "retried_attempts", &[1.0]);
    numbers(&job("Last runs", FLAKY), "attempt", &[2.0]);
    numbers(&job("Success rate", FLAKY), "success_rate", &[0.0]);
    numbers(&job("Success rate", "grafana-ok"), "success_rate", &[1.0]);
    let rejections = shown(&job("Recent rejections", FLAKY), "source");
    assert_eq!(rejections, [json!("api")]);
    // The refused job: its rejection in the drill-down, and no runs.
    let rejections = shown(&job("Recent rejections", REFUSED), "source");
    assert_eq!(rejections, [json!("kv")]);
    numbers(&job("Runs", REFUSED), "runs", &[0.0]);
    assert!(shown(&job("Job state", REFUSED), "runs").is_empty());
    let state = shown(&job("Job state", "grafana-slow"), "last_status");
    assert_eq!(state, [json!("timed_out")]);
    // Who changed what: the puts through the NATS API and the one written
    // straight into the bucket, each with its author and door.
    let changes = overview("Who changed what");
    let mut authors: Vec<(&str, &str, &str)> = rows(&changes)
        .iter()
        .map(|r| {
            (
                str_of(&r["job_id"], "job_id"),
                str_of(&r["actor"], "actor"),
                str_of(&r["door"], "door"),
            )
        })
        .collect();
    authors.sort();
    let expected = [
        (FLAKY, "nats", "nats"),
        ("grafana-ok", "nats", "nats"),
        (REFUSED, "kv", "kv"),
        ("grafana-slow", "nats", "nats"),
    ];
    assert_eq!(authors, expected, "{changes}");
    let refused = job("Who changed what", REFUSED);
    assert!(
        same_value(&shown(&refused, "revision")[0], &json!(revision)),
        "{refused}"
    );
    assert_eq!(shown(&refused, "change"), [json!("put")], "{refused}");
}

/// chdb's answers equal 18.16's: columns, rows and every value.
fn assert_same_answers(queries: &[PanelQuery], old: &[Answer], version: &str, current: &[Value]) {
    for ((q, answer), result) in queries.iter().zip(old).zip(current) {
        if let Some(err) = result["error"].as_str() {
            panic!("{} on chdb {version}: {err}\n{}", q.label, q.sql);
        }
        let columns = result["columns"].as_array().expect("columns");
        let names: Vec<&str> = columns.iter().map(|c| str_of(&c[0], "column")).collect();
        assert_eq!(
            names, q.columns,
            "{}: columns on chdb {version}\n{}",
            q.label, q.sql
        );
        if q.time_series {
            let kind = str_of(&columns[0][1], "type");
            assert!(
                kind.starts_with("DateTime"),
                "{}: time is {kind} on chdb",
                q.label
            );
        }
        let data = result["data"].as_array().expect("data");
        assert_eq!(
            data.len(),
            answer.rows.len(),
            "{}: rows on chdb {version} and 18.16\n{}",
            q.label,
            q.sql
        );
        for (i, (row, other)) in answer.rows.iter().zip(data).enumerate() {
            for column in &q.columns {
                let (a, b) = (&row[column], &other[column]);
                assert!(
                    same_value(a, b),
                    "{}: row {i}, {column}: {a} on 18.16, {b} on chdb {version}\n{}",
                    q.label,
                    q.sql
                );
            }
        }
    }
}

#[tokio::test]
async fn every_panel_runs_on_clickhouse_18_16_and_current_with_the_columns_it_declares() {
    let started = Utc::now();
    let stack = Stack::start(StackOptions::with_shell()).await;
    let revision = make_history(&stack).await;
    let export = |table: &str| format!("SELECT * FROM {table} FORMAT JSONEachRow");
    let exported = json!({
        "jetcron.run_events": stack.clickhouse_sql(&export("jetcron.run_events")).await,
        "jetcron.job_events": stack.clickhouse_sql(&export("jetcron.job_events")).await,
    });
    let (from, to) = (
        started - chrono::Duration::minutes(5),
        Utc::now() + chrono::Duration::minutes(1),
    );
    let queries = grafana::panel_queries(&stack, &dashboards(), from, to).await;

    let old = grafana::run_panels(&stack, &queries).await;
    assert_rows_where_guaranteed(&queries, &old);
    assert_the_panels_tell_the_story(&queries, &old, revision);

    let sqls: Vec<&str> = queries.iter().map(|q| q.sql.as_str()).collect();
    let (version, current) = jetcron_testkit::chdb::run_on_chdb(exported, &sqls).await;
    assert_same_answers(&queries, &old, &version, &current);

    // Run links open the run in the gateway (gateway_url = the test's gateway).
    let mut opened = 0;
    for (q, answer) in queries.iter().zip(&old) {
        let Some(row) = answer.rows.first().filter(|_| rows_required(q)) else {
            continue;
        };
        for template in &q.external_links {
            let mut url = template.replace("${gateway_url}", &stack.http_base);
            for (column, _) in &answer.columns {
                let value = row[column].as_str().map(str::to_string);
                let value = value.unwrap_or_else(|| row[column].to_string());
                url = url.replace(&format!("${{__data.fields.{column}}}"), &value);
            }
            let response = stack.http.get(&url).send().await.expect("gateway answers");
            assert_eq!(response.status().as_u16(), 200, "{}: {url}", q.label);
            let body: Value = response.json().await.expect("JSON run");
            assert_eq!(body["run"]["run_id"], row["run_id"], "{}: {url}", q.label);
            opened += 1;
        }
    }
    assert!(opened >= 2, "the run links of both dashboards were opened");
    stack.stop().await;
}
