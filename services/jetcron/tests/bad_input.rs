//! The bad-input corpus (`tests/bad_input/*.json` at the repository root)
//! through every door a definition has — `jetcron.api.jobs.put` as a request
//! and fire-and-forget, `POST /v1/jobs`, `PUT /v1/jobs/{id}`, a write into
//! `jetcron_jobs` with the KV client and one past it — and through the other
//! NATS endpoints and HTTP routes.
//!
//! One stack serves every case, in phases, so that "nothing was stored" is a
//! check on the whole bucket rather than on the keys we thought of:
//! 1. every API door of every case, concurrently: each answer carries the
//!    case's error code, field and problems; afterwards the bucket holds the
//!    fixture job alone, unchanged;
//! 2. every bucket write: refused by the KV layer (bad key, too big) or
//!    written, and then it must come back as a `job.rejected` event (source
//!    `kv`) with the case's problems and be listed as invalid; the
//!    fire-and-forget puts of phase 1 likewise (source `api`);
//! 3. every service still works: probes, a valid put over NATS and HTTP, the
//!    fixture untouched, and one more invalid value is still rejected; the
//!    stack then stops cleanly (a service that failed or panicked fails here).
//!
//! A door marked `known_bug` (a product bug the corpus found) is sent and its
//! outcome reported, not asserted. The corpus format is described in
//! `tests/bad_input/README.md`; `--no-capture` shows the per-case report.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt as _;
use jetcron_core::subjects;
use jetcron_testkit::reqwest::{Method, Url};
use jetcron_testkit::{Stack, StackOptions, API_TOKEN};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Requests in flight at once: quick, and still gentle on two cores.
const CONCURRENCY: usize = 16;
/// The job the endpoint cases aim at; it must come out unchanged.
const FIXTURE: &str = "bi-fixture";
/// How long a rejection may take to reach ClickHouse and the gateway.
const REJECTION_WAIT: Duration = Duration::from_secs(30);
/// Jobs the liveness checks create.
const ALIVE_KEYS: [&str; 3] = ["bi-alive", "bi-alive-http", "bi-alive-sentinel"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_is_refused_at_every_door_and_nothing_crashes() {
    let cases = load_corpus();
    check_corpus(&cases);
    let stack = Stack::start(StackOptions {
        executor: false,
        ..StackOptions::default()
    })
    .await;
    let fixture_revision = put_fixture(&stack).await;
    let mut results = Results::default();

    let mut awaited = api_phase(&stack, &cases, &mut results).await;
    check_bucket_keys(&stack, &cases, &[], "the API phase", &mut results).await;
    check_no_policies(&stack, &mut results).await;
    let written = bucket_phase(&stack, &cases, &mut results).await;
    let written_keys: Vec<&str> = written.iter().map(|a| a.case.key.as_str()).collect();
    awaited.extend(written);
    check_rejections(&stack, &awaited, &mut results).await;
    check_alive(&stack, fixture_revision, &mut results).await;
    check_bucket_keys(&stack, &cases, &written_keys, "the run", &mut results).await;

    report(&cases, &results);
    stack.stop().await;
    let failures = results.failures();
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------- phases

async fn put_fixture(stack: &Stack) -> u64 {
    let definition = json!({
        "id": FIXTURE, "schedule": "@every 1h", "labels": {"corpus": "fixture"},
        "target": {"type": "nats", "subject": "svc.bad-input"},
    });
    let (reply, _) = stack.api_put(&definition.to_string()).await;
    reply["revision"]
        .as_u64()
        .unwrap_or_else(|| panic!("fixture: {reply}"))
}

/// Every door but the bucket writes, concurrently; fire-and-forget puts are
/// returned, to be matched with their rejections later.
async fn api_phase<'c>(
    stack: &Stack,
    cases: &'c [Case],
    results: &mut Results,
) -> Vec<Awaited<'c>> {
    let doors = cases
        .iter()
        .flat_map(|c| c.doors.iter().map(move |d| (c, d)))
        .filter(|(_, d)| !d.writes_bucket());
    let outcomes: Vec<_> = futures::stream::iter(doors)
        .map(|(case, door)| async move { (case, door, send(stack, case, door).await) })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    // The put endpoint serves its messages in order: once a request sent
    // after the fire-and-forget puts is answered, they have been handled,
    // and the bucket check that follows sees whatever they stored.
    stack.client.flush().await.expect("flush");
    stack.api_put("{}").await;
    let mut awaited = Vec::new();
    for (case, door, outcome) in outcomes {
        match outcome {
            Outcome::Published => awaited.push(Awaited {
                case,
                door: door.clone(),
                source: "api",
                revision: None,
            }),
            outcome => {
                let expect = case.expectation(door);
                let verdict = check_reply(&expect, &outcome);
                results.record(case, door, &expect, verdict, outcome.to_string());
            }
        }
    }
    awaited
}

