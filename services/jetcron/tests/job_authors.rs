//! Who changed what: one job written through every door (a scoped token
//! and the bootstrap token over HTTP, the NATS API's subject and the
//! namespace's door, a direct `nats kv put`), paused and deleted by a
//! token. `GET /v1/jobs/{name}/history` names each revision's author and
//! door, and ClickHouse `job_events` holds the same, one row per revision
//! (the console's door is checked in `console.rs`).

use std::time::Duration;

use jetcron_testkit::reqwest::Method;
use jetcron_testkit::{wait_until, Stack, StackOptions, API_TOKEN};
use serde_json::{json, Value};

const JOB: &str = "billing.report";

fn definition(schedule: &str) -> String {
    format!(
        r#"{{"id":"{JOB}","schedule":"{schedule}","target":{{"type":"nats","subject":"svc.authors"}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_revision_names_its_author_and_door() {
    let stack = Stack::start(StackOptions {
        executor: false,
        ..StackOptions::default()
    })
    .await;
    let (token, id) = stack.scoped_token("billing", "editor").await;
    let token_actor = format!("token:{id}");

    let path = format!("/v1/jobs/{JOB}");
    let (status, body) = stack
        .send(Method::PUT, &path, &definition("@daily"), Some(&token))
        .await;
    assert_eq!((status, &body["created"]), (200, &json!(true)), "{body}");
    let (status, body) = stack
        .send(Method::PUT, &path, &definition("@hourly"), Some(API_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    let (reply, error) = stack
        .api("jetcron.api.jobs.put", &definition("@weekly"))
        .await;
    assert_eq!(error, None, "{reply}");
    let (reply, error) = stack
        .api("jetcron.api.ns.billing.jobs.put", &definition("@monthly"))
        .await;
    assert_eq!(error, None, "{reply}");
    stack.kv_put(JOB, definition("@yearly").as_bytes()).await;
    let (status, body) = stack
        .send(Method::POST, &format!("{path}/pause"), "", Some(&token))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = stack.send(Method::DELETE, &path, "", Some(&token)).await;
    assert_eq!(status, 200, "{body}");

    let expected = [
        (
            "put",
            token_actor.as_str(),
            "http",
            Some("editor of billing"),
        ),
        ("put", "admin-token", "http", None),
        ("put", "nats", "nats", None),
        ("put", "nats:billing", "nats", None),
        ("put", "kv", "kv", None),
        (
            "put",
            token_actor.as_str(),
            "http",
            Some("editor of billing"),
        ),
        (
            "delete",
            token_actor.as_str(),
            "http",
            Some("editor of billing"),
        ),
    ];
    let (status, history) = stack.get(&format!("{path}/history")).await;
    assert_eq!(status, 200, "{history}");
    let revisions = history["revisions"].as_array().expect("revisions");
    let seen: Vec<(&str, &str, &str, Option<&str>)> = revisions
        .iter()
        .map(|r| {
            (
                r["operation"].as_str().unwrap_or_default(),
                r["author"]["actor"].as_str().unwrap_or_default(),
                r["author"]["door"].as_str().unwrap_or_default(),
                r["author"]["note"].as_str(),
            )
        })
        .collect();
    assert_eq!(seen, expected, "{history}");

    // ClickHouse: one row per revision, the same authors, in order.
    let sql = format!(
        "SELECT revision, kind, actor, door FROM jetcron.job_events \
         WHERE job_id = '{JOB}' AND kind IN ('job.changed', 'job.deleted') \
         ORDER BY revision LIMIT 1 BY event_id FORMAT JSONEachRow"
    );
    let rows = wait_until(
        "every revision in job_events",
        Duration::from_secs(30),
        || async {
            let text = stack.clickhouse_sql(&sql).await;
            let rows: Vec<Value> = text
                .lines()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect();
            (rows.len() == expected.len()).then_some(rows)
        },
    )
    .await;
    for (row, (operation, actor, door, _)) in rows.iter().zip(&expected) {
        let kind = match *operation {
            "delete" => "job.deleted",
            _ => "job.changed",
        };
        assert_eq!(
            (
                row["kind"].as_str(),
                row["actor"].as_str(),
                row["door"].as_str()
            ),
            (Some(kind), Some(*actor), Some(*door)),
            "{row}"
        );
    }
    let revision_numbers: Vec<u64> = revisions
        .iter()
        .map(|r| r["revision"].as_u64().expect("revision"))
        .collect();
    let stored_numbers: Vec<u64> = rows
        .iter()
        .map(|r| match &r["revision"] {
            Value::String(text) => text.parse().expect("revision"),
            other => other.as_u64().expect("revision"),
        })
        .collect();
    assert_eq!(stored_numbers, revision_numbers);
    stack.stop().await;
}
