//! The HTTP write API the way `curl` uses it: every job write with a bearer
//! token, the same answers as the NATS service, tokens enforced, limits, the
//! KV history, and an `/openapi.json` that lists exactly what is served.

use std::time::Duration;

use jetcron_testkit::reqwest::Method;
use jetcron_testkit::{wait_until, Stack, StackOptions, API_TOKEN};
use serde_json::{json, Value};

fn job(id: &str, extra: &str) -> String {
    format!(
        r#"{{"id":"{id}","schedule":"@every 1h","labels":{{"team":"billing"}},"target":{{"type":"nats","subject":"svc.{id}"}}{extra}}}"#
    )
}

async fn send(stack: &Stack, method: Method, path: &str, body: &str) -> (u16, Value) {
    stack.send(method, path, body, Some(API_TOKEN)).await
}

#[tokio::test]
async fn jobs_are_created_replaced_paused_and_deleted_over_http() {
    let stack = Stack::start(StackOptions::api_only()).await;

    let (status, reply) = send(&stack, Method::POST, "/v1/jobs", &job("invoice", "")).await;
    assert_eq!(status, 201, "{reply}");
    assert_eq!(reply["created"], true);
    assert_eq!(reply["job"]["id"], "invoice");
    // POST of an existing id replaces it: 200, not 201.
    let (status, reply) = send(&stack, Method::POST, "/v1/jobs", &job("invoice", "")).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["created"], false);
    let first = reply["revision"].as_u64().expect("revision");

    // PUT names the job in the path; the body may leave the id out.
    let body = r#"{"schedule":"@every 2h","labels":{"team":"billing"},"target":{"type":"nats","subject":"svc.invoice"}}"#;
    let (status, reply) = stack
        .http
        .put(format!("{}/v1/jobs/invoice", stack.http_base))
        .bearer_auth(API_TOKEN)
        .header("If-Match", first.to_string())
        .body(body)
        .send()
        .await
        .map(|r| (r.status().as_u16(), r))
        .expect("PUT");
    let reply: Value = reply.json().await.expect("json");
    assert_eq!(status, 200, "{reply}");
    let second = reply["revision"].as_u64().expect("revision");
    assert!(second > first);
    // The same precondition again is stale now.
    let (status, reply) = stack
        .http
        .put(format!("{}/v1/jobs/invoice", stack.http_base))
        .bearer_auth(API_TOKEN)
        .header("If-Match", first.to_string())
        .body(body)
        .send()
        .await
        .map(|r| (r.status().as_u16(), r))
        .expect("PUT");
    let reply: Value = reply.json().await.expect("json");
    assert_eq!(status, 409, "{reply}");
    assert_eq!(reply["error"]["code"], "conflict");
    // A body naming another job than the path is refused.
    let (status, reply) = send(&stack, Method::PUT, "/v1/jobs/invoice", &job("other", "")).await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["field"], "id");
    // An invalid definition gets every problem, as over NATS.
    let (status, reply) = send(
        &stack,
        Method::PUT,
        "/v1/jobs/invoice",
        r#"{"schedule":"0 0 30 2 *","timeout":"0s","target":{"type":"http","url":"ftp://x"}}"#,
    )
    .await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["code"], "invalid_job");
    let fields: Vec<&str> = reply["error"]["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(|p| p["field"].as_str())
        .collect();
    assert!(
        fields.contains(&"schedule")
            && fields.contains(&"timeout")
            && fields.contains(&"target.url"),
        "{fields:?}"
    );

    let (status, reply) = send(&stack, Method::POST, "/v1/jobs/invoice/pause", "").await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["changed"][0]["id"], "invoice");
    let (_, reply) = stack.get("/v1/jobs/invoice").await;
    assert_eq!(reply["job"]["job"]["paused"], true);
    let (status, reply) = send(
        &stack,
        Method::POST,
        "/v1/jobs:resume",
        r#"{"labels":{"team":"billing"}}"#,
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["changed"][0]["id"], "invoice", "{reply}");

    let (status, reply) = send(&stack, Method::POST, "/v1/jobs/invoice/trigger", "").await;
    assert_eq!(status, 202, "{reply}");
    assert!(reply["run_id"].is_string());

    let (status, reply) = stack.get("/v1/jobs?labels=team=billing").await;
    assert_eq!(status, 200, "{reply}");
    let (_, none) = stack.get("/v1/jobs?labels=team=ops").await;
    assert_eq!(none["jobs"], json!([]));

    let current = stack.get("/v1/jobs/invoice").await.1["job"]["revision"]
        .as_u64()
        .expect("revision");
    let (status, reply) = send(
        &stack,
        Method::DELETE,
        &format!("/v1/jobs/invoice?expected_revision={first}"),
        "",
    )
    .await;
    assert_eq!(status, 409, "{reply}");
    let (status, reply) = send(
        &stack,
        Method::DELETE,
        &format!("/v1/jobs/invoice?expected_revision={current}"),
        "",
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(stack.get("/v1/jobs/invoice").await.0, 404);

    // The bucket's history tells the whole story, oldest first.
    let (status, history) = stack.get("/v1/jobs/invoice/history").await;
    assert_eq!(status, 200, "{history}");
    let operations: Vec<&str> = history["revisions"]
        .as_array()
        .expect("revisions")
        .iter()
        .filter_map(|r| r["operation"].as_str())
        .collect();
    assert_eq!(
        operations,
        ["put", "put", "put", "put", "put", "delete"],
        "{history}"
    );
    assert_eq!(history["revisions"][0]["job"]["schedule"], "@every 1h");
    assert_eq!(history["revisions"][1]["job"]["schedule"], "@every 1h");
    assert_eq!(history["revisions"][2]["job"]["schedule"], "@every 2h");
    assert_eq!(history["revisions"][3]["job"]["paused"], true);
    assert_eq!(stack.get("/v1/jobs/never-existed/history").await.0, 404);
    stack.stop().await;
}