/// The bucket writes, concurrently; the written ones are returned, to be
/// matched with their rejections.
async fn bucket_phase<'c>(
    stack: &Stack,
    cases: &'c [Case],
    results: &mut Results,
) -> Vec<Awaited<'c>> {
    let doors = cases
        .iter()
        .flat_map(|c| c.doors.iter().map(move |d| (c, d)))
        .filter(|(_, d)| d.writes_bucket());
    let outcomes: Vec<_> = futures::stream::iter(doors)
        .map(|(case, door)| async move { (case, door, send(stack, case, door).await) })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut awaited = Vec::new();
    for (case, door, outcome) in outcomes {
        let expect = case.expectation(door);
        match outcome {
            Outcome::Written(revision) if expect.refused.is_none() => awaited.push(Awaited {
                case,
                door: door.clone(),
                source: "kv",
                revision: Some(revision),
            }),
            outcome => {
                let verdict = check_reply(&expect, &outcome);
                results.record(case, door, &expect, verdict, outcome.to_string());
            }
        }
    }
    awaited
}

/// Nothing stored but the fixture, the liveness jobs, the `allowed` keys
/// (bucket writes) and what an API door with a known bug may have stored
/// (the report lists those).
async fn check_bucket_keys(
    stack: &Stack,
    cases: &[Case],
    allowed: &[&str],
    after: &str,
    results: &mut Results,
) {
    let by_bugs: BTreeSet<&str> = cases
        .iter()
        .filter(|c| {
            c.doors
                .iter()
                .any(|d| !d.writes_bucket() && c.expectation(d).known_bug.is_some())
        })
        .map(|c| c.key.as_str())
        .collect();
    let bucket = stack.jobs_bucket().await;
    let keys: BTreeSet<String> = bucket
        .keys()
        .await
        .expect("list keys")
        .filter_map(|k| async move { k.ok() })
        .collect()
        .await;
    for key in keys {
        let expected = key == FIXTURE
            || ALIVE_KEYS.contains(&key.as_str())
            || allowed.contains(&key.as_str())
            || by_bugs.contains(key.as_str());
        if !expected {
            results.fail(
                &format!("nothing stored after {after}"),
                format!("key {key:?} is in the bucket"),
            );
        }
    }
}

/// No policy or binding stored by a refused request on
/// `/v1/namespaces/{namespace}/…`.
async fn check_no_policies(stack: &Stack, results: &mut Results) {
    for name in [
        jetcron_core::subjects::POLICIES_BUCKET,
        jetcron_core::subjects::BINDINGS_BUCKET,
    ] {
        let bucket = stack.js.get_key_value(name).await.expect("bucket");
        let keys: Vec<String> = bucket
            .keys()
            .await
            .expect("list keys")
            .filter_map(|k| async move { k.ok() })
            .collect()
            .await;
        if !keys.is_empty() {
            results.fail(
                &format!("nothing stored in {name} after the API phase"),
                format!("keys {keys:?} are in it"),
            );
        }
    }
}

/// A `job.rejected` event a door should have caused.
struct Awaited<'c> {
    case: &'c Case,
    door: Door,
    /// `api` (fire-and-forget put) or `kv` (bucket write).
    source: &'static str,
    /// The bucket revision written.
    revision: Option<u64>,
}

impl Awaited<'_> {
    fn find<'r>(&self, rejections: &'r [Value]) -> Option<&'r Value> {
        rejections.iter().find(|r| {
            r["source"] == self.source
                && r["job_id"] == self.case.key.as_str()
                && self.revision.is_none_or(|rev| r["revision"] == rev)
        })
    }
}

