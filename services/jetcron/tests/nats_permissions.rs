//! The NATS roles of `infra/nats/roles.conf`, on a real nats-server started
//! with that very file and the passwords in its environment:
//!
//! - the whole system works with every service connected as its own role,
//!   and jobs of the job author (through the API and through `kv put`) fire,
//!   run and are readable over HTTP, without one permissions violation;
//! - each role is refused what it must not do: the server says so, and
//!   nothing reaches the streams and buckets;
//! - the connection options (`--nats-user`/`--nats-password`, token, nkey,
//!   TLS with a CA and a client certificate) reach the client, in-process and
//!   through the `jetcron` command line.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::push, kv};
use async_nats::{Client, ConnectErrorKind, Event};
use futures::StreamExt as _;
use jetcron_core::clock::SystemClock;
use jetcron_core::subjects;
use jetcron_io::clickhouse_schema::ClickHouseOptions;
use jetcron_io::nats_connect::NatsAuthOptions;
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_testkit::{
    fast_leases, init_test_logging, test_executor_config, wait_until, ClickHouseServer, NatsServer,
};
use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

const ROLES_CONF: &str = include_str!("../../../infra/nats/roles.conf");
const ROLES: [&str; 8] = [
    "admin",
    "ticker",
    "executor",
    "projector",
    "gateway",
    "job-author",
    "viewer",
    "target",
];
const SERVICE_ROLES: [&str; 5] = ["ticker", "executor", "projector", "gateway", "target"];

fn password(role: &str) -> String {
    format!("{role}-pw-7f3a91")
}

/// The variable roles.conf reads the password of `role` from.
fn password_var(role: &str) -> String {
    format!(
        "JETCRON_NATS_{}_PASSWORD",
        role.to_uppercase().replace('-', "_")
    )
}

/// nats-server with roles.conf (plus `extra` configuration), every password
/// in its environment as an operator would set them.
fn roles_server(roles_conf: &str, extra: &str) -> NatsServer {
    let vars: Vec<(String, String)> = ROLES
        .iter()
        .map(|r| (password_var(r), password(r)))
        .collect();
    let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    NatsServer::start_with_config_env(&format!("{roles_conf}\n{extra}"), &env)
}

fn as_role(role: &str) -> NatsAuthOptions {
    NatsAuthOptions {
        user: Some(role.into()),
        password: Some(password(role)),
        ..Default::default()
    }
}

/// A connection and the errors the server sent it.
struct Conn {
    client: Client,
    errors: Arc<Mutex<Vec<String>>>,
}

async fn try_connect(url: &str, auth: &NatsAuthOptions) -> Result<Conn, async_nats::ConnectError> {
    let errors = Arc::new(Mutex::new(Vec::new()));
    let sink = errors.clone();
    let client = auth
        .connect_options()
        .expect("valid connection options")
        .request_timeout(Some(Duration::from_secs(2)))
        .event_callback(move |event| {
            let sink = sink.clone();
            async move {
                if let Event::ServerError(e) = event {
                    sink.lock().expect("errors").push(e.to_string());
                }
            }
        })
        .connect(url)
        .await?;
    Ok(Conn { client, errors })
}

async fn connect(url: &str, auth: &NatsAuthOptions) -> Conn {
    try_connect(url, auth)
        .await
        .unwrap_or_else(|e| panic!("connect with {}: {e}", auth.describe()))
}

impl Conn {
    /// JetStream on this connection, giving up on an ack after 2 s.
    fn js(&self) -> jetstream::Context {
        let mut js = jetstream::new(self.client.clone());
        js.set_timeout(Duration::from_secs(2));
        js
    }

    /// Wait until the server has told this connection it may not `action`
    /// (`Publish` or `Subscription`) `subject`.
    async fn refused(&self, action: &str, subject: &str) {
        let wanted = format!("Permissions Violation for {action} to \"{subject}\"");
        wait_until(&wanted, Duration::from_secs(5), || async {
            let errors = self.errors.lock().expect("errors");
            errors.iter().any(|e| e.contains(&wanted)).then_some(())
        })
        .await;
    }

    async fn request_json(&self, subject: &str, body: &str) -> Value {
        let reply = self
            .client
            .request(subject.to_string(), body.to_string().into())
            .await
            .unwrap_or_else(|e| panic!("request {subject}: {e}"));
        serde_json::from_slice(&reply.payload).expect("JSON reply")
    }
}

/// Sequence of the last message ever stored in `stream` (work queues forget
/// consumed messages; the sequence does not).
async fn last_sequence(js: &jetstream::Context, stream: &str) -> u64 {
    let mut stream = js.get_stream(stream).await.expect("stream");
    stream
        .info()
        .await
        .expect("stream info")
        .state
        .last_sequence
}