#[tokio::test]
async fn writes_need_a_valid_bearer_token_and_change_nothing_without() {
    let stack = Stack::start(StackOptions::api_only()).await;
    for token in [None, Some("wrong-token-0123456789")] {
        for (method, path) in [
            (Method::POST, "/v1/jobs"),
            (Method::PUT, "/v1/jobs/guarded"),
            (Method::DELETE, "/v1/jobs/guarded"),
            (Method::POST, "/v1/jobs/guarded/trigger"),
            (Method::POST, "/v1/jobs:pause"),
            (
                Method::POST,
                "/v1/runs/6a1c3f0e-9b7d-4e52-8c1a-5d2f7e90b3c4/kill",
            ),
        ] {
            let (status, reply) = stack
                .send(method.clone(), path, &job("guarded", ""), token)
                .await;
            assert_eq!(status, 401, "{method} {path} with {token:?}: {reply}");
            assert_eq!(reply["error"]["code"], "unauthorized");
        }
    }
    let (status, _) = stack.get("/v1/jobs/guarded").await;
    assert_eq!(status, 404, "nothing was stored");
    // Reads stay open unless the gateway protects them.
    assert_eq!(stack.get("/v1/jobs").await.0, 200);
    assert_eq!(stack.get("/healthz").await.0, 200);
    stack.stop().await;
}