/// Each awaited rejection arrives with the expected problems, each written
/// value is listed as invalid, and the rejection filter finds hostile ids.
async fn check_rejections(stack: &Stack, awaited: &[Awaited<'_>], results: &mut Results) {
    assert!(
        awaited.len() < 450,
        "more rejections awaited than one /v1/rejections page holds"
    );
    // Known bugs are not waited for: they may never come.
    let must_see: Vec<&Awaited> = awaited
        .iter()
        .filter(|a| a.case.expectation(&a.door).known_bug.is_none())
        .collect();
    let complete = poll(REJECTION_WAIT, || async {
        let listed = all_rejections(stack).await?;
        must_see
            .iter()
            .all(|a| a.find(&listed).is_some())
            .then_some(listed)
    })
    .await;
    let rejections = match complete {
        Some(listed) => listed,
        None => all_rejections(stack).await.unwrap_or_default(),
    };
    let (status, listing) = stack.get("/v1/jobs").await;
    if status != 200 {
        results.fail("GET /v1/jobs after the bucket writes", listing.to_string());
    }
    let jobs = listing["jobs"].as_array().cloned().unwrap_or_default();
    for a in awaited {
        let expect = a.case.expectation(&a.door);
        let found = a.find(&rejections);
        let observed = found.map_or("no job.rejected".into(), |r| {
            format!("job.rejected {}", r["problems"])
        });
        let verdict = match found {
            None => Err(format!(
                "no job.rejected from {} for {:?}",
                a.source, a.case.key
            )),
            Some(r) => {
                let problems = problem_pairs(&r["problems"]);
                match missing_problem(&expect.rejected, &problems) {
                    Some(p) => Err(format!("job.rejected lacks {p:?}: {problems:?}")),
                    None => Ok(()),
                }
            }
        };
        // A written value is listed as invalid: never scheduled.
        let verdict = verdict.and_then(|()| {
            let job = jobs.iter().find(|j| j["id"] == a.case.key.as_str());
            if a.source == "kv" && job.is_none_or(|j| j["valid"] != false) {
                return Err(format!("GET /v1/jobs lists {:?} as {job:?}", a.case.key));
            }
            Ok(())
        });
        results.record(a.case, &a.door, &expect, verdict, observed);
    }
    // The job filter binds the value: hostile ids find their own rejection.
    for a in awaited.iter().filter(|a| a.door == Door::NatsPub) {
        let mut url = Url::parse("http://gateway/v1/rejections").expect("url");
        url.query_pairs_mut().append_pair("job", &a.case.key);
        let path = format!("{}?{}", url.path(), url.query().unwrap_or_default());
        let (status, reply) = stack.get(&path).await;
        let hit = reply["rejections"]
            .as_array()
            .is_some_and(|l| l.iter().any(|r| r["job_id"] == a.case.key.as_str()));
        if status != 200 || (!hit && a.case.expectation(&a.door).known_bug.is_none()) {
            results.fail(
                &format!("{} via {path}", a.case.name),
                format!("{status} {reply}"),
            );
        }
    }
}

/// Probes, a valid put over NATS and HTTP, the fixture unchanged, and the
/// ticker and projector still turning a bad bucket value into a rejection.
async fn check_alive(stack: &Stack, fixture_revision: u64, results: &mut Results) {
    for probe in ["/healthz", "/readyz"] {
        let (status, body) = stack.get(probe).await;
        if status != 200 {
            results.fail(&format!("alive: {probe}"), format!("{status} {body}"));
        }
    }
    let valid = |id: &str| {
        json!({"id": id, "schedule": "@every 1h", "target": {"type": "nats", "subject": "svc.bad-input"}})
            .to_string()
    };
    let (reply, code) = stack.api_put(&valid(ALIVE_KEYS[0])).await;
    if reply["ok"] != true {
        results.fail("alive: jobs.put", format!("{reply} {code:?}"));
    }
    let (status, reply) = stack.post("/v1/jobs", &valid(ALIVE_KEYS[1])).await;
    if status != 201 {
        results.fail("alive: POST /v1/jobs", format!("{status} {reply}"));
    }
    let (reply, _) = stack
        .api(
            "jetcron.api.jobs.get",
            &json!({ "id": FIXTURE }).to_string(),
        )
        .await;
    let job = &reply["job"];
    if job["revision"] != fixture_revision || job["valid"] != true || job["job"]["paused"] == true {
        results.fail(
            "alive: fixture unchanged",
            format!("was revision {fixture_revision}, now {reply}"),
        );
    }
    let sentinel = br#"{"schedule":"0 0 30 2 *","target":{"type":"nats","subject":"svc.x"}}"#;
    let revision = stack.kv_put(ALIVE_KEYS[2], sentinel).await;
    let seen = poll(REJECTION_WAIT, || async {
        let (_, listed) = stack
            .get(&format!("/v1/rejections?job={}", ALIVE_KEYS[2]))
            .await;
        listed["rejections"]
            .as_array()
            .is_some_and(|l| l.iter().any(|r| r["revision"] == revision))
            .then_some(())
    })
    .await;
    if seen.is_none() {
        results.fail(
            "alive: ticker and projector",
            "a last invalid value was never rejected".into(),
        );
    }
}

/// `probe` every 250 ms until it answers or `timeout` passes (a timeout is a
/// verdict to report, not a panic as in `wait_until`).
async fn poll<T, F, Fut>(timeout: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return Some(value);
        }
        if tokio::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The newest 500 rejections; `None` until the projector made its table.
async fn all_rejections(stack: &Stack) -> Option<Vec<Value>> {
    let (status, reply) = stack.get("/v1/rejections?limit=500").await;
    (status == 200).then(|| reply["rejections"].as_array().cloned().unwrap_or_default())
}

// ---------------------------------------------------------------- doors

/// Where a case is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Door {
    /// `nats req jetcron.api.jobs.put`.
    NatsPut,
    /// `nats pub jetcron.api.jobs.put`: no reply, a `job.rejected` is due.
    NatsPub,
    /// `POST /v1/jobs`.
    HttpPost,
    /// `PUT /v1/jobs/<key>`.
    HttpPut,
    /// `nats kv put jetcron_jobs <key>`.
    KvPut,
    /// A publish to `$KV.jetcron_jobs.<key>`: the bucket written past the KV
    /// client's key check, so keys it refuses arrive all the same.
    KvRaw,
    /// A request to any API subject.
    Nats(String),
    /// Any HTTP request, the path sent byte for byte.
    Http { method: String, path: String },
}