/// Permission violations the server logged for `users`.
fn violations_of(nats: &NatsServer, users: &[&str]) -> Vec<String> {
    nats.permission_violations()
        .into_iter()
        .filter(|l| users.iter().any(|u| l.contains(&format!("/user:{u}\""))))
        .collect()
}

fn gateway_config(clickhouse_url: String) -> jetcron_gateway::GatewayConfig {
    jetcron_gateway::GatewayConfig {
        clickhouse: ClickHouseOptions::new(clickhouse_url),
        topology: TopologyOptions::default(),
        http_auth: jetcron_gateway::http::auth::HttpAuth::new(Vec::new(), false)
            .expect("no tokens"),
        limits: Default::default(),
        readiness: Default::default(),
        grafana_url: None,
        lines: Default::default(),
        jobs_feed: Default::default(),
        oidc: None,
    }
}

/// The services `nats` targets call, as the `target` role: `targets.echo`
/// answers "done" at once; `targets.later` accepts the work and reports
/// "done" on `jetcron.runs.<run_id>.complete` (asynchronous completion).
async fn serve_targets(url: &str) -> tokio::task::JoinHandle<()> {
    let target = connect(url, &as_role("target")).await;
    let mut requests = target
        .client
        .subscribe("targets.>")
        .await
        .expect("subscribe");
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let Some(reply) = request.reply else { continue };
            if request.subject.as_str() == "targets.echo" {
                let _ = target.client.publish(reply, "done".into()).await;
                continue;
            }
            let run_id = request
                .headers
                .as_ref()
                .and_then(|h| h.get("Jetcron-Run-Id"))
                .map(|v| v.as_str().to_string())
                .unwrap_or_default();
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Jetcron-Status", "accepted");
            let _ = target
                .client
                .publish_with_headers(reply, headers, "".into())
                .await;
            let _ = target
                .client
                .publish(
                    subjects::run_complete_subject(&run_id),
                    r#"{"status":"succeeded","output":"done"}"#.into(),
                )
                .await;
        }
    })
}

