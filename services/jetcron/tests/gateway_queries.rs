//! Every ClickHouse query of the gateway (`jetcron_gateway::query_catalog`)
//! on both engines: the 18.16 server the harness runs and a current one
//! (chdb 26.x), over the same projected history, with the same answers.

use std::time::Duration;

use jetcron_core::clickhouse_schema::ClickHouseOptions;
use jetcron_testkit::{wait_until, Stack, StackOptions};
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
    wait_until("history projected", Duration::from_secs(20), || async {
        let (_, r) = stack.get("/v1/rejections").await;
        let (_, runs) = stack.get("/v1/runs").await;
        (r["rejections"].as_array().map_or(0, Vec::len) == 1
            && runs["runs"].as_array().map_or(0, Vec::len) == 2)
            .then_some(())
    })
    .await;

    let client = ClickHouseOptions::new(stack.clickhouse.url()).client();
    let to = chrono::Utc::now() + chrono::Duration::minutes(1);
    let samples =
        jetcron_gateway::query_catalog::samples(&client, "broken", &broken_run, started, to);
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