impl Door {
    fn parse(text: &str) -> Result<Self, String> {
        let fixed = [
            Door::NatsPut,
            Door::NatsPub,
            Door::HttpPost,
            Door::HttpPut,
            Door::KvPut,
            Door::KvRaw,
        ];
        if let Some(door) = fixed.into_iter().find(|d| d.label() == text) {
            return Ok(door);
        }
        if let Some(subject) = text.strip_prefix("nats:") {
            return Ok(Door::Nats(subject.to_string()));
        }
        let (method, path) = text
            .strip_prefix("http:")
            .and_then(|route| route.split_once(' '))
            .ok_or_else(|| format!("unknown door {text:?}"))?;
        Ok(Door::Http {
            method: method.to_string(),
            path: path.to_string(),
        })
    }

    /// The name overrides and `known_bug_doors` use.
    fn label(&self) -> &'static str {
        match self {
            Door::NatsPut => "nats_put",
            Door::NatsPub => "nats_pub",
            Door::HttpPost => "http_post",
            Door::HttpPut => "http_put",
            Door::KvPut => "kv_put",
            Door::KvRaw => "kv_raw",
            Door::Nats(_) => "nats",
            Door::Http { .. } => "http",
        }
    }

    /// As the report shows it.
    fn describe(&self) -> String {
        match self {
            Door::Nats(subject) => format!("nats {subject}"),
            Door::Http { method, path } => {
                let path: String = path.escape_debug().to_string().chars().take(60).collect();
                format!("http {method} {path}")
            }
            other => other.label().to_string(),
        }
    }

    /// Whether it writes into the bucket (phase 2) instead of asking the API.
    fn writes_bucket(&self) -> bool {
        matches!(self, Door::KvPut | Door::KvRaw)
    }
}

/// What a door did with a case.
#[derive(Debug)]
enum Outcome {
    /// An answer: HTTP status (NATS: `Nats-Service-Error-Code`, 200 without
    /// one) and the JSON body (`Null` when not JSON).
    Reply { status: u16, body: Value },
    /// Refused before jetcron saw it (client library, NATS server, KV layer).
    Refused(String),
    /// Written into the bucket at this revision.
    Written(u64),
    /// Published without a reply subject.
    Published,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Reply { status, body } => {
                let text: String = body.to_string().chars().take(400).collect();
                write!(f, "{status} {text}")
            }
            Outcome::Refused(why) => write!(f, "refused: {why}"),
            Outcome::Written(revision) => write!(f, "written at revision {revision}"),
            Outcome::Published => write!(f, "published"),
        }
    }
}

async fn send(stack: &Stack, case: &Case, door: &Door) -> Outcome {
    let body = case.body.clone();
    match door {
        Door::NatsPut => nats_request(stack, subjects::API_JOBS_PUT, body).await,
        Door::Nats(subject) => nats_request(stack, subject, body).await,
        Door::NatsPub => match stack
            .client
            .publish(subjects::API_JOBS_PUT, body.into())
            .await
        {
            Ok(()) => Outcome::Published,
            Err(e) => Outcome::Refused(e.to_string()),
        },
        Door::HttpPost => http_request(stack, case, Method::POST, &["v1", "jobs"]).await,
        Door::HttpPut => http_request(stack, case, Method::PUT, &["v1", "jobs", &case.key]).await,
        Door::Http { method, path } => raw_http(stack, case, method, path).await,
        Door::KvPut => match stack.jobs_bucket().await.put(&case.key, body.into()).await {
            Ok(revision) => Outcome::Written(revision),
            Err(e) => Outcome::Refused(format!("{e} ({:?})", e.kind())),
        },
        Door::KvRaw => {
            let subject = format!("$KV.{}.{}", subjects::JOBS_BUCKET, case.key);
            let ack = match stack.js.publish(subject, body.into()).await {
                Ok(ack) => ack.await,
                Err(e) => return Outcome::Refused(e.to_string()),
            };
            match ack {
                Ok(ack) => Outcome::Written(ack.sequence),
                Err(e) => Outcome::Refused(e.to_string()),
            }
        }
    }
}

async fn nats_request(stack: &Stack, subject: &str, body: Vec<u8>) -> Outcome {
    match stack.client.request(subject.to_string(), body.into()).await {
        Ok(reply) => Outcome::Reply {
            status: reply
                .headers
                .as_ref()
                .and_then(|h| h.get(async_nats::service::NATS_SERVICE_ERROR_CODE))
                .and_then(|v| v.as_str().parse().ok())
                .unwrap_or(200),
            body: serde_json::from_slice(&reply.payload).unwrap_or(Value::Null),
        },
        Err(e) => Outcome::Refused(e.to_string()),
    }
}

