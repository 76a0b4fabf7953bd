//! The `jetcron` NATS service: request/reply with clear errors, and
//! fire-and-forget publishes, as `nats req` / `nats pub` use it.

use std::time::Duration;

use jetcron_core::subjects;
use jetcron_testkit::{wait_until, Stack, StackOptions};

#[tokio::test]
async fn invalid_definitions_are_refused_with_field_errors_and_nothing_is_stored() {
    let stack = Stack::start(StackOptions::api_only()).await;
    let cases = [
        (
            r#"{"id":"x","schedule":"* * * *","target":{"type":"nats","subject":"a.b"}}"#,
            "schedule",
            "schedule: expected 5, 6 or 7 fields, got 4",
        ),
        (
            r#"{"id":"x","schedule":"@daily","target":{"type":"http","url":"ftp://example.com/"}}"#,
            "target.url",
            "target.url: scheme must be http or https, got \"ftp\"",
        ),
        (
            r#"{"id":"a.b.c","schedule":"@daily","target":{"type":"nats","subject":"a.b"}}"#,
            "id",
            "id: \"a.b.c\" has more than one '.': a job's name is <job> or <namespace>.<job>",
        ),
        (
            r#"{"id":"x","schedule":"@daily","timezone":"Mars/Base","target":{"type":"nats","subject":"a.b"}}"#,
            "timezone",
            "timezone: unknown IANA time zone \"Mars/Base\"",
        ),
    ];
    for (body, field, message) in cases {
        let (reply, code) = stack.api_put(body).await;
        assert_eq!(code.as_deref(), Some("400"), "{reply}");
        assert_eq!(reply["ok"], false);
        assert_eq!(reply["error"]["code"], "invalid_job");
        assert_eq!(reply["error"]["field"], field, "{reply}");
        assert_eq!(reply["error"]["message"], message);
    }
    // The service error headers `nats req` prints: the code and the message.
    let raw = stack
        .client
        .request(subjects::API_JOBS_PUT, cases[0].0.into())
        .await
        .expect("request");
    let headers = raw.headers.expect("error headers");
    assert_eq!(
        headers
            .get(async_nats::service::NATS_SERVICE_ERROR)
            .map(|v| v.as_str()),
        Some(cases[0].2)
    );
    assert_eq!(
        headers
            .get(async_nats::service::NATS_SERVICE_ERROR_CODE)
            .map(|v| v.as_str()),
        Some("400")
    );
    let (reply, code) = stack.api_put("not json at all").await;
    assert_eq!(code.as_deref(), Some("400"));
    assert_eq!(reply["error"]["code"], "invalid_request");
    // A header name with CR/LF must not break the reply (or the service).
    let (reply, code) = stack
        .api_put("{\"id\":\"x\",\"schedule\":\"@daily\",\"target\":{\"type\":\"nats\",\"subject\":\"a\"},\"a\\r\\nb\":1}")
        .await;
    assert_eq!(code.as_deref(), Some("400"), "{reply}");
    let (reply, code) = stack
        .api_put(r#"{"id":"y","schedule":"@daily","target":{"type":"http","url":"http://h/","headers":{"a\nb":"v","ok":"a\u0001"}}}"#)
        .await;
    assert_eq!(code.as_deref(), Some("400"), "{reply}");
    // Schedules with no future fire are refused at the door.
    let (reply, code) = stack
        .api_put(r#"{"id":"past","schedule":"@at 2001-01-01T00:00:00Z","target":{"type":"nats","subject":"a"}}"#)
        .await;
    assert_eq!(code.as_deref(), Some("400"), "{reply}");
    assert_eq!(reply["error"]["problems"][0]["code"], "never_fires");
    let (_, code) = stack
        .api_put(r#"{"id":"ok","schedule":"@daily","target":{"type":"nats","subject":"a"}}"#)
        .await;
    assert_eq!(code, None, "the service still answers");
    stack
        .jobs_bucket()
        .await
        .delete("ok")
        .await
        .expect("delete");
    let keys = stack.jobs_bucket().await.keys().await.expect("keys");
    let keys: Vec<String> = futures::TryStreamExt::try_collect(keys)
        .await
        .expect("list");
    assert!(keys.is_empty(), "refused definitions were stored: {keys:?}");
    stack.stop().await;
}

#[tokio::test]
async fn fire_and_forget_publish_applies_a_valid_definition() {
    let stack = Stack::start(StackOptions::api_only()).await;
    stack
        .client
        .publish(
            subjects::API_JOBS_PUT,
            r#"{"id":"quiet","schedule":"@hourly","target":{"type":"nats","subject":"svc.quiet"}}"#
                .into(),
        )
        .await
        .expect("publish");
    stack
        .client
        .publish(
            subjects::API_JOBS_PUT,
            r#"{"id":"broken","schedule":"never"}"#.into(),
        )
        .await
        .expect("publish");
    let bucket = stack.jobs_bucket().await;
    let stored = wait_until("published job stored", Duration::from_secs(10), || async {
        bucket.get("quiet").await.ok().flatten()
    })
    .await;
    let stored: serde_json::Value = serde_json::from_slice(&stored).expect("json");
    assert_eq!(stored["schedule"], "@hourly");
    assert_eq!(bucket.get("broken").await.expect("get"), None);
    stack.stop().await;
}

#[tokio::test]
async fn the_service_is_discoverable_with_nats_micro() {
    let stack = Stack::start(StackOptions::api_only()).await;
    let reply = stack
        .client
        .request("$SRV.INFO.jetcron", "".into())
        .await
        .expect("service info");
    let info: serde_json::Value = serde_json::from_slice(&reply.payload).expect("json");
    assert_eq!(info["name"], "jetcron");
    let mut subjects: Vec<&str> = info["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .map(|e| e["subject"].as_str().expect("subject"))
        .collect();
    subjects.sort();
    // Every endpoint, plainly and on every namespace's door.
    let (doors, plain): (Vec<&str>, Vec<&str>) = subjects
        .into_iter()
        .partition(|s| s.starts_with("jetcron.api.ns.*."));
    let door_endpoints: Vec<String> = doors
        .iter()
        .map(|s| s.replacen("jetcron.api.ns.*.", "jetcron.api.", 1))
        .collect();
    assert_eq!(door_endpoints, plain);
    let subjects = plain;
    assert_eq!(
        subjects,
        [
            "jetcron.api.channels.delete",
            "jetcron.api.channels.get",
            "jetcron.api.channels.list",
            "jetcron.api.channels.put",
            "jetcron.api.jobs.backfill",
            "jetcron.api.jobs.delete",
            "jetcron.api.jobs.get",
            "jetcron.api.jobs.list",
            "jetcron.api.jobs.pause",
            "jetcron.api.jobs.put",
            "jetcron.api.jobs.resume",
            "jetcron.api.jobs.trigger",
            "jetcron.api.runs.get",
            "jetcron.api.runs.kill",
            "jetcron.api.runs.list",
            "jetcron.api.schedules.preview"
        ]
    );
    stack.stop().await;
}

#[tokio::test]
async fn a_list_larger_than_one_message_arrives_in_pages_each_job_once() {
    let stack = Stack::start(StackOptions::api_only()).await;
    let bucket = stack.jobs_bucket().await;
    let padding = "p".repeat(900);
    for i in 0..1500 {
        let id = format!("bulk-{i:04}");
        let job = format!(
            r#"{{"id":"{id}","schedule":"@daily","description":"{padding}","target":{{"type":"nats","subject":"svc.bulk"}}}}"#
        );
        bucket.put(&id, job.into()).await.expect("kv put");
    }
    stack.wait_for_nats_api().await;
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let body = match &after {
            Some(after) => format!(r#"{{"limit":400,"after":"{after}"}}"#),
            None => r#"{"limit":400}"#.to_string(),
        };
        let (page, code) = stack.api("jetcron.api.jobs.list", &body).await;
        assert_eq!(code, None, "{page}");
        pages += 1;
        assert!(
            page.to_string().len() < 1024 * 1024,
            "a page fits one message"
        );
        let jobs = page["jobs"].as_array().expect("jobs");
        seen.extend(
            jobs.iter()
                .map(|j| j["id"].as_str().expect("id").to_string()),
        );
        match page["next_after"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 4);
    let expected: Vec<String> = (0..1500).map(|i| format!("bulk-{i:04}")).collect();
    assert_eq!(seen, expected, "every job once, in id order");
    // Definitions near the 64 KiB limit: pages end by size, not by count.
    let blob = "x".repeat(50_000);
    for i in 0..40 {
        let id = format!("big.job-{i:02}");
        let job = format!(
            r#"{{"id":"{id}","schedule":"@daily","target":{{"type":"nats","subject":"svc.big","payload":{{"blob":"{blob}"}}}}}}"#
        );
        bucket.put(&id, job.into()).await.expect("kv put");
    }
    let mut big = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut body = serde_json::json!({"limit": 1000, "namespace": "big"});
        if let Some(after) = &after {
            body["after"] = after.as_str().into();
        }
        let (page, code) = stack.api("jetcron.api.jobs.list", &body.to_string()).await;
        assert_eq!(code, None, "page {pages} refused");
        pages += 1;
        assert!(
            page.to_string().len() < 1024 * 1024,
            "a page fits one message"
        );
        big.extend(
            page["jobs"]
                .as_array()
                .expect("jobs")
                .iter()
                .map(|j| j["id"].as_str().expect("id").to_string()),
        );
        match page["next_after"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    assert!(pages >= 3, "{pages} pages");
    assert_eq!(
        big,
        (0..40)
            .map(|i| format!("big.job-{i:02}"))
            .collect::<Vec<_>>()
    );
    for (body, field) in [(r#"{"limit":0}"#, "limit"), (r#"{"limit":1001}"#, "limit")] {
        let (reply, code) = stack.api("jetcron.api.jobs.list", body).await;
        assert_eq!(code.as_deref(), Some("400"), "{reply}");
        assert_eq!(reply["error"]["problems"][0]["field"], field, "{reply}");
    }
    stack.stop().await;
}
