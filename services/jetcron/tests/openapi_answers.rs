//! The gateway answers as `/openapi.json` says: every HTTP request of the
//! bad-input corpus (`tests/bad_input/`: its hand-written requests and its
//! definitions put over HTTP) and a happy path through every route, each
//! answer held to the document: its route and method are there, its status
//! is one the operation lists, its content type is the one listed for that
//! status, and its JSON body validates against the schema listed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use jetcron_testkit::{Stack, StackOptions, API_TOKEN};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// An answer as it came over the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

/// `method target` written on the wire as it is (no normalising), with
/// `headers`, the bearer `token` and `body`.
async fn exchange(
    stack: &Stack,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    token: Option<&str>,
    body: &[u8],
) -> Option<Answer> {
    let address = stack.http_base.trim_start_matches("http://");
    let mut head = format!(
        "{method} {target} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let sent = async {
        let mut socket = tokio::net::TcpStream::connect(address).await?;
        socket.write_all(head.as_bytes()).await?;
        socket.write_all(body).await?;
        let mut response = Vec::new();
        socket.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    // A body past the limit may be answered (413) and the connection closed
    // before it is all written: then there is nothing to hold to the document.
    let response = tokio::time::timeout(Duration::from_secs(20), sent)
        .await
        .ok()?
        .ok()?;
    let split = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(Answer {
        status,
        headers,
        body: response[split + 4..].to_vec(),
    })
}

/// The document's operation for `method path` (a captured segment matches
/// any one segment; the literal one wins), as `(template, operation)`.
fn operation<'d>(document: &'d Value, method: &str, target: &str) -> Option<(&'d str, &'d Value)> {
    let path = target.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').collect();
    let mut best: Option<(usize, &str, &Value)> = None;
    for (template, item) in document["paths"].as_object()? {
        let parts: Vec<&str> = template.split('/').collect();
        let fits = parts.len() == segments.len()
            && parts.iter().zip(&segments).all(|(p, s)| {
                *p == *s || (p.starts_with('{') && !s.is_empty() && *s != "." && *s != "..")
            });
        let literal = parts.iter().filter(|p| !p.starts_with('{')).count();
        if fits && best.is_none_or(|(l, _, _)| literal > l) {
            best = Some((literal, template, item));
        }
    }
    let (_, template, item) = best?;
    Some((template, item.get(method.to_ascii_lowercase())?))
}

/// Problems of `answer` to `method target` against `document`; an answer
/// to no documented route must be the API's 404 or 405 (with `Allow`).
fn problems(document: &Value, method: &str, target: &str, answer: &Answer) -> Vec<String> {
    let content_type = answer.headers.get("content-type").cloned();
    if content_type.is_none() && matches!(answer.status, 400 | 431) {
        // hyper refused the request itself (a raw space or CR LF in the
        // target, headers past its limits): no route saw it.
        return Vec::new();
    }
    let Some((template, operation)) = operation(document, method, target) else {
        let allowed =
            answer.status == 404 || (answer.status == 405 && answer.headers.contains_key("allow"));
        return match allowed && content_type.as_deref() == Some("application/json") {
            true => Vec::new(),
            false => vec![format!(
                "{method} {target}: no documented route, answered {} {content_type:?}",
                answer.status
            )],
        };
    };
    let here = format!("{method} {template} ({target:.80})");
    let Some(response) = operation["responses"].get(answer.status.to_string()) else {
        return vec![format!(
            "{here}: status {} is not documented",
            answer.status
        )];
    };
    let Some(content_type) = content_type else {
        return vec![format!("{here}: {} without a content type", answer.status)];
    };
    let Some(media) = response["content"].get(&content_type) else {
        return vec![format!(
            "{here}: {} answered {content_type}, documented {}",
            answer.status, response["content"]
        )];
    };
    if response["headers"]["WWW-Authenticate"]["required"] == true
        && !answer.headers.contains_key("www-authenticate")
    {
        return vec![format!(
            "{here}: {} without WWW-Authenticate",
            answer.status
        )];
    }
    if !content_type.starts_with("application/json") {
        return Vec::new();
    }
    let Ok(body) = serde_json::from_slice::<Value>(&answer.body) else {
        return vec![format!("{here}: {} body is not JSON", answer.status)];
    };
    let mut schema = media["schema"].clone();
    if let Value::Object(object) = &mut schema {
        object.insert("components".into(), document["components"].clone());
    } else {
        schema = json!({ "allOf": [schema], "components": document["components"] });
    }
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    validator
        .iter_errors(&body)
        .take(3)
        .map(|e| {
            format!(
                "{here}: {} body: {e} at {}",
                answer.status,
                e.instance_path()
            )
        })
        .collect()
}