#[tokio::test]
async fn limits_refuse_oversize_bodies_and_jobs_beyond_the_maximum() {
    let options = StackOptions {
        limits: jetcron_gateway::limits::Limits {
            max_jobs: 2,
            http_body_limit: 100 * 1024,
            ..Default::default()
        },
        ..StackOptions::api_only()
    };
    let stack = Stack::start(options).await;
    let huge = job(
        "huge",
        &format!(r#","description":"{}""#, "x".repeat(200 * 1024)),
    );
    let (status, reply) = send(&stack, Method::POST, "/v1/jobs", &huge).await;
    assert_eq!(status, 413, "{reply}");
    assert_eq!(reply["error"]["code"], "too_large");
    // Within the HTTP limit but past the definition limit (64 KiB).
    let big = job(
        "big",
        &format!(r#","description":"{}""#, "x".repeat(70 * 1024)),
    );
    let (status, reply) = send(&stack, Method::POST, "/v1/jobs", &big).await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["problems"][0]["code"], "too_large");

    for id in ["one", "two"] {
        let (status, reply) = send(&stack, Method::POST, "/v1/jobs", &job(id, "")).await;
        assert_eq!(status, 201, "{reply}");
    }
    // The gateway counts its own writes at once: no wait for its watch.
    let (status, third) = send(&stack, Method::POST, "/v1/jobs", &job("three", "")).await;
    assert_eq!(status, 409, "{third}");
    assert_eq!(third["error"]["code"], "limit_exceeded", "{third}");
    // Over NATS too, and changing an existing job is still allowed.
    let (reply, code) = stack.api_put(&job("three", "")).await;
    assert_eq!(code.as_deref(), Some("409"), "{reply}");
    let (reply, code) = stack
        .api_put(&job("two", r#","description":"edited""#))
        .await;
    assert_eq!(code, None, "{reply}");
    // A delete makes room.
    let (status, _) = send(&stack, Method::DELETE, "/v1/jobs/one", "").await;
    assert_eq!(status, 200);
    wait_until("room after delete", Duration::from_secs(10), || async {
        let (status, _) = send(&stack, Method::POST, "/v1/jobs", &job("three", "")).await;
        (status == 201).then_some(())
    })
    .await;
    stack.stop().await;
}

#[tokio::test]
async fn openapi_lists_every_route_the_gateway_serves() {
    let stack = Stack::start(StackOptions::api_only()).await;
    let (status, document) = stack.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(document["openapi"], "3.1.0");
    let paths = document["paths"].as_object().expect("paths");
    assert!(paths.len() >= 15, "{}", paths.len());
    for (path, item) in paths {
        let concrete = path
            .replace("{id}", "no-such-job")
            .replace("{run_id}", "6a1c3f0e-9b7d-4e52-8c1a-5d2f7e90b3c4");
        for method in item.as_object().expect("item").keys() {
            let method =
                Method::from_bytes(method.to_ascii_uppercase().as_bytes()).expect("method");
            let (status, reply) = send(&stack, method.clone(), &concrete, "").await;
            // Served: anything but "no such route" / "method not allowed".
            let unrouted = status == 405
                || (status == 404
                    && reply["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("no such route")));
            assert!(
                !unrouted,
                "{method} {concrete} documented but not served: {status} {reply}"
            );
        }
    }
    // Typed operations document their answers: the put answers a PutReply
    // whose fields are those the gateway sends.
    let created = &paths["/v1/jobs"]["post"]["responses"]["201"]["content"]["application/json"]
        ["schema"]["$ref"];
    assert_eq!(
        created, "#/components/schemas/PutReply",
        "{}",
        paths["/v1/jobs"]
    );
    let put_reply = &document["components"]["schemas"]["PutReply"]["properties"];
    for field in ["ok", "job", "revision", "created"] {
        assert!(
            put_reply.get(field).is_some(),
            "PutReply lacks {field}: {put_reply}"
        );
    }
    let (status, reply) = stack.get("/v1/nothing-here").await;
    assert_eq!(status, 404, "{reply}");
    stack.stop().await;
}

/// One `jetcron gateway` process with `--protect-reads`; killed on drop.
struct GatewayProcess(std::process::Child);

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn protect_reads_asks_a_token_of_every_read_and_then_shows_secrets() {
    let stack = Stack::start(StackOptions {
        gateway: false,
        ..StackOptions::api_only()
    })
    .await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let _gateway = GatewayProcess(
        std::process::Command::new(env!("CARGO_BIN_EXE_jetcron"))
            .args(["gateway", "--http-addr", &format!("127.0.0.1:{port}")])
            .args(["--api-token", API_TOKEN, "--protect-reads"])
            .env("JETCRON_NATS_URL", stack.nats.url())
            .env("JETCRON_CLICKHOUSE_URL", stack.clickhouse.url())
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start jetcron gateway"),
    );
    let get = |path: &str, token: Option<&str>| {
        let mut request = stack.http.get(format!("{base}{path}"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            match request.send().await {
                Ok(r) => (
                    r.status().as_u16(),
                    r.json::<Value>().await.unwrap_or(Value::Null),
                ),
                Err(_) => (0, Value::Null),
            }
        }
    };
    wait_until("gateway answers", Duration::from_secs(20), || async {
        (get("/healthz", None).await.0 == 200).then_some(())
    })
    .await;
    stack.wait_for_nats_api().await;
    let (reply, code) = stack
        .api_put(
            r#"{"id":"billing-sync","schedule":"@every 1h","target":{"type":"http","url":"https://billing.example/sync",
            "headers":{"Authorization":"Bearer s3cret-billing-token"}}}"#,
        )
        .await;
    assert_eq!(code, None, "{reply}");
    for path in ["/v1/jobs", "/v1/jobs/billing-sync", "/v1/runs", "/v1/stats"] {
        for token in [None, Some("wrong-token-0123456789")] {
            let (status, reply) = get(path, token).await;
            assert_eq!(status, 401, "GET {path} with {token:?}: {reply}");
            assert!(reply["error"]["message"].is_string(), "{reply}");
        }
    }
    // Liveness and readiness stay open for probes.
    assert_eq!(get("/healthz", None).await.0, 200);
    let (status, job) = wait_until("job readable", Duration::from_secs(10), || async {
        let (status, job) = get("/v1/jobs/billing-sync", Some(API_TOKEN)).await;
        (status == 200).then_some((status, job))
    })
    .await;
    assert_eq!(status, 200);
    // Whoever holds a token may see what the definition holds.
    assert_eq!(
        job["job"]["job"]["target"]["headers"]["Authorization"], "Bearer s3cret-billing-token",
        "{job}"
    );
    stack.stop().await;
}

#[tokio::test]
async fn a_redacted_read_put_back_keeps_its_secrets_and_a_new_placeholder_is_refused() {
    let stack = Stack::start(StackOptions::api_only()).await;
    let definition = json!({"id": "billing.sync", "schedule": "@every 1h",
        "target": {"type": "http", "url": "https://billing.example/sync",
                   "headers": {"Authorization": "Bearer s3cret", "X-Team": "billing"}}});
    let (status, reply) = send(&stack, Method::POST, "/v1/jobs", &definition.to_string()).await;
    assert_eq!(status, 201, "{reply}");

    // What a reader sees, changed in one field and put back as it is.
    let (status, read) = send(&stack, Method::GET, "/v1/jobs/billing.sync", "").await;
    assert_eq!(status, 200, "{read}");
    let mut shown = read["job"]["job"].clone();
    assert_eq!(
        shown["target"]["headers"]["Authorization"], "<redacted>",
        "{read}"
    );
    shown["schedule"] = json!("@every 2h");
    let (status, reply) = send(
        &stack,
        Method::PUT,
        "/v1/jobs/billing.sync",
        &shown.to_string(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let (stored, code) = stack
        .api("jetcron.api.jobs.get", r#"{"id":"billing.sync"}"#)
        .await;
    assert_eq!(code, None, "{stored}");
    assert_eq!(stored["job"]["job"]["schedule"], "@every 2h");
    assert_eq!(
        stored["job"]["job"]["target"]["headers"],
        json!({"Authorization": "Bearer s3cret", "X-Team": "billing"}),
        "{stored}"
    );

    // A placeholder with no stored value behind it is refused by name, and nothing changes.
    let revision = stored["job"]["revision"].as_u64().expect("revision");
    let mut fresh = definition.clone();
    fresh["id"] = json!("billing.fresh");
    fresh["target"]["headers"]["Authorization"] = json!("<redacted>");
    let (status, reply) = send(&stack, Method::POST, "/v1/jobs", &fresh.to_string()).await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(
        reply["error"]["problems"][0]["field"], "target.headers.Authorization",
        "{reply}"
    );
    assert_eq!(
        reply["error"]["problems"][0]["code"], "redacted_placeholder",
        "{reply}"
    );
    let (status, _) = send(&stack, Method::GET, "/v1/jobs/billing.fresh", "").await;
    assert_eq!(status, 404);
    let (again, _) = stack
        .api("jetcron.api.jobs.get", r#"{"id":"billing.sync"}"#)
        .await;
    assert_eq!(again["job"]["revision"].as_u64(), Some(revision));
    stack.stop().await;
}