async fn http_get(base: &str, path: &str) -> Option<Value> {
    let response = jetcron_testkit::reqwest::get(format!("{base}{path}"))
        .await
        .ok()?;
    (response.status() == 200).then_some(())?;
    response.json().await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_runs_as_its_role_and_the_job_authors_jobs_run() {
    init_test_logging();
    let nats = roles_server(ROLES_CONF, "");
    let clickhouse = ClickHouseServer::start();
    let url = nats.url();
    let shutdown = CancellationToken::new();
    let mut services = JoinSet::new();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let http_base = format!("http://{}", listener.local_addr().expect("address"));
    services.spawn(jetcron_gateway::run(
        gateway_config(clickhouse.url()),
        connect(&url, &as_role("gateway")).await.client,
        std::sync::Arc::new(jetcron_core::clock::SystemClock),
        listener,
        shutdown.clone(),
    ));
    let mut projector =
        jetcron_projector::ProjectorConfig::new(ClickHouseOptions::new(clickhouse.url()));
    projector.batch_wait = Duration::from_millis(100);
    services.spawn(jetcron_projector::run(
        projector,
        connect(&url, &as_role("projector")).await.client,
        shutdown.clone(),
    ));
    services.spawn(jetcron_executor::run(
        test_executor_config("executor-role", false),
        connect(&url, &as_role("executor")).await.client,
        std::sync::Arc::new(jetcron_core::clock::SystemClock),
        shutdown.clone(),
    ));
    services.spawn(jetcron_ticker::run(
        jetcron_ticker::TickerConfig {
            leases: fast_leases(),
            // Every fire reads its definition back: the role must allow it.
            keep_definitions_for: Duration::ZERO,
            ..Default::default()
        },
        connect(&url, &as_role("ticker")).await.client,
        Arc::new(SystemClock),
        shutdown.clone(),
    ));
    let targets = serve_targets(&url).await;

    let author = connect(&url, &as_role("job-author")).await;
    jetcron_testkit::wait_for_nats_api(&author.client).await;
    // The job author follows run events as they happen.
    let mut run_events = author
        .client
        .subscribe("jetcron.runs.by-api.>")
        .await
        .expect("subscribe to run events");

    let reply = author
        .request_json(
            subjects::API_JOBS_PUT,
            r#"{"id":"by-api","schedule":"* * * * * *","concurrency":"forbid","target":{"type":"nats","subject":"targets.echo"}}"#,
        )
        .await;
    assert_eq!(reply["ok"], true, "{reply}");

    let jobs = author
        .js()
        .get_key_value(subjects::JOBS_BUCKET)
        .await
        .expect("the job author opens jetcron_jobs");
    let revision = jobs
        .put(
            "by-kv",
            r#"{"schedule":"@every 1s","target":{"type":"nats","subject":"targets.later"}}"#.into(),
        )
        .await
        .expect("kv put by the job author");
    let stored = jobs.get("by-kv").await.expect("kv get").expect("stored");
    assert!(String::from_utf8_lossy(&stored).contains("@every 1s"));

    for job in ["by-api", "by-kv"] {
        let run = wait_until(
            &format!("a succeeded run of {job} over HTTP"),
            Duration::from_secs(20),
            || async {
                let body = http_get(&http_base, &format!("/v1/jobs/{job}/runs")).await?;
                body["runs"]
                    .as_array()?
                    .iter()
                    .find(|r| r["status"] == "succeeded")
                    .cloned()
            },
        )
        .await;
        let run_id = run["run_id"].as_str().expect("run id");
        let body = http_get(&http_base, &format!("/v1/runs/{run_id}"))
            .await
            .expect("GET /v1/runs/{run_id}");
        assert_eq!(body["run"]["job_id"], job, "{body}");
        assert_eq!(body["run"]["status"], "succeeded", "{body}");
        assert_eq!(body["run"]["output"], "done", "{body}");
    }
    // The history of a definition: over HTTP (a job author has no JetStream
    // consumers, see docs/security.md), and any one revision with `kv get`.
    let history = http_get(&http_base, "/v1/jobs/by-kv/history")
        .await
        .expect("GET /v1/jobs/by-kv/history");
    assert_eq!(
        history["revisions"].as_array().map(Vec::len),
        Some(1),
        "{history}"
    );
    let first = jobs
        .entry_for_revision("by-kv", revision)
        .await
        .expect("kv get --revision")
        .expect("revision kept");
    assert_eq!(first.revision, revision);

    // What else the services do for people: a manual run (the gateway
    // publishes a due event), a kill request (recorded, broadcast, answered
    // by the executor), the pools (the due stream's consumers), and a run
    // event the projector cannot store (parked in the dead letter stream).
    let reply = author
        .request_json(subjects::API_JOBS_TRIGGER, r#"{"id":"by-api"}"#)
        .await;
    assert_eq!(reply["ok"], true, "{reply}");
    let reply = author
        .request_json(
            subjects::API_RUNS_KILL,
            r#"{"run_id":"6a1c3f0e-9b7d-4e52-8c1a-5d2f7e90b3c4","reason":"test"}"#,
        )
        .await;
    assert_eq!(reply["ok"], true, "{reply}");
    let pools = http_get(&http_base, "/v1/pools")
        .await
        .expect("GET /v1/pools");
    assert!(pools.to_string().contains("default"), "{pools}");
    let admin = connect(&url, &as_role("admin")).await;
    admin
        .js()
        .publish("jetcron.runs.garbage.started", "not json".into())
        .await
        .expect("send")
        .await
        .expect("stored");
    wait_until("a parked event", Duration::from_secs(10), || async {
        let mut stream = admin
            .js()
            .get_stream(subjects::DEAD_LETTER_STREAM)
            .await
            .ok()?;
        (stream.info().await.ok()?.state.messages > 0).then_some(())
    })
    .await;

    let mut kinds = Vec::new();
    while !(kinds.contains(&"started".to_string()) && kinds.contains(&"succeeded".to_string())) {
        let event = tokio::time::timeout(Duration::from_secs(5), run_events.next())
            .await
            .expect("run events reach the job author")
            .expect("subscription open");
        kinds.push(event.subject.rsplit('.').next().unwrap_or("").to_string());
    }

    // …and reads stored ones back (`nats stream get --last-for`).
    let last = author
        .js()
        .get_stream_no_info(subjects::RUNS_STREAM)
        .await
        .expect("stream handle")
        .get_last_raw_message_by_subject("jetcron.runs.by-api.succeeded")
        .await
        .expect("the job author reads stored run events");
    let event: jetcron_core::RunEvent = serde_json::from_slice(&last.payload).expect("a run event");
    assert_eq!(event.job_id, "by-api");

    shutdown.cancel();
    while let Some(joined) = services.join_next().await {
        joined.expect("service panicked").expect("service failed");
    }
    targets.abort();
    let violations = violations_of(&nats, &SERVICE_ROLES);
    assert!(
        violations.is_empty(),
        "services were refused what they need:\n{}",
        violations.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_is_refused_what_it_must_not_do() {
    init_test_logging();
    let nats = roles_server(ROLES_CONF, "");
    let url = nats.url();
    let admin = connect(&url, &as_role("admin")).await;
    let admin_js = admin.js();
    let topology_options = TopologyOptions::default();
    let bucket = topology::ensure_jobs_bucket(&admin_js, &topology_options)
        .await
        .expect("jobs bucket");
    topology::ensure_due_stream(&admin_js, &topology_options)
        .await
        .expect("due stream");
    topology::ensure_runs_stream(&admin_js, &topology_options)
        .await
        .expect("runs stream");
    // A gateway, so that refused API calls are refused by the server and not
    // just unanswered. ClickHouse is not needed for jobs.put.
    let shutdown = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let gateway = tokio::spawn(jetcron_gateway::run(
        gateway_config("http://127.0.0.1:9".into()),
        connect(&url, &as_role("gateway")).await.client,
        std::sync::Arc::new(jetcron_core::clock::SystemClock),
        listener,
        shutdown.clone(),
    ));
    let author = connect(&url, &as_role("job-author")).await;
    jetcron_testkit::wait_for_nats_api(&author.client).await;
    let due_before = last_sequence(&admin_js, subjects::DUE_STREAM).await;
    let runs_before = last_sequence(&admin_js, subjects::RUNS_STREAM).await;
    let job =
        r#"{"id":"sneaky","schedule":"@daily","target":{"type":"nats","subject":"targets.x"}}"#;

    // The job author: the API yes, due events and run events no.
    let reply = author
        .request_json(subjects::API_JOBS_TRIGGER, r#"{"id":"nope"}"#)
        .await;
    assert_eq!(
        reply["error"]["code"], "not_found",
        "the API answers: {reply}"
    );
    let due = author
        .js()
        .publish("jetcron.due.default.sneaky", job.into())
        .await
        .expect("send");
    assert!(
        due.await.is_err(),
        "a due event from the job author was stored"
    );
    author
        .refused("Publish", "jetcron.due.default.sneaky")
        .await;
    author
        .client
        .publish("jetcron.runs.sneaky.succeeded", "{}".into())
        .await
        .expect("send");
    author
        .refused("Publish", "jetcron.runs.sneaky.succeeded")
        .await;
    let run_id = "6a1c3f0e-9b7d-4e52-8c1a-5d2f7e90b3c4";
    for subject in [
        format!("jetcron.runs.{run_id}.complete"),
        subjects::kill_control_subject(run_id),
        "$JS.API.STREAM.DELETE.JETCRON_DUE".to_string(),
        "$JS.API.STREAM.PURGE.KV_jetcron_jobs".to_string(),
        "$JS.API.CONSUMER.CREATE.JETCRON_DUE".to_string(),
        "$JS.API.CONSUMER.MSG.NEXT.JETCRON_RUNS.projector".to_string(),
    ] {
        author
            .client
            .publish(subject.clone(), "{}".into())
            .await
            .expect("send");
        author.refused("Publish", &subject).await;
    }
    // Nor can JetStream deliver into the due stream on the job author's
    // behalf: a push consumer of the jobs bucket aimed at a due subject.
    let attempt = author
        .js()
        .get_stream_no_info("KV_jetcron_jobs")
        .await
        .expect("stream handle")
        .create_consumer(push::Config {
            deliver_subject: "jetcron.due.default.via-consumer".into(),
            ..Default::default()
        })
        .await;
    assert!(attempt.is_err(), "the job author created a push consumer");
    author
        .refused("Publish", "$JS.API.CONSUMER.CREATE.KV_jetcron_jobs")
        .await;

    // The executor: neither the jobs bucket nor the job API.
    let executor = connect(&url, &as_role("executor")).await;
    let put = executor
        .js()
        .publish("$KV.jetcron_jobs.sneaky", job.into())
        .await
        .expect("send");
    assert!(put.await.is_err(), "the executor wrote a job");
    executor.refused("Publish", "$KV.jetcron_jobs.sneaky").await;
    assert!(
        executor
            .client
            .request(subjects::API_JOBS_PUT, job.into())
            .await
            .is_err(),
        "the executor put a job through the API"
    );
    executor.refused("Publish", subjects::API_JOBS_PUT).await;
    let _api = executor
        .client
        .subscribe("jetcron.api.>")
        .await
        .expect("send");
    executor.refused("Subscription", "jetcron.api.>").await;

    // Every other role, one thing each that is not its business.
    for (role, subject) in [
        ("ticker", "$KV.jetcron_jobs.sneaky"),
        ("ticker", "jetcron.runs.sneaky.succeeded"),
        ("projector", "jetcron.due.default.sneaky"),
        ("gateway", "jetcron.runs.sneaky.succeeded"),
        ("viewer", subjects::API_JOBS_PUT),
        ("viewer", "$KV.jetcron_jobs.sneaky"),
        ("target", "jetcron.due.default.sneaky"),
    ] {
        let conn = connect(&url, &as_role(role)).await;
        conn.client
            .publish(subject, job.into())
            .await
            .expect("send");
        conn.refused("Publish", subject).await;
    }
    let viewer = connect(&url, &as_role("viewer")).await;
    let listed = viewer.request_json("jetcron.api.jobs.list", "{}").await;
    assert_eq!(listed["ok"], true, "the viewer reads: {listed}");
    let preview = viewer
        .request_json(
            "jetcron.api.schedules.preview",
            r#"{"schedule":"30 2 * * *","timezone":"Europe/Berlin","count":2}"#,
        )
        .await;
    assert_eq!(preview["ok"], true, "the viewer previews: {preview}");

    // Nothing got through.
    assert!(
        bucket.get("sneaky").await.expect("kv get").is_none(),
        "a refused writer stored a job"
    );
    assert_eq!(
        last_sequence(&admin_js, subjects::DUE_STREAM).await,
        due_before
    );
    assert_eq!(
        last_sequence(&admin_js, subjects::RUNS_STREAM).await,
        runs_before
    );

    // The job author may put and delete in the bucket, but a purge (a
    // rollup) would erase the audit log: the stream refuses it.
    let author_bucket = author
        .js()
        .get_key_value(subjects::JOBS_BUCKET)
        .await
        .expect("bucket as the job author");
    author_bucket
        .put("audited", job.replace("sneaky", "audited").into())
        .await
        .expect("kv put");
    author_bucket.delete("audited").await.expect("kv del");
    let purge = author_bucket.purge("audited").await;
    assert!(purge.is_err(), "a purge erased the history of a job");
    let operations: Vec<kv::Operation> = bucket
        .history("audited")
        .await
        .expect("history")
        .map(|entry| entry.expect("entry").operation)
        .collect()
        .await;
    assert_eq!(operations, [kv::Operation::Put, kv::Operation::Delete]);

    assert!(
        !violations_of(&nats, &["job-author"]).is_empty(),
        "the server logs violations by user"
    );

    // No credentials, a wrong password, an unknown user: refused at connect.
    let anonymous = try_connect(&url, &NatsAuthOptions::default()).await;
    let wrong = NatsAuthOptions {
        password: Some("guess".into()),
        ..as_role("gateway")
    };
    let stranger = NatsAuthOptions {
        user: Some("nobody".into()),
        password: Some(password("admin")),
        ..Default::default()
    };
    for (what, result) in [
        ("anonymous", anonymous),
        ("wrong password", try_connect(&url, &wrong).await),
        ("unknown user", try_connect(&url, &stranger).await),
    ] {
        let err = result.err().unwrap_or_else(|| panic!("{what} connected"));
        assert_eq!(
            err.kind(),
            ConnectErrorKind::AuthorizationViolation,
            "{what}: {err}"
        );
    }

    shutdown.cancel();
    gateway
        .await
        .expect("gateway panicked")
        .expect("gateway failed");
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM
/// files in `dir`: (ca, server cert, server key, client cert, client key).
fn certificates(dir: &std::path::Path) -> [std::path::PathBuf; 5] {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "jetcron test CA");
    let ca_key = KeyPair::generate().expect("CA key");
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(names)
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("certificate");
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf(vec!["127.0.0.1".into(), "localhost".into()]);
    let (client_cert, client_key) = leaf(vec!["jetcron-client".into()]);
    let files = [
        ("ca.pem", ca_cert.pem()),
        ("server.pem", server_cert),
        ("server-key.pem", server_key),
        ("client.pem", client_cert),
        ("client-key.pem", client_key),
    ];
    files.map(|(name, pem)| {
        let path = dir.join(name);
        std::fs::write(&path, pem).expect("write PEM");
        path
    })
}

/// Start a ticker on `client` and wait until it stores a due event of a job
/// put by `author`: the connection of the ticker really works.
async fn ticker_fires(client: Client, author: &Conn, admin_js: &jetstream::Context) {
    let shutdown = CancellationToken::new();
    let ticker = tokio::spawn(jetcron_ticker::run(
        jetcron_ticker::TickerConfig {
            leases: fast_leases(),
            ..Default::default()
        },
        client,
        Arc::new(SystemClock),
        shutdown.clone(),
    ));
    let jobs = wait_until("jetcron_jobs", Duration::from_secs(10), || async {
        author.js().get_key_value(subjects::JOBS_BUCKET).await.ok()
    })
    .await;
    jobs.put(
        "tick",
        r#"{"schedule":"* * * * * *","target":{"type":"nats","subject":"targets.x"}}"#.into(),
    )
    .await
    .expect("put job");
    wait_until("a due event", Duration::from_secs(15), || async {
        let mut stream = admin_js.get_stream(subjects::DUE_STREAM).await.ok()?;
        (stream.info().await.ok()?.state.last_sequence > 0).then_some(())
    })
    .await;
    shutdown.cancel();
    ticker
        .await
        .expect("ticker panicked")
        .expect("ticker failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_nkey_and_tls_options_reach_the_client() {
    init_test_logging();
    // A token: one secret for every client, no roles.
    let token = "tok-5c2e8d";
    let token_server =
        NatsServer::start_with_config_env("authorization { token: $TOKEN }", &[("TOKEN", token)]);
    let with_token = NatsAuthOptions {
        token: Some(token.into()),
        ..Default::default()
    };
    let author = connect(&token_server.url(), &with_token).await;
    let ticker = connect(&token_server.url(), &with_token).await;
    ticker_fires(ticker.client, &author, &author.js()).await;
    let wrong_token = NatsAuthOptions {
        token: Some("guess".into()),
        ..Default::default()
    };
    let err = try_connect(&token_server.url(), &wrong_token)
        .await
        .err()
        .expect("a wrong token connected");
    assert_eq!(err.kind(), ConnectErrorKind::AuthorizationViolation);
    let plain_refused = NatsAuthOptions {
        require_tls: true,
        ..with_token.clone()
    };
    assert!(
        try_connect(&token_server.url(), &plain_refused)
            .await
            .is_err(),
        "--nats-tls-required connected without TLS"
    );
    drop(token_server);

    // Roles over TLS (the server verifies client certificates too), and a
    // ticker that authenticates with an nkey instead of a password.
    let dir = tempfile::tempdir().expect("temp dir");
    let [ca, server_cert, server_key, client_cert, client_key] = certificates(dir.path());
    let nkey = nkeys::KeyPair::new_user();
    let seed_file = dir.path().join("ticker.nk");
    std::fs::write(&seed_file, nkey.seed().expect("seed")).expect("write seed");
    let roles = ROLES_CONF.replacen(
        "users = [",
        &format!(
            "users = [\n    {{ nkey: {}, permissions: $TICKER }}",
            nkey.public_key()
        ),
        1,
    );
    assert_ne!(roles, ROLES_CONF, "roles.conf has a users list");
    let tls = format!(
        "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  ca_file: {:?}\n  verify: true\n}}",
        server_cert, server_key, ca
    );
    let nats = roles_server(&roles, &tls);
    let over_tls = |auth: NatsAuthOptions| NatsAuthOptions {
        tls_ca_file: Some(ca.clone()),
        tls_cert_file: Some(client_cert.clone()),
        tls_key_file: Some(client_key.clone()),
        ..auth
    };
    let admin = connect(&nats.url(), &over_tls(as_role("admin"))).await;
    let author = connect(&nats.url(), &over_tls(as_role("job-author"))).await;
    let ticker_auth = over_tls(NatsAuthOptions {
        nkey_seed_file: Some(seed_file),
        ..Default::default()
    });
    let ticker = connect(&nats.url(), &ticker_auth).await;
    ticker_fires(ticker.client, &author, &admin.js()).await;
    let violations = nats.permission_violations();
    assert!(violations.is_empty(), "{}", violations.join("\n"));

    // Without the CA the server is not trusted; without a client certificate
    // the server does not trust us.
    let no_ca = NatsAuthOptions {
        tls_ca_file: None,
        require_tls: true,
        ..over_tls(as_role("admin"))
    };
    let no_client_cert = NatsAuthOptions {
        tls_ca_file: Some(ca.clone()),
        ..as_role("admin")
    };
    for (what, auth) in [
        ("without the CA", no_ca),
        ("without a client certificate", no_client_cert),
    ] {
        assert!(
            try_connect(&nats.url(), &auth).await.is_err(),
            "connected {what}"
        );
    }
}

/// Run `jetcron <args>` with `env` (and no inherited `JETCRON_NATS_USER` or
/// `JETCRON_NATS_PASSWORD`): whether it succeeded, and what it printed. Killed
/// if it runs longer than 15 s.
async fn jetcron(nats: &NatsServer, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jetcron"))
        .args(args)
        .env_remove("JETCRON_NATS_USER")
        .env_remove("JETCRON_NATS_PASSWORD")
        .env("JETCRON_NATS_URL", nats.url())
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run jetcron");
    let output = tokio::time::timeout(Duration::from_secs(15), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("jetcron {args:?} did not finish within 15 s"))
        .expect("jetcron output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_connects_as_the_user_it_is_given() {
    init_test_logging();
    let nats = roles_server(ROLES_CONF, "");
    let shutdown = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let gateway = tokio::spawn(jetcron_gateway::run(
        gateway_config("http://127.0.0.1:9".into()),
        connect(&nats.url(), &as_role("gateway")).await.client,
        std::sync::Arc::new(jetcron_core::clock::SystemClock),
        listener,
        shutdown.clone(),
    ));
    let author_password = password("job-author");
    let put = [
        "--nats-user",
        "job-author",
        "--nats-password",
        author_password.as_str(),
        "req",
        subjects::API_JOBS_PUT,
        r#"{"id":"cli","schedule":"@daily","target":{"type":"nats","subject":"targets.x"}}"#,
    ];
    let (ok, text) = wait_until(
        "jetcron req as job-author",
        Duration::from_secs(20),
        || async {
            let (ok, text) = jetcron(&nats, &put, &[]).await;
            ok.then_some((ok, text))
        },
    )
    .await;
    assert!(ok && text.contains(r#""ok":true"#), "{text}");

    let viewer_password = password("viewer");
    let viewer_env = [
        ("JETCRON_NATS_USER", "viewer"),
        ("JETCRON_NATS_PASSWORD", viewer_password.as_str()),
    ];
    let (ok, text) = jetcron(&nats, &["req", "jetcron.api.jobs.list", "{}"], &viewer_env).await;
    assert!(ok && text.contains(r#""cli""#), "{text}");
    // The viewer may not put: the server drops the request, nothing is stored.
    let by_viewer =
        r#"{"id":"by-viewer","schedule":"@daily","target":{"type":"nats","subject":"targets.x"}}"#;
    let (ok, text) = jetcron(
        &nats,
        &["req", "--timeout", "1s", subjects::API_JOBS_PUT, by_viewer],
        &viewer_env,
    )
    .await;
    assert!(
        !ok && text.contains("timed out"),
        "the viewer put a job: {text}"
    );
    let (_, text) = jetcron(&nats, &["req", "jetcron.api.jobs.list", "{}"], &viewer_env).await;
    assert!(!text.contains("by-viewer"), "{text}");

    let (ok, text) = jetcron(&nats, &["req", "jetcron.api.jobs.list", "{}"], &[]).await;
    assert!(
        !ok && text.contains("authorization violation"),
        "anonymous: {text}"
    );
    let (ok, text) = jetcron(
        &nats,
        &["--nats-password", "x", "req", "jetcron.api.jobs.list", "{}"],
        &[],
    )
    .await;
    assert!(
        !ok && text.contains("a NATS password needs a user"),
        "password alone: {text}"
    );

    // A service with a wrong password stops at once, saying who was refused.
    let started = std::time::Instant::now();
    let (ok, text) = jetcron(
        &nats,
        &[
            "--nats-user",
            "ticker",
            "--nats-password",
            "guess",
            "ticker",
        ],
        &[],
    )
    .await;
    assert!(!ok, "{text}");
    assert!(text.contains("refused user \"ticker\" as ticker"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(10));

    shutdown.cancel();
    gateway
        .await
        .expect("gateway panicked")
        .expect("gateway failed");
}

/// A redelivered run's end may lie thousands of events behind its start:
/// the executor's role reads them all through a pass (an ephemeral
/// consumer on `JETCRON_RUNS` with flow control), and nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_role_reads_a_busy_jobs_run_events_through_a_pass() {
    use jetcron_core::events::{RunEvent, RunEventKind, RunId};
    use jetcron_executor::run_end_lookup::{self, Since};

    init_test_logging();
    let nats = roles_server(ROLES_CONF, "");
    let url = nats.url();
    let admin = connect(&url, &as_role("admin")).await;
    let admin_js = admin.js();
    topology::ensure_runs_stream(&admin_js, &TopologyOptions::default())
        .await
        .expect("runs stream");
    // 6,000 events of about 1 KB: past the pass's window of unacknowledged
    // messages (4,096) and the flow control window (2 MiB at first), so the
    // pass must ack and answer flow control as the executor.
    const EVENTS: i64 = 6_000;
    let now = chrono::Utc::now();
    let mut last_run = None;
    let stores: Vec<_> = (0..EVENTS)
        .map(|i| {
            let at = now + chrono::Duration::seconds(i);
            let run = RunId::for_fire("busy", at);
            let kind = if i == EVENTS - 1 {
                RunEventKind::Succeeded
            } else {
                RunEventKind::Started
            };
            last_run = Some(run.clone());
            let event = RunEvent {
                output: Some("x".repeat(1_000)),
                ..RunEvent::step(run, "busy".into(), kind, 1, at, at)
            };
            let subject = subjects::run_event_subject("busy", kind.as_str());
            (subject, serde_json::to_vec(&event).expect("encode"))
        })
        .collect();
    futures::stream::iter(stores)
        .map(|(subject, payload)| {
            let js = admin_js.clone();
            async move { js.publish(subject, payload.into()).await?.await }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .expect("stored");
    let last_run = last_run.expect("a run");

    let executor = connect(&url, &as_role("executor")).await;
    let ended = run_end_lookup::run_ended(
        &executor.js(),
        "busy",
        last_run.as_str(),
        None,
        Since::Sequence(1),
    )
    .await
    .expect("read the job's run events");
    assert_eq!(ended, Some(RunEventKind::Succeeded));
    let none = run_end_lookup::run_ended(
        &executor.js(),
        "busy",
        RunId::for_fire("busy", now - chrono::Duration::days(1)).as_str(),
        None,
        Since::Sequence(1),
    )
    .await
    .expect("read the job's run events");
    assert_eq!(none, None, "a run that never ran has no end");
    assert!(
        violations_of(&nats, &["executor"]).is_empty(),
        "{:#?}",
        violations_of(&nats, &["executor"])
    );

    // A consumer that stays (a durable) is not the executor's to make:
    // neither under its name nor through the unnamed subject it may use.
    let unnamed = executor
        .request_json(
            "$JS.API.CONSUMER.CREATE.JETCRON_RUNS",
            r#"{"stream_name":"JETCRON_RUNS","config":{"durable_name":"sneaky","ack_policy":"explicit"}}"#,
        )
        .await;
    assert!(unnamed.get("error").is_some(), "{unnamed}");
    let durable = executor
        .js()
        .get_stream_no_info(subjects::RUNS_STREAM)
        .await
        .expect("stream handle")
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some("sneaky".into()),
            ..Default::default()
        })
        .await;
    assert!(durable.is_err(), "the executor made a durable consumer");
    let made = admin_js
        .get_stream(subjects::RUNS_STREAM)
        .await
        .expect("runs stream")
        .get_consumer::<jetstream::consumer::pull::Config>("sneaky")
        .await;
    assert!(made.is_err(), "a durable consumer exists");
}

/// A ticker and an executor started on a bucket of thousands of jobs read
/// it first through a pass (`stream_pass`): past its window of 4,096
/// unacknowledged messages and the 2 MiB of flow control, so each must ack
/// and answer flow control on `KV_jetcron_jobs`. Both start, the one job due
/// every second is called, and neither connection meets a permissions
/// violation. (Without the ticker's `$JS.ACK.KV_jetcron_jobs.>` grant its
/// pass stalls and nothing is called: checked. The executor's role also
/// answers through `allow_responses`, so its grant counts only for a pass
/// slower than that allows, 2 minutes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ticker_and_executor_roles_start_on_a_bucket_of_thousands_of_jobs() {
    init_test_logging();
    let nats = roles_server(ROLES_CONF, "");
    let url = nats.url();
    let admin = connect(&url, &as_role("admin")).await;
    let bucket = topology::ensure_jobs_bucket(&admin.js(), &TopologyOptions::default())
        .await
        .expect("jobs bucket");
    // About 600 bytes each: 6,000 of them are 3.6 MB.
    const JOBS: usize = 6_000;
    let padding = "x".repeat(500);
    let puts: Vec<(String, String)> = (0..JOBS)
        .map(|i| {
            (
                format!("yearly-{i:04}"),
                format!(
                    r#"{{"schedule":"0 0 0 1 1 *","description":"{padding}","target":{{"type":"nats","subject":"targets.yearly"}}}}"#
                ),
            )
        })
        .chain(std::iter::once((
            "every-second".to_string(),
            r#"{"schedule":"* * * * * *","target":{"type":"nats","subject":"targets.canary"}}"#
                .to_string(),
        )))
        .collect();
    futures::stream::iter(puts)
        .map(|(key, body)| {
            let bucket = bucket.clone();
            async move { bucket.put(key, body.into()).await }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .expect("jobs stored");
    let mut calls = admin
        .client
        .subscribe("targets.canary")
        .await
        .expect("subscribe to the canary's calls");

    let shutdown = CancellationToken::new();
    let mut services = JoinSet::new();
    services.spawn(jetcron_executor::run(
        test_executor_config("executor-role", false),
        connect(&url, &as_role("executor")).await.client,
        Arc::new(SystemClock),
        shutdown.clone(),
    ));
    services.spawn(jetcron_ticker::run(
        jetcron_ticker::TickerConfig {
            leases: fast_leases(),
            ..Default::default()
        },
        connect(&url, &as_role("ticker")).await.client,
        Arc::new(SystemClock),
        shutdown.clone(),
    ));
    let call = tokio::time::timeout(Duration::from_secs(60), calls.next())
        .await
        .expect("the job due every second is called within 60 s")
        .expect("a call");
    if let Some(reply) = call.reply {
        let _ = admin.client.publish(reply, "ok".into()).await;
    }
    let violations = violations_of(&nats, &["ticker", "executor"]);
    assert!(violations.is_empty(), "{violations:#?}");
    shutdown.cancel();
    while let Some(ended) = services.join_next().await {
        ended.expect("service panicked").expect("service failed");
    }
}