// ---------------------------------------------------------------- the corpus

/// One HTTP request of the corpus.
struct Request {
    name: String,
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    token: Option<String>,
    body: Vec<u8>,
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/bad_input")
}

/// `{"$repeat": s, "times": n}` and `{"$map": {prefix, count, value}}` in a patch.
fn generated(value: &Value) -> Value {
    match value {
        Value::Object(o) if o.contains_key("$repeat") => {
            let times = o["times"].as_u64().unwrap_or(0) as usize;
            Value::String(o["$repeat"].as_str().unwrap_or_default().repeat(times))
        }
        Value::Object(o) if o.contains_key("$map") => {
            let m = &o["$map"];
            let prefix = m["prefix"].as_str().unwrap_or_default();
            (0..m["count"].as_u64().unwrap_or(0))
                .map(|i| (format!("{prefix}{i}"), m["value"].clone()))
                .collect::<Map<_, _>>()
                .into()
        }
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| (k.clone(), generated(v)))
            .collect::<Map<_, _>>()
            .into(),
        Value::Array(a) => a.iter().map(generated).collect(),
        other => other.clone(),
    }
}

fn merge(into: &mut Value, patch: Value) {
    match (into, patch) {
        (Value::Object(into), Value::Object(patch)) => {
            for (k, v) in patch {
                merge(into.entry(k).or_insert(Value::Null), v);
            }
        }
        (into, patch) => *into = patch,
    }
}

/// A case's body, as the corpus runner builds it (`tests/bad_input/README.md`).
fn body_of(case: &Value, key: &str, base: &Value) -> Vec<u8> {
    if let Some(text) = case.get("text") {
        return match text {
            Value::String(s) => s.clone().into_bytes(),
            Value::Array(parts) => parts
                .iter()
                .flat_map(|part| match part {
                    Value::String(s) => s.clone().into_bytes(),
                    Value::Object(o) if o.contains_key("repeat") => o["repeat"]
                        .as_str()
                        .unwrap_or_default()
                        .repeat(o["times"].as_u64().unwrap_or(0) as usize)
                        .into_bytes(),
                    Value::Object(o) => o["hex"]
                        .as_str()
                        .unwrap_or_default()
                        .split_whitespace()
                        .filter_map(|h| u8::from_str_radix(h, 16).ok())
                        .collect(),
                    _ => Vec::new(),
                })
                .collect(),
            _ => Vec::new(),
        };
    }
    if let Some(value) = case.get("json") {
        return value.to_string().into_bytes();
    }
    let mut definition = base.clone();
    definition["id"] = json!(key);
    merge(&mut definition, generated(&case["patch"]));
    for path in case["remove"].as_array().into_iter().flatten() {
        let parts: Vec<&str> = path.as_str().unwrap_or_default().split('.').collect();
        if let Some((last, parents)) = parts.split_last() {
            let mut at = &mut definition;
            for p in parents {
                at = &mut at[*p];
            }
            if let Some(object) = at.as_object_mut() {
                object.remove(*last);
            }
        }
    }
    definition.to_string().into_bytes()
}

fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every HTTP request of the corpus.
fn corpus_requests() -> Vec<Request> {
    let base: Value = serde_json::from_str(
        &std::fs::read_to_string(corpus_dir().join("base.json")).expect("base.json"),
    )
    .expect("base JSON");
    let mut requests = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("corpus")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json") && !p.ends_with("base.json"))
        .collect();
    files.sort();
    for file in files {
        let corpus: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).expect("file")).expect("JSON");
        for case in corpus["cases"].as_array().into_iter().flatten() {
            let key = match generated(&case["key"]) {
                Value::String(key) => key,
                _ => "bi-openapi".to_string(),
            };
            let body = body_of(case, &key, &base);
            let default_doors = json!(["http_post", "http_put"]);
            let doors = case.get("send").unwrap_or(&default_doors);
            for door in doors
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                let (method, target) = match door {
                    "http_post" => ("POST".to_string(), "/v1/jobs".to_string()),
                    "http_put" => (
                        "PUT".to_string(),
                        format!("/v1/jobs/{}", percent_encoded(&key)),
                    ),
                    _ => match door.strip_prefix("http:").and_then(|d| d.split_once(' ')) {
                        Some((method, target)) => (method.to_string(), target.to_string()),
                        None => continue,
                    },
                };
                let token = match case.get("token") {
                    Some(Value::Null) => None,
                    Some(Value::String(token)) => Some(token.clone()),
                    _ => Some(API_TOKEN.to_string()),
                };
                let headers = case["headers"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                requests.push(Request {
                    name: case["name"].as_str().unwrap_or_default().to_string(),
                    method,
                    target,
                    headers,
                    token,
                    body: body.clone(),
                });
            }
        }
    }
    requests
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_answers_of_the_corpus_and_a_happy_path_are_documented() {
    let stack = Stack::start(StackOptions::api_only()).await;
    let (status, document) = stack.get("/openapi.json").await;
    assert_eq!(status, 200);
    let fixture = json!({
        "id": "bi-fixture", "schedule": "@every 1h", "labels": {"corpus": "fixture"},
        "target": {"type": "nats", "subject": "svc.bad-input"},
    });
    let (status, reply) = stack.post("/v1/jobs", &fixture.to_string()).await;
    assert_eq!(status, 201, "{reply}");

    let mut failures = Vec::new();
    let requests = corpus_requests();
    assert!(requests.len() > 200, "{} corpus requests", requests.len());
    for request in &requests {
        let Some(answer) = exchange(
            &stack,
            &request.method,
            &request.target,
            &request.headers,
            request.token.as_deref(),
            &request.body,
        )
        .await
        else {
            continue;
        };
        for problem in problems(&document, &request.method, &request.target, &answer) {
            failures.push(format!("{}: {problem}", request.name));
        }
    }
    for (method, target, body) in happy_path() {
        let answer = exchange(
            &stack,
            method,
            &target,
            &[],
            Some(API_TOKEN),
            body.as_bytes(),
        )
        .await
        .unwrap_or_else(|| panic!("{method} {target}: no answer"));
        if answer.status >= 400 && !target.starts_with("/v1/runs/") {
            failures.push(format!(
                "happy path {method} {target}: {} {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            ));
        }
        for problem in problems(&document, method, &target, &answer) {
            failures.push(format!("happy path: {problem}"));
        }
    }
    // A method a route does not serve: 405 with the methods it does.
    let answer = exchange(&stack, "TRACE", "/v1/jobs", &[], None, b"")
        .await
        .expect("an answer");
    assert_eq!(answer.status, 405, "{answer:?}");
    let allow = answer.headers.get("allow").expect("Allow");
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");

    stack.stop().await;
    assert!(
        failures.is_empty(),
        "{} answers the document does not describe:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A request of every route that succeeds: (method, target, body).
fn happy_path() -> Vec<(&'static str, String, String)> {
    let job = json!({
        "id": "billing.report", "schedule": "0 0 2 * * *", "timezone": "Europe/Berlin",
        "labels": {"team": "billing"},
        "retry": {"max_attempts": 3, "backoff": "2s", "max_backoff": "1m"},
        "notify": {"webhook": "https://example.com/alerts"},
        "target": {"type": "http", "url": "https://example.com/report", "method": "POST"},
    })
    .to_string();
    let channel =
        json!({"type": "slack", "name": "ops", "url": "https://hooks.example.com/x"}).to_string();
    let run = "6a1c3f0e-9b7d-4e52-8c1a-5d2f7e90b3c4";
    let now = chrono::Utc::now();
    let instant =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let (from, to) = (
        instant(now - chrono::Duration::days(2)),
        instant(now - chrono::Duration::days(1)),
    );
    vec![
        ("GET", "/healthz".into(), String::new()),
        ("GET", "/readyz".into(), String::new()),
        ("GET", "/metrics".into(), String::new()),
        ("GET", "/openapi.json".into(), String::new()),
        ("GET", "/v1/pools".into(), String::new()),
        ("POST", "/v1/jobs".into(), job.clone()),
        ("PUT", "/v1/jobs/billing.report".into(), job),
        ("GET", "/v1/jobs?labels=team=billing&namespace=billing&limit=10".into(), String::new()),
        ("GET", "/v1/jobs/billing.report?next=3".into(), String::new()),
        ("GET", "/v1/jobs/billing.report/history".into(), String::new()),
        ("GET", "/v1/jobs/billing.report/runs?limit=5".into(), String::new()),
        ("POST", "/v1/jobs/billing.report/pause".into(), String::new()),
        ("POST", "/v1/jobs:resume".into(), r#"{"labels":{"team":"billing"}}"#.into()),
        ("POST", "/v1/jobs/billing.report/trigger".into(), "{}".into()),
        ("POST", "/v1/jobs/billing.report/backfill".into(), json!({"from": from, "to": to}).to_string()),
        ("GET", "/v1/schedules/preview?schedule=@daily&timezone=Asia/Tokyo&count=2".into(), String::new()),
        ("GET", format!("/v1/runs?status=failed,succeeded&from={from}&to={to}&limit=5"), String::new()),
        ("GET", "/v1/stats?job=billing.report".into(), String::new()),
        ("GET", "/v1/rejections?limit=5".into(), String::new()),
        ("GET", format!("/v1/runs/{run}"), String::new()),
        ("POST", format!("/v1/runs/{run}/kill"), r#"{"reason":"test"}"#.into()),
        ("POST", format!("/v1/runs/{run}/complete"), r#"{"status":"succeeded"}"#.into()),
        ("POST", "/v1/channels".into(), channel.clone()),
        ("PUT", "/v1/channels/ops".into(), channel),
        ("GET", "/v1/channels".into(), String::new()),
        ("GET", "/v1/channels/ops".into(), String::new()),
        ("DELETE", "/v1/channels/ops".into(), String::new()),
        ("POST", "/v1/tokens".into(), r#"{"namespace":"billing","role":"viewer","expires_in":"90d","description":" billing dashboards "}"#.into()),
        ("GET", "/v1/tokens".into(), String::new()),
        ("PUT", "/v1/namespaces/billing/policy".into(), r#"{"url_prefixes":["https://example.com"],"max_concurrent_runs":5}"#.into()),
        ("GET", "/v1/namespaces/billing/policy".into(), String::new()),
        ("DELETE", "/v1/namespaces/billing/policy".into(), String::new()),
        ("PUT", "/v1/namespaces/billing/bindings/user:alice@corp.example".into(), r#"{"role":"editor"}"#.into()),
        ("GET", "/v1/namespaces/*/bindings".into(), String::new()),
        ("DELETE", "/v1/namespaces/billing/bindings/user:alice@corp.example".into(), String::new()),
        ("DELETE", "/v1/jobs/billing.report".into(), String::new()),
    ]
}