/// A request with the path made of percent-encoded `segments` (keys such as
/// `../etc` or `a b` stay one segment).
async fn http_request(stack: &Stack, case: &Case, method: Method, segments: &[&str]) -> Outcome {
    let mut url = Url::parse(&stack.http_base).expect("gateway URL");
    url.path_segments_mut().expect("base URL").extend(segments);
    // A fresh connection per case: after an early answer (413 before the
    // body was read) the gateway closes its side, and a pooled client can
    // write the next case into that closing socket (a broken pipe that says
    // nothing about the case).
    let client = jetcron_testkit::reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("HTTP client");
    let mut request = client.request(method, url).body(case.body.clone());
    if let Some(token) = &case.token {
        request = request.bearer_auth(token);
    }
    for (name, value) in &case.headers {
        request = request.header(name, value);
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let bytes = response.bytes().await.unwrap_or_default();
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            Outcome::Reply { status, body }
        }
        Err(e) => Outcome::Refused(format!("{e:?}")),
    }
}

/// HTTP/1.1 written by hand, so the path reaches the gateway as the corpus
/// spells it (a client library would resolve `..` and encode spaces).
async fn raw_http(stack: &Stack, case: &Case, method: &str, path: &str) -> Outcome {
    let address = stack.http_base.trim_start_matches("http://");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n",
        case.body.len()
    );
    if let Some(token) = &case.token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    for (name, value) in &case.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let exchange = async {
        let mut socket = tokio::net::TcpStream::connect(address).await?;
        socket.write_all(head.as_bytes()).await?;
        socket.write_all(&case.body).await?;
        let mut response = Vec::new();
        socket.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = match tokio::time::timeout(Duration::from_secs(10), exchange).await {
        Ok(Ok(response)) => String::from_utf8_lossy(&response).into_owned(),
        Ok(Err(e)) => return Outcome::Refused(e.to_string()),
        Err(_) => return Outcome::Refused("no answer within 10s".into()),
    };
    // The gateway's JSON answers carry a Content-Length (never chunked).
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    Outcome::Reply {
        status: head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        body: serde_json::from_str(body).unwrap_or(Value::Null),
    }
}

// ---------------------------------------------------------------- expectations

/// What a door must answer.
#[derive(Debug, Default)]
struct Expect {
    status: Option<u16>,
    code: Option<String>,
    /// `Some(None)`: the error names no field. A trailing `*` is a prefix.
    field: Option<Option<String>>,
    /// (field, code) pairs that must all be among the error's problems.
    problems: Vec<(String, String)>,
    message_contains: Option<String>,
    /// A successful answer (`"ok": true`) is expected.
    ok: bool,
    /// Refused before jetcron saw it, with an error containing this.
    refused: Option<String>,
    /// The server answers before the client has finished sending (a header
    /// past its buffer) and closes: the client may see its write fail
    /// instead of the answer. Either counts.
    answer_or_closed: bool,
    /// Problems the `job.rejected` must carry (bucket writes, nats_pub);
    /// `problems` unless given.
    rejected: Vec<(String, String)>,
    known_bug: Option<String>,
}

impl Expect {
    fn from_json(o: &Map<String, Value>) -> Result<Self, String> {
        let text = |key: &str| o.get(key).and_then(Value::as_str).map(str::to_string);
        let problems = pairs(o.get("problems"))?;
        let code = text("code");
        let status = match o.get("status").and_then(Value::as_u64) {
            Some(s) => Some(u16::try_from(s).map_err(|e| e.to_string())?),
            None => code.as_deref().map(status_of).transpose()?,
        };
        Ok(Self {
            status,
            code,
            field: o.get("field").map(|f| f.as_str().map(str::to_string)),
            rejected: match o.get("rejected") {
                Some(list) => pairs(Some(list))?,
                None => problems.clone(),
            },
            problems,
            message_contains: text("message_contains"),
            ok: o.get("ok").and_then(Value::as_bool).unwrap_or(false),
            refused: text("refused"),
            answer_or_closed: o
                .get("answer_or_closed")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            known_bug: text("known_bug"),
        })
    }
}

/// `[["field","code"], ...]`.
fn pairs(list: Option<&Value>) -> Result<Vec<(String, String)>, String> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    list.as_array()
        .ok_or(format!("expected a list of [field, code], got {list}"))?
        .iter()
        .map(|p| match (p[0].as_str(), p[1].as_str()) {
            (Some(f), Some(c)) => Ok((f.to_string(), c.to_string())),
            _ => Err(format!("expected [field, code], got {p}")),
        })
        .collect()
}

/// The one table of error codes to statuses (`jetcron_core::api`).
fn status_of(code: &str) -> Result<u16, String> {
    Ok(match code {
        "invalid_request" | "invalid_job" => 400,
        "unauthorized" => 401,
        "not_found" => 404,
        "conflict" | "limit_exceeded" => 409,
        "too_large" => 413,
        other => return Err(format!("unknown error code {other:?}")),
    })
}

