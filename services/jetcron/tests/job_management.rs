//! Managing jobs over the `jetcron` NATS service the way `nats req` does:
//! get, list by label, optimistic concurrency on put and delete, and pause /
//! resume of one job or of every job matching a label selector.

use std::time::Duration;

use jetcron_testkit::{Stack, StackOptions};
use serde_json::{json, Value};

async fn req(stack: &Stack, verb: &str, body: &str) -> (Value, Option<String>) {
    stack.api(&format!("jetcron.api.jobs.{verb}"), body).await
}

#[tokio::test]
async fn put_and_delete_compare_and_swap_on_the_revision() {
    let stack = Stack::start(StackOptions::api_only()).await;
    let job = |rev: &str| {
        format!(
            r#"{{"id":"report","schedule":"@daily","expected_revision":{rev},"target":{{"type":"nats","subject":"svc.report"}}}}"#
        )
    };
    let (reply, code) = stack.api_put(&job("0")).await;
    assert_eq!(code, None, "{reply}");
    let first = reply["revision"].as_u64().expect("revision");
    // 0 means "must not exist": a second create loses.
    let (reply, code) = stack.api_put(&job("0")).await;
    assert_eq!(code.as_deref(), Some("409"), "{reply}");
    assert_eq!(reply["error"]["code"], "conflict");
    assert_eq!(reply["error"]["field"], "expected_revision");
    let (reply, code) = stack.api_put(&job(&first.to_string())).await;
    assert_eq!(code, None, "{reply}");
    let second = reply["revision"].as_u64().expect("revision");
    assert!(second > first);
    // A writer still holding the first revision loses and changes nothing.
    let (_, code) = stack.api_put(&job(&first.to_string())).await;
    assert_eq!(code.as_deref(), Some("409"));
    let (_, code) = stack.api_put(&job("\"latest\"")).await;
    assert_eq!(code.as_deref(), Some("400"));
    let (reply, code) = req(&stack, "get", r#"{"id":"report"}"#).await;
    assert_eq!(code, None, "{reply}");
    assert_eq!(reply["job"]["revision"], second);
    assert_eq!(
        reply["job"]["job"].get("expected_revision"),
        None,
        "not stored"
    );

    let (reply, code) = req(
        &stack,
        "delete",
        &format!(r#"{{"id":"report","expected_revision":{first}}}"#),
    )
    .await;
    assert_eq!(code.as_deref(), Some("409"), "{reply}");
    assert_eq!(req(&stack, "get", r#"{"id":"report"}"#).await.1, None);
    let (reply, code) = req(
        &stack,
        "delete",
        &format!(r#"{{"id":"report","expected_revision":{second}}}"#),
    )
    .await;
    assert_eq!(code, None, "{reply}");
    assert_eq!(reply["deleted_revision"], second);
    // The new revision is the delete marker's, as `nats kv history` shows it.
    let marker = stack
        .jobs_bucket()
        .await
        .entry("report")
        .await
        .expect("entry")
        .expect("delete marker");
    assert_eq!(
        marker.operation,
        async_nats::jetstream::kv::Operation::Delete
    );
    assert_eq!(reply["revision"], marker.revision);
    assert!(marker.revision > second);
    let (reply, code) = req(&stack, "get", r#"{"id":"report"}"#).await;
    assert_eq!(code.as_deref(), Some("404"), "{reply}");
    let (_, code) = req(&stack, "delete", r#"{"id":"report"}"#).await;
    assert_eq!(code.as_deref(), Some("404"));
    stack.stop().await;
}

#[tokio::test]
async fn get_and_list_answer_with_revisions_and_filter_by_labels() {
    let stack = Stack::start(StackOptions::api_only()).await;
    for (id, team) in [
        ("invoice", "billing"),
        ("dunning", "billing"),
        ("backup", "ops"),
    ] {
        let body = format!(
            r#"{{"id":"{id}","schedule":"@daily","labels":{{"team":"{team}","tier":"1"}},"target":{{"type":"nats","subject":"svc.{id}"}}}}"#
        );
        assert_eq!(stack.api_put(&body).await.1, None);
    }
    let (reply, code) = req(&stack, "list", "").await;
    assert_eq!(code, None, "{reply}");
    let ids = |reply: &Value| -> Vec<String> {
        reply["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .map(|j| j["id"].as_str().expect("id").to_string())
            .collect()
    };
    assert_eq!(ids(&reply), ["backup", "dunning", "invoice"]);
    let (reply, _) = req(&stack, "list", r#"{"labels":{"team":"billing"}}"#).await;
    assert_eq!(ids(&reply), ["dunning", "invoice"]);
    let (reply, _) = req(
        &stack,
        "list",
        r#"{"labels":{"team":"billing","tier":"2"}}"#,
    )
    .await;
    assert_eq!(ids(&reply), Vec::<String>::new());
    let (reply, code) = req(&stack, "get", r#"{"id":"invoice"}"#).await;
    assert_eq!(code, None);
    assert_eq!(reply["job"]["valid"], true);
    assert_eq!(
        reply["job"]["job"]["labels"],
        json!({"team":"billing","tier":"1"})
    );
    for (body, status, field) in [
        (r#"{"id":"nope"}"#, "404", "id"),
        (r#"{"id":"a.b.c"}"#, "400", "id"),
        (r#"{"id":"default.invoice"}"#, "400", "id"),
        (r#"{"id":"billing.nope"}"#, "404", "id"),
        (r#"{"id":7}"#, "400", "id"),
        (r#"{"job":"invoice"}"#, "400", ""),
    ] {
        let (reply, code) = req(&stack, "get", body).await;
        assert_eq!(code.as_deref(), Some(status), "{body}: {reply}");
        if !field.is_empty() {
            assert_eq!(reply["error"]["field"], field, "{body}");
        }
    }
    let (reply, code) = req(&stack, "list", r#"{"labels":{"bad key":"x"}}"#).await;
    assert_eq!(code.as_deref(), Some("400"), "{reply}");
    stack.stop().await;
}

/// Due events stored so far for `job_id` (the stack runs no executor).
async fn due_count(stack: &Stack, job_id: &str) -> u64 {
    let stream = stack
        .js
        .get_stream("JETCRON_DUE")
        .await
        .expect("due stream");
    let mut info = stream
        .info_with_subjects(format!("jetcron.due.default.{job_id}"))
        .await
        .expect("subjects");
    use futures::TryStreamExt as _;
    let mut total = 0;
    while let Some((_, count)) = info.try_next().await.expect("subject counts") {
        total += count as u64;
    }
    total
}

#[tokio::test]
async fn pause_and_resume_by_label_selector_change_only_the_matching_jobs() {
    let stack = Stack::start(StackOptions {
        executor: false,
        ..Default::default()
    })
    .await;
    for (id, team) in [
        ("sync-a", "billing"),
        ("sync-b", "billing"),
        ("sync-c", "ops"),
    ] {
        let body = format!(
            r#"{{"id":"{id}","schedule":"* * * * * *","misfire":"skip","labels":{{"team":"{team}"}},"target":{{"type":"nats","subject":"svc.sync"}}}}"#
        );
        assert_eq!(stack.api_put(&body).await.1, None);
    }
    let (reply, code) = req(&stack, "pause", r#"{"labels":{"team":"billing"}}"#).await;
    assert_eq!(code, None, "{reply}");
    let changed: Vec<&str> = reply["changed"]
        .as_array()
        .expect("changed")
        .iter()
        .map(|c| c["id"].as_str().expect("id"))
        .collect();
    assert_eq!(changed, ["sync-a", "sync-b"]);
    let (reply, _) = req(&stack, "pause", r#"{"labels":{"team":"billing"}}"#).await;
    assert_eq!(reply["changed"], json!([]));
    assert_eq!(reply["unchanged"], json!(["sync-a", "sync-b"]));
    // Paused jobs stop firing; the other one goes on.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = [
        due_count(&stack, "sync-a").await,
        due_count(&stack, "sync-c").await,
    ];
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = [
        due_count(&stack, "sync-a").await,
        due_count(&stack, "sync-c").await,
    ];
    assert_eq!(after[0], before[0], "a paused job fired");
    assert!(
        after[1] >= before[1] + 2,
        "the unpaused job stopped: {before:?} {after:?}"
    );
    let (reply, _) = req(&stack, "get", r#"{"id":"sync-a"}"#).await;
    assert_eq!(reply["job"]["job"]["paused"], true);

    let (reply, code) = req(&stack, "resume", r#"{"id":"sync-a"}"#).await;
    assert_eq!(code, None, "{reply}");
    assert_eq!(reply["changed"][0]["id"], "sync-a");
    let resumed = due_count(&stack, "sync-a").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        due_count(&stack, "sync-a").await >= resumed + 2,
        "resumed job does not fire"
    );
    let (reply, _) = req(&stack, "get", r#"{"id":"sync-a"}"#).await;
    assert_eq!(reply["job"]["job"].get("paused"), None);

    for body in [
        r#"{}"#,
        r#"{"id":"sync-a","labels":{"team":"ops"}}"#,
        r#"{"labels":{}}"#,
    ] {
        let (reply, code) = req(&stack, "pause", body).await;
        assert_eq!(code.as_deref(), Some("400"), "{body}: {reply}");
    }
    let (_, code) = req(&stack, "pause", r#"{"id":"ghost"}"#).await;
    assert_eq!(code.as_deref(), Some("404"));
    stack.stop().await;
}