/// Compare what a door did with what it must do; `Err` says what differs.
fn check_reply(expect: &Expect, outcome: &Outcome) -> Result<(), String> {
    if let Some(substring) = &expect.refused {
        return match outcome {
            Outcome::Refused(why) if contains(why, substring) => Ok(()),
            other => Err(format!(
                "expected a refusal with {substring:?}, got {other}"
            )),
        };
    }
    let Outcome::Reply { status, body } = outcome else {
        if expect.answer_or_closed
            && matches!(outcome, Outcome::Refused(why) if contains(why, "Broken pipe") || contains(why, "reset"))
        {
            return Ok(());
        }
        return Err(format!("expected an answer, got {outcome}"));
    };
    let error = &body["error"];
    let mut wrong = Vec::new();
    if *status >= 500 {
        wrong.push(format!("server error {status}"));
    }
    if let Some(want) = expect.status.filter(|want| want != status) {
        wrong.push(format!("status {status}, want {want}"));
    }
    if expect.ok && body["ok"] != true {
        wrong.push("ok is not true".into());
    }
    if let Some(code) = &expect.code {
        if body["ok"] != false || error["code"] != code.as_str() {
            wrong.push(format!("code {}, want {code:?}", error["code"]));
        }
    }
    if let Some(want) = &expect.field {
        let got = error["field"].as_str();
        let same = match (got, want) {
            (Some(got), Some(want)) => field_matches(got, want),
            (got, want) => got == want.as_deref(),
        };
        if !same {
            wrong.push(format!("field {got:?}, want {want:?}"));
        }
    }
    let problems = problem_pairs(&error["problems"]);
    if let Some(missing) = missing_problem(&expect.problems, &problems) {
        wrong.push(format!("no problem {missing:?} among {problems:?}"));
    }
    if let Some(substring) = &expect.message_contains {
        if !contains(error["message"].as_str().unwrap_or_default(), substring) {
            wrong.push(format!("message without {substring:?}"));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("{}; got {outcome}", wrong.join("; ")))
    }
}

fn problem_pairs(problems: &Value) -> Vec<(String, String)> {
    let text = |p: &Value, k: &str| p[k].as_str().unwrap_or_default().to_string();
    problems
        .as_array()
        .map(|list| {
            list.iter()
                .map(|p| (text(p, "field"), text(p, "code")))
                .collect()
        })
        .unwrap_or_default()
}

/// The first expected (field, code) pair not among `got`.
fn missing_problem<'a>(
    expected: &'a [(String, String)],
    got: &[(String, String)],
) -> Option<&'a (String, String)> {
    expected.iter().find(|(field, code)| {
        !got.iter()
            .any(|(f, c)| c == code && field_matches(f, field))
    })
}

/// A field name, or a prefix ending in `*` (paths hundreds of levels deep).
fn field_matches(got: &str, want: &str) -> bool {
    match want.strip_suffix('*') {
        Some(prefix) => got.starts_with(prefix),
        None => got == want,
    }
}

fn contains(text: &str, substring: &str) -> bool {
    text.to_lowercase().contains(&substring.to_lowercase())
}

// ---------------------------------------------------------------- the corpus

/// One entry of the corpus, its body built.
#[derive(Debug)]
struct Case {
    name: String,
    file: String,
    /// The job id the case names: KV key, PUT path, rejection job id.
    key: String,
    body: Vec<u8>,
    doors: Vec<Door>,
    headers: Vec<(String, String)>,
    /// Bearer token of HTTP requests; `None` sends none.
    token: Option<String>,
    expect: Map<String, Value>,
    overrides: Map<String, Value>,
}

impl Case {
    /// `expect`, then `overrides["*"]`, then the door's override, key by key.
    fn expectation(&self, door: &Door) -> Expect {
        let mut merged = self.expect.clone();
        for label in ["*", door.label()] {
            if let Some(Value::Object(over)) = self.overrides.get(label) {
                merged.extend(over.clone());
            }
        }
        Expect::from_json(&merged)
            .unwrap_or_else(|e| panic!("case {:?} ({}): {e}", self.name, self.file))
    }
}

/// Enough cases, unique names, and one key per rejection to wait for.
fn check_corpus(cases: &[Case]) {
    assert!(cases.len() >= 60, "the corpus has {} cases", cases.len());
    let mut names = BTreeSet::new();
    let mut rejection_keys = BTreeMap::new();
    for case in cases {
        assert!(names.insert(&case.name), "two cases named {:?}", case.name);
        let rejected = case
            .doors
            .iter()
            .any(|d| d.writes_bucket() || *d == Door::NatsPub);
        if let Some(other) = rejected
            .then(|| rejection_keys.insert(&case.key, &case.name))
            .flatten()
        {
            panic!(
                "cases {other:?} and {:?} share key {:?}",
                case.name, case.key
            );
        }
    }
}

/// Every case of every `*.json` of the corpus but `base.json`, file by file.
fn load_corpus() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/bad_input");
    let base = read_json(&dir.join("base.json"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter(|p| p.file_name().is_some_and(|n| n != "base.json"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for path in files {
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for raw in read_json(&path)["cases"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let case = build_case(&base, &file, &raw)
                .unwrap_or_else(|e| panic!("case {} in {file}: {e}", raw["name"]));
            cases.push(case);
        }
    }
    cases
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

const CASE_FIELDS: [&str; 14] = [
    "name",
    "why",
    "key",
    "patch",
    "remove",
    "json",
    "text",
    "send",
    "headers",
    "token",
    "expect",
    "overrides",
    "known_bug",
    "known_bug_doors",
];

fn build_case(base: &Value, file: &str, raw: &Value) -> Result<Case, String> {
    let object = raw.as_object().ok_or("a case is a JSON object")?;
    if let Some(unknown) = object.keys().find(|k| !CASE_FIELDS.contains(&k.as_str())) {
        return Err(format!("unknown case field {unknown:?}"));
    }
    let key = match raw.get("key").map(expand).transpose()? {
        None => String::new(),
        Some(Value::String(key)) => key,
        Some(other) => return Err(format!("key is a string or a $repeat, got {other}")),
    };
    let doors: Vec<Door> = match raw.get("send") {
        None => vec![Door::NatsPut, Door::HttpPost, Door::HttpPut, Door::KvPut],
        Some(list) => list
            .as_array()
            .ok_or("send is a list")?
            .iter()
            .map(|d| Door::parse(d.as_str().unwrap_or_default()))
            .collect::<Result<_, _>>()?,
    };
    let keyed = doors
        .iter()
        .any(|d| d.writes_bucket() || matches!(d, Door::HttpPut | Door::NatsPub));
    if keyed && raw.get("key").is_none() {
        return Err("a case sent to http_put, kv_put, kv_raw or nats_pub needs a key".into());
    }
    let token = match raw.get("token") {
        None => Some(API_TOKEN.to_string()),
        Some(Value::Null) => None,
        Some(Value::String(t)) => Some(t.clone()),
        Some(other) => return Err(format!("token is a string or null, got {other}")),
    };
    let mut overrides = raw["overrides"].as_object().cloned().unwrap_or_default();
    // A known bug applies to the doors it names, or to all.
    if let Some(bug) = raw.get("known_bug") {
        let labels: Vec<&str> = match raw.get("known_bug_doors") {
            None => vec!["*"],
            Some(list) => list
                .as_array()
                .ok_or("known_bug_doors is a list")?
                .iter()
                .map(|d| d.as_str().unwrap_or_default())
                .collect(),
        };
        for label in labels {
            if label != "*" && !doors.iter().any(|d| d.label() == label) {
                return Err(format!(
                    "known_bug_doors names {label:?}, which is not sent"
                ));
            }
            let over = overrides.entry(label).or_insert_with(|| json!({}));
            over.as_object_mut()
                .ok_or("overrides are objects")?
                .insert("known_bug".into(), bug.clone());
        }
    }
    let case = Case {
        name: raw["name"].as_str().ok_or("missing name")?.to_string(),
        file: file.to_string(),
        body: build_body(base, &key, raw)?,
        key,
        doors,
        headers: raw["headers"]
            .as_object()
            .map(|h| {
                h.iter()
                    .map(|(k, v)| {
                        // A value may be a generator (`{"$repeat":..}`).
                        let value = match expand(v)? {
                            Value::String(text) => text,
                            other => return Err(format!("header {k}: {other} is not a string")),
                        };
                        Ok((k.clone(), value))
                    })
                    .collect::<Result<Vec<_>, String>>()
            })
            .transpose()?
            .unwrap_or_default(),
        token,
        expect: raw["expect"].as_object().cloned().ok_or("missing expect")?,
        overrides,
    };
    for door in &case.doors {
        case.expectation(door);
    }
    Ok(case)
}

/// The bytes of a case: `text` (a string, or parts), `json` (a value, sent as
/// its JSON text), or else the base definition with `id` = `key`, `patch`
/// merged in and the dotted paths of `remove` taken out.
fn build_body(base: &Value, key: &str, raw: &Value) -> Result<Vec<u8>, String> {
    if let Some(text) = raw.get("text") {
        return text_bytes(text);
    }
    if let Some(value) = raw.get("json") {
        return serde_json::to_vec(value).map_err(|e| e.to_string());
    }
    let mut definition = base.clone();
    definition["id"] = Value::String(key.to_string());
    if let Some(patch) = raw.get("patch") {
        merge(&mut definition, &expand(patch)?);
    }
    for path in raw["remove"].as_array().cloned().unwrap_or_default() {
        remove_path(
            &mut definition,
            path.as_str().ok_or("remove lists dotted paths")?,
        );
    }
    serde_json::to_vec(&definition).map_err(|e| e.to_string())
}

/// `text`: a string, or a list of strings, `{"repeat":s,"times":n}` and
/// `{"hex":"ff fe"}` (raw bytes, such as invalid UTF-8).
fn text_bytes(text: &Value) -> Result<Vec<u8>, String> {
    let parts = match text {
        Value::String(s) => return Ok(s.as_bytes().to_vec()),
        Value::Array(parts) => parts,
        other => return Err(format!("text is a string or a list, got {other}")),
    };
    let mut bytes = Vec::new();
    for part in parts {
        match part {
            Value::String(s) => bytes.extend_from_slice(s.as_bytes()),
            Value::Object(o) if o.contains_key("repeat") => {
                bytes.extend(repeat(&o["repeat"], &o["times"])?.into_bytes());
            }
            Value::Object(o) if o.contains_key("hex") => {
                bytes.extend(hex(o["hex"].as_str().ok_or("hex is a string")?)?);
            }
            other => return Err(format!("unknown text part {other}")),
        }
    }
    Ok(bytes)
}

fn repeat(unit: &Value, times: &Value) -> Result<String, String> {
    let unit = unit.as_str().ok_or("repeat is a string")?;
    let times = times.as_u64().ok_or("times is a number")?;
    Ok(unit.repeat(usize::try_from(times).map_err(|e| e.to_string())?))
}

fn hex(text: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| format!("bad hex {text:?}"))
        })
        .collect()
}

/// Generators in a patch: `{"$repeat":s,"times":n}` → a string;
/// `{"$map":{"prefix","count","value"}}` → an object of `count` entries.
fn expand(value: &Value) -> Result<Value, String> {
    Ok(match value {
        Value::Object(o) if o.contains_key("$repeat") => repeat(&o["$repeat"], &o["times"])?.into(),
        Value::Object(o) if o.contains_key("$map") => {
            let spec = &o["$map"];
            let prefix = spec["prefix"].as_str().ok_or("$map.prefix is a string")?;
            let count = spec["count"].as_u64().ok_or("$map.count is a number")?;
            (0..count)
                .map(|i| (format!("{prefix}{i}"), spec["value"].clone()))
                .collect::<Map<_, _>>()
                .into()
        }
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| Ok((k.clone(), expand(v)?)))
            .collect::<Result<Map<_, _>, String>>()?
            .into(),
        Value::Array(items) => items.iter().map(expand).collect::<Result<_, _>>()?,
        other => other.clone(),
    })
}

/// Objects merge key by key; anything else (null too) replaces.
fn merge(into: &mut Value, patch: &Value) {
    match (into, patch) {
        (Value::Object(into), Value::Object(patch)) => {
            for (k, v) in patch {
                match into.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
                    _ => {
                        into.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (into, patch) => *into = patch.clone(),
    }
}

fn remove_path(value: &mut Value, path: &str) {
    match path.split_once('.') {
        None => {
            if let Some(o) = value.as_object_mut() {
                o.remove(path);
            }
        }
        Some((head, rest)) => {
            if let Some(inner) = value.get_mut(head) {
                remove_path(inner, rest);
            }
        }
    }
}

// ---------------------------------------------------------------- report

/// The verdict on one door of one case.
#[derive(Debug)]
enum Verdict {
    Pass,
    Fail(String),
    KnownBug { bug: String, observed: String },
}

/// Verdicts by (case, door); checks that are no case's are named for what
/// they check.
#[derive(Default)]
struct Results {
    rows: BTreeMap<(String, String), Verdict>,
}

impl Results {
    fn record(
        &mut self,
        case: &Case,
        door: &Door,
        expect: &Expect,
        result: Result<(), String>,
        observed: String,
    ) {
        let verdict = match (&expect.known_bug, result) {
            (Some(bug), _) => Verdict::KnownBug {
                bug: bug.clone(),
                observed,
            },
            (None, Ok(())) => Verdict::Pass,
            (None, Err(why)) => Verdict::Fail(why),
        };
        self.rows
            .insert((case.name.clone(), door.describe()), verdict);
    }

    fn fail(&mut self, check: &str, why: String) {
        self.rows
            .insert((check.to_string(), "-".into()), Verdict::Fail(why));
    }

    fn failures(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter_map(|((case, door), verdict)| match verdict {
                Verdict::Fail(why) => Some(format!("{case} [{door}]: {why}")),
                _ => None,
            })
            .collect()
    }
}

/// Per case, each door it was sent to and the verdict; then the known bugs.
fn report(cases: &[Case], results: &Results) {
    let mut passed = 0;
    let mut bugs = Vec::new();
    println!("bad-input corpus: {} cases", cases.len());
    for case in cases {
        let doors: Vec<String> = results
            .rows
            .range((case.name.clone(), String::new())..)
            .take_while(|((name, _), _)| *name == case.name)
            .map(|((_, door), verdict)| {
                let mark = match verdict {
                    Verdict::Pass => {
                        passed += 1;
                        "ok"
                    }
                    Verdict::Fail(why) => {
                        // The reason on the row itself: CI shows the report, not always the panic.
                        let why: String = why.chars().take(300).collect();
                        return format!("{door}=FAIL ({why})");
                    }
                    Verdict::KnownBug { bug, observed } => {
                        bugs.push(format!(
                            "{} [{door}]: {bug}\n      observed: {observed}",
                            case.name
                        ));
                        "KNOWN BUG"
                    }
                };
                format!("{door}={mark}")
            })
            .collect();
        println!("  {:<44} {}", case.name, doors.join(", "));
    }
    println!("{passed} door checks passed; {} known bugs:", bugs.len());
    for bug in bugs {
        println!("  {bug}");
    }
}
