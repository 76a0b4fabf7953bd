//! The whole system in one test: servers as processes, services in-process.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use jetcron_core::clock::SystemClock;
use jetcron_core::subjects;
use jetcron_io::clickhouse_schema::ClickHouseOptions;
use jetcron_io::stages::{Services, Stage};
use jetcron_io::topology::{self, TopologyOptions};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{wait_until, ClickHouseServer, NatsServer};

/// Lease timing for tests: failover within about 2 seconds.
pub fn fast_leases() -> jetcron_ticker::ownership::LeaseOptions {
    jetcron_ticker::ownership::LeaseOptions {
        ttl: Duration::from_millis(1500),
        renew_every: Duration::from_millis(250),
        ..Default::default()
    }
}

/// Which services a [`Stack`] runs and how.
#[derive(Debug, Clone)]
pub struct StackOptions {
    pub ticker: bool,
    pub executor: bool,
    pub enable_shell: bool,
    pub projector: bool,
    pub gateway: bool,
    /// Pools the executor serves.
    pub pools: Vec<String>,
    /// The gateway's limits.
    pub limits: jetcron_gateway::limits::Limits,
    /// Whether HTTP reads (and console pages) need the token.
    pub protect_reads: bool,
    /// CA certificates the executor trusts for alert mail.
    pub smtp_ca_file: Option<std::path::PathBuf>,
    /// The ticker's `--lookahead` (fires stored this long ahead, held by
    /// executors until their instant).
    pub lookahead: Duration,
    /// nats-server configuration (users and their permissions); the
    /// stack's own connections then log in as its `no_auth_user`.
    pub nats_config: Option<String>,
}

/// The bearer token the test gateway accepts on HTTP writes.
pub const API_TOKEN: &str = "test-token-0123456789";

impl Default for StackOptions {
    fn default() -> Self {
        Self {
            ticker: true,
            executor: true,
            enable_shell: false,
            projector: true,
            gateway: true,
            pools: vec![subjects::DEFAULT_POOL.to_string()],
            limits: Default::default(),
            protect_reads: false,
            smtp_ca_file: None,
            lookahead: Duration::ZERO,
            nats_config: None,
        }
    }
}

/// Executor settings of tests: shell as asked, quick progress acks and grace.
pub fn test_executor_config(id: &str, enable_shell: bool) -> jetcron_executor::ExecutorConfig {
    jetcron_executor::ExecutorConfig {
        executor_id: id.into(),
        shell: jetcron_executor::ShellOptions {
            enabled: enable_shell,
            workdir: None,
        },
        ack_wait: Duration::from_secs(5),
        progress_interval: Duration::from_secs(1),
        shutdown_grace: Duration::from_secs(5),
        ..Default::default()
    }
}

impl StackOptions {
    /// Every service, with shell targets enabled on the executor.
    pub fn with_shell() -> Self {
        Self {
            enable_shell: true,
            ..Self::default()
        }
    }

    /// Only the gateway (the API and HTTP), for tests of requests and replies.
    pub fn api_only() -> Self {
        Self {
            ticker: false,
            executor: false,
            projector: false,
            ..Self::default()
        }
    }
}

/// An RFC 3339 instant from a JSON answer (panics on anything else: tests only).
pub fn instant(value: &Value) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(value.as_str().expect("instant is a string"))
        .expect("RFC 3339 instant")
        .with_timezone(&chrono::Utc)
}

/// nats-server + clickhouse-server + the jetcron services.
pub struct Stack {
    pub nats: NatsServer,
    pub clickhouse: ClickHouseServer,
    /// A client for the test's own requests.
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    /// `http://127.0.0.1:<port>` of the gateway.
    pub http_base: String,
    pub http: reqwest::Client,
    /// Cancels every service's own stop token (each a child of it).
    shutdown: CancellationToken,
    /// The services, stopped in the order `jetcron all` stops them.
    services: Services,
}

impl Stack {
    /// Start servers and services and wait until the API answers.
    pub async fn start(options: StackOptions) -> Self {
        crate::init_test_logging();
        // Record metrics as the binary does, so /metrics can be checked.
        jetcron_io::prometheus::install().expect("metrics recorder");
        let nats = match &options.nats_config {
            Some(config) => NatsServer::start_with_config(config),
            None => NatsServer::start(),
        };
        let clickhouse = ClickHouseServer::start();
        let client = nats.client().await;
        let js = jetstream::new(client.clone());
        let shutdown = CancellationToken::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind gateway listener");
        let http_base = format!("http://{}", listener.local_addr().expect("gateway address"));
        let services = spawn_services(
            &options,
            &nats,
            &clickhouse,
            listener,
            &http_base,
            &shutdown,
        )
        .await;
        let topology = TopologyOptions::default();
        // The topology exists once any service made it; make sure for tests
        // that run a subset of services.
        topology::ensure_jobs_bucket(&js, &topology)
            .await
            .expect("jobs bucket");
        topology::ensure_due_stream(&js, &topology)
            .await
            .expect("due stream");
        topology::ensure_runs_stream(&js, &topology)
            .await
            .expect("runs stream");
        let stack = Stack {
            nats,
            clickhouse,
            client,
            js,
            http_base,
            http: reqwest::Client::new(),
            shutdown,
            services,
        };
        if options.gateway {
            wait_until("gateway /readyz", Duration::from_secs(20), || async {
                let (status, _) = stack.get("/readyz").await;
                (status == 200).then_some(())
            })
            .await;
            stack.wait_for_nats_api().await;
        }
        stack
    }

    /// [`wait_for_nats_api`] with the test's own client.
    pub async fn wait_for_nats_api(&self) {
        wait_for_nats_api(&self.client).await;
    }

    /// Start one more executor in this process; it stops with the stack or
    /// when the returned token is cancelled.
    pub async fn spawn_executor(
        &mut self,
        config: jetcron_executor::ExecutorConfig,
    ) -> CancellationToken {
        let stop = self.shutdown.child_token();
        self.services.spawn(
            Stage::Executor,
            stop.clone(),
            jetcron_executor::run(
                config,
                self.nats.client().await,
                std::sync::Arc::new(jetcron_core::clock::SystemClock),
                stop.clone(),
            ),
        );
        stop
    }

    /// `nats req jetcron.api.jobs.put <job>`, which must succeed.
    pub async fn put_job(&self, job: &str) {
        let (reply, code) = self.api_put(job).await;
        assert_eq!(code, None, "{reply}");
    }

    /// `nats req jetcron.api.jobs.trigger '{"id":…}'`: a manual run; its id.
    pub async fn trigger(&self, id: &str) -> String {
        let (reply, code) = self
            .api(
                subjects::API_JOBS_TRIGGER,
                &serde_json::json!({ "id": id }).to_string(),
            )
            .await;
        assert_eq!(code, None, "{reply}");
        reply["run_id"].as_str().expect("run_id").to_string()
    }

    /// `nats req jetcron.api.runs.kill '{"run_id":…}'` (it must be taken).
    pub async fn kill_run(&self, run_id: &str) {
        let (reply, code) = self
            .api(
                subjects::API_RUNS_KILL,
                &serde_json::json!({ "run_id": run_id }).to_string(),
            )
            .await;
        assert_eq!(code, None, "{reply}");
    }

    /// `curl <clickhouse> --data-binary <sql>`: the answer's text (the query
    /// must succeed).
    pub async fn clickhouse_sql(&self, sql: &str) -> String {
        let response = self
            .http
            .post(self.clickhouse.url())
            .body(sql.to_string())
            .send()
            .await
            .expect("ClickHouse answers");
        let status = response.status();
        let text = response.text().await.expect("ClickHouse text");
        assert!(status.is_success(), "ClickHouse refused {sql}:\n{text}");
        text
    }

    /// Start one more projector in this process (e.g. under another consumer
    /// name, which replays the whole stream); it stops with the stack.
    pub async fn spawn_projector(&mut self, config: jetcron_projector::ProjectorConfig) {
        let stop = self.shutdown.child_token();
        self.services.spawn(
            Stage::Projector,
            stop.clone(),
            jetcron_projector::run(config, self.nats.client().await, stop),
        );
    }

    /// `curl -X POST <gateway><path> -H 'Authorization: Bearer …' -d <body>`:
    /// status and JSON body.
    pub async fn post(&self, path: &str, body: &str) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, body, Some(API_TOKEN))
            .await
    }

    /// `POST /v1/tokens` by the bootstrap token: a scoped token of `role`
    /// in `namespace` (described as `"<role> of <namespace>"`), which must
    /// be made; its text and its id.
    pub async fn scoped_token(&self, namespace: &str, role: &str) -> (String, String) {
        let body = serde_json::json!({
            "namespace": namespace,
            "role": role,
            "description": format!("{role} of {namespace}"),
        });
        let (status, made) = self
            .send(
                reqwest::Method::POST,
                "/v1/tokens",
                &body.to_string(),
                Some(API_TOKEN),
            )
            .await;
        assert_eq!(status, 201, "{made}");
        let text = |v: &Value| v.as_str().expect("token field").to_string();
        (text(&made["token"]), text(&made["record"]["id"]))
    }

    /// Any request to the gateway, with `token` as bearer token if given.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &str,
        token: Option<&str>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.http_base))
            .body(body.to_string());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// `curl <gateway>/v1/runs/<run_id>`: the run with its events and attempts.
    pub async fn run(&self, run_id: &str) -> Option<Value> {
        let (status, mut body) = self.get(&format!("/v1/runs/{run_id}")).await;
        (status == 200).then(|| body["run"].take())
    }

    /// Wait until run `run_id` is in `status`.
    pub async fn wait_for_run_status(
        &self,
        run_id: &str,
        status: &str,
        timeout: Duration,
    ) -> Value {
        wait_until(&format!("run {run_id} {status}"), timeout, || async {
            self.run(run_id).await.filter(|r| r["status"] == status)
        })
        .await
    }

    /// The payload of every message stored in `JETCRON_RUNS` on `subject`
    /// (wildcards allowed), in stream order.
    pub async fn runs_stream_payloads(&self, subject: &str) -> Vec<bytes::Bytes> {
        use futures::StreamExt as _;
        let stream = self
            .js
            .get_stream(subjects::RUNS_STREAM)
            .await
            .expect("runs stream");
        let consumer = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                filter_subject: subject.to_string(),
                ..Default::default()
            })
            .await
            .expect("ordered consumer");
        let pending = consumer.cached_info().num_pending;
        let mut messages = consumer.messages().await.expect("messages");
        let mut payloads = Vec::new();
        for _ in 0..pending {
            let Ok(Some(Ok(message))) =
                tokio::time::timeout(Duration::from_secs(5), messages.next()).await
            else {
                break;
            };
            payloads.push(message.payload.clone());
        }
        payloads
    }

    /// Every run event stored in `JETCRON_RUNS` for `job_id`, in stream order.
    pub async fn run_events(&self, job_id: &str) -> Vec<jetcron_core::RunEvent> {
        self.runs_stream_payloads(&subjects::run_event_subject(job_id, "*"))
            .await
            .iter()
            .map(|payload| serde_json::from_slice(payload).expect("run event"))
            .collect()
    }

    /// The run events of `run_id` (of `job_id`), in stream order.
    pub async fn events_of_run(&self, job_id: &str, run_id: &str) -> Vec<jetcron_core::RunEvent> {
        let mut events = self.run_events(job_id).await;
        events.retain(|e| e.run_id.as_str() == run_id);
        events
    }

    /// Stop every service in the order `jetcron all` does (ticker,
    /// executors, projector, gateway), each after the one before has ended,
    /// and fail the test if one of them failed.
    /// Another gateway on this stack's NATS and ClickHouse, accepting
    /// `api_tokens`, with `limits`, until `stop`: its base URL once it
    /// serves, and its task.
    pub async fn another_gateway(
        &self,
        api_tokens: Vec<String>,
        limits: jetcron_gateway::limits::Limits,
        stop: CancellationToken,
    ) -> (String, tokio::task::JoinHandle<anyhow::Result<()>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let config = self.gateway_config(api_tokens, limits);
        self.another_gateway_on(listener, config, stop).await
    }

    /// Another gateway (accepting [`API_TOKEN`]) that signs people in with
    /// a real OpenID Connect provider of `accounts` (a login and its
    /// groups), until `stop`: its base URL and the provider. Display name
    /// "Corp SSO"; scopes `email`, `groups`; people named by e-mail; a
    /// key set fetched again at once for an unknown key id.
    pub async fn gateway_with_provider(
        &self,
        accounts: &[(&str, &[&str])],
        stop: CancellationToken,
    ) -> (String, crate::OidcProvider) {
        let email = jetcron_gateway::people::provider_claims::UserClaim::Email;
        self.gateway_with_provider_naming(accounts, email, stop)
            .await
    }

    /// [`Self::gateway_with_provider`] naming people by `user_claim` (the
    /// provider's `sub` is the login).
    pub async fn gateway_with_provider_naming(
        &self,
        accounts: &[(&str, &[&str])],
        user_claim: jetcron_gateway::people::provider_claims::UserClaim,
        stop: CancellationToken,
    ) -> (String, crate::OidcProvider) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let client = crate::OidcClient {
            client_id: "jetcron-console".into(),
            client_secret: "a-client-secret-of-the-test".into(),
            redirect_uri: format!("{base}/ui/oidc/callback"),
        };
        let provider = crate::OidcProvider::start(client.clone(), accounts);
        let mut config = self.gateway_config(vec![API_TOKEN.into()], Default::default());
        config.oidc = Some(jetcron_gateway::people::provider::ProviderSettings {
            issuer: provider.issuer(),
            client_id: client.client_id,
            client_secret: client.client_secret,
            redirect_url: client.redirect_uri,
            scopes: vec!["email".into(), "groups".into()],
            groups_claim: "groups".into(),
            user_claim,
            clock_leeway: Duration::from_secs(60),
            display_name: "Corp SSO".into(),
            key_refetch_gap: Duration::ZERO,
        });
        self.another_gateway_on(listener, config, stop).await;
        (base, provider)
    }

    /// The configuration of a gateway on this stack's NATS and ClickHouse
    /// accepting `api_tokens`, with `limits`.
    pub fn gateway_config(
        &self,
        api_tokens: Vec<String>,
        limits: jetcron_gateway::limits::Limits,
    ) -> jetcron_gateway::GatewayConfig {
        jetcron_gateway::GatewayConfig {
            clickhouse: ClickHouseOptions::new(self.clickhouse.url()),
            topology: TopologyOptions::default(),
            http_auth: jetcron_gateway::http::auth::HttpAuth::new(api_tokens, false)
                .expect("tokens"),
            limits,
            readiness: Default::default(),
            grafana_url: None,
            lines: Default::default(),
            jobs_feed: Default::default(),
            oidc: None,
        }
    }

    /// A gateway of `config` on `listener` until `stop`: its base URL once
    /// it serves, and its task.
    pub async fn another_gateway_on(
        &self,
        listener: tokio::net::TcpListener,
        config: jetcron_gateway::GatewayConfig,
        stop: CancellationToken,
    ) -> (String, tokio::task::JoinHandle<anyhow::Result<()>>) {
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(jetcron_gateway::run(
            config,
            self.nats.client().await,
            Arc::new(SystemClock),
            listener,
            stop,
        ));
        let http = reqwest::Client::new();
        wait_until(
            "the other gateway serves",
            Duration::from_secs(30),
            || async {
                let answer = http.get(format!("{base}/readyz")).send().await.ok()?;
                answer.status().is_success().then_some(())
            },
        )
        .await;
        (base, task)
    }

    pub async fn stop(mut self) {
        let services = std::mem::take(&mut self.services);
        services.stop().await.expect("service failed");
    }

    /// `nats req jetcron.api.jobs.put <body>`: the reply as JSON and its
    /// `Nats-Service-Error-Code` header, if any.
    pub async fn api_put(&self, body: &str) -> (Value, Option<String>) {
        self.api(subjects::API_JOBS_PUT, body).await
    }

    /// `nats req <subject> <body>`: the reply as JSON and its
    /// `Nats-Service-Error-Code` header, if any.
    pub async fn api(&self, subject: &str, body: &str) -> (Value, Option<String>) {
        let reply = self
            .client
            .request(subject.to_string(), body.to_string().into())
            .await
            .expect("API request");
        let code = reply
            .headers
            .as_ref()
            .and_then(|h| h.get(async_nats::service::NATS_SERVICE_ERROR_CODE))
            .map(|v| v.as_str().to_string());
        let json = serde_json::from_slice(&reply.payload).expect("API reply is JSON");
        (json, code)
    }

    /// The jobs bucket, as `nats kv` sees it.
    pub async fn jobs_bucket(&self) -> jetstream::kv::Store {
        self.js
            .get_key_value(subjects::JOBS_BUCKET)
            .await
            .expect("jobs bucket")
    }

    /// `nats kv put jetcron_jobs <key> <value>`.
    pub async fn kv_put(&self, key: &str, value: &[u8]) -> u64 {
        self.jobs_bucket()
            .await
            .put(key, value.to_vec().into())
            .await
            .expect("kv put")
    }

    /// `nats kv del jetcron_jobs <key>`.
    pub async fn kv_delete(&self, key: &str) {
        self.jobs_bucket()
            .await
            .delete(key)
            .await
            .expect("kv delete");
    }

    /// `curl <gateway><path>`: status and JSON body (`Null` when not JSON).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        match self
            .http
            .get(format!("{}{path}", self.http_base))
            .send()
            .await
        {
            Ok(response) => {
                let status = response.status().as_u16();
                let body = response.json().await.unwrap_or(Value::Null);
                (status, body)
            }
            Err(_) => (0, Value::Null),
        }
    }

    /// `curl <gateway><path>` of a text answer such as `/metrics`.
    pub async fn get_text(&self, path: &str) -> String {
        self.http
            .get(format!("{}{path}", self.http_base))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
            .text()
            .await
            .unwrap_or_else(|e| panic!("GET {path} body: {e}"))
    }

    /// Runs of `job_id` as the gateway lists them (newest first).
    pub async fn runs_of(&self, job_id: &str) -> Vec<Value> {
        let (status, body) = self.get(&format!("/v1/jobs/{job_id}/runs?limit=500")).await;
        if status != 200 {
            return Vec::new();
        }
        body["runs"].as_array().cloned().unwrap_or_default()
    }

    /// Wait until the gateway lists at least `count` runs of `job_id` in `status`.
    pub async fn wait_for_runs(
        &self,
        job_id: &str,
        status: &str,
        count: usize,
        timeout: Duration,
    ) -> Vec<Value> {
        wait_until(
            &format!("{count} {status} runs of {job_id}"),
            timeout,
            || async {
                let runs: Vec<Value> = self
                    .runs_of(job_id)
                    .await
                    .into_iter()
                    .filter(|r| r["status"] == status)
                    .collect();
                (runs.len() >= count).then_some(runs)
            },
        )
        .await
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.services.abort();
    }
}

/// The services `options` asks for, in this process, wired as `jetcron all`
/// wires them (the ticker's read of the jobs bucket and the others' after
/// it, one readiness), each with a stop token of its own under `shutdown`.
async fn spawn_services(
    options: &StackOptions,
    nats: &NatsServer,
    clickhouse: &ClickHouseServer,
    listener: tokio::net::TcpListener,
    http_base: &str,
    shutdown: &CancellationToken,
) -> Services {
    let mut services = Services::default();
    let topology = TopologyOptions::default();
    let readiness = jetcron_io::readiness::Readiness::default();
    // As in `jetcron all`: the ticker reads the jobs bucket first, and the
    // gateway's catalog and the executor's chain index share a read after it.
    let lines = jetcron_core::schedule_lines::SharedLines::default();
    let jobs_feed = jetcron_io::job_feed::JobFeed::new(1);
    let views = [options.gateway, options.executor]
        .iter()
        .filter(|on| **on)
        .count();
    let mut views_feed = jetcron_io::job_feed::JobFeed::new(views);
    if options.ticker {
        views_feed = views_feed.opened_after(&jobs_feed);
    }
    if options.gateway {
        let config = jetcron_gateway::GatewayConfig {
            clickhouse: ClickHouseOptions::new(clickhouse.url()),
            topology: topology.clone(),
            http_auth: jetcron_gateway::http::auth::HttpAuth::new(
                vec![API_TOKEN.to_string()],
                options.protect_reads,
            )
            .expect("test token"),
            limits: options.limits.clone(),
            readiness: readiness.clone(),
            grafana_url: None,
            lines: lines.clone(),
            jobs_feed: views_feed.clone(),
            oidc: None,
        };
        let stop = shutdown.child_token();
        services.spawn(
            Stage::Gateway,
            stop.clone(),
            jetcron_gateway::run(
                config,
                nats.client().await,
                std::sync::Arc::new(jetcron_core::clock::SystemClock),
                listener,
                stop,
            ),
        );
    }
    if options.projector {
        let mut config =
            jetcron_projector::ProjectorConfig::new(ClickHouseOptions::new(clickhouse.url()));
        config.batch_wait = Duration::from_millis(100);
        config.readiness = readiness.clone();
        let stop = shutdown.child_token();
        services.spawn(
            Stage::Projector,
            stop.clone(),
            jetcron_projector::run(config, nats.client().await, stop),
        );
    }
    if options.executor {
        let mut config = test_executor_config("test-executor", options.enable_shell);
        config.pools = options.pools.clone();
        config.console_url = Some(http_base.to_string());
        config.smtp_ca_file = options.smtp_ca_file.clone();
        config.readiness = readiness.clone();
        config.lines = lines.clone();
        config.jobs_feed = views_feed.clone();
        let stop = shutdown.child_token();
        services.spawn(
            Stage::Executor,
            stop.clone(),
            jetcron_executor::run(
                config,
                nats.client().await,
                std::sync::Arc::new(jetcron_core::clock::SystemClock),
                stop,
            ),
        );
    }
    if options.ticker {
        let config = jetcron_ticker::TickerConfig {
            leases: fast_leases(),
            topology: topology.clone(),
            readiness: readiness.clone(),
            lookahead: options.lookahead,
            lines,
            jobs_feed,
            ..Default::default()
        };
        let stop = shutdown.child_token();
        services.spawn(
            Stage::Ticker,
            stop.clone(),
            jetcron_ticker::run(config, nats.client().await, Arc::new(SystemClock), stop),
        );
    }
    services
}

/// Wait until a gateway answers `client` on the NATS API (it answers HTTP
/// before its endpoint is subscribed: a request in between has no
/// responders). The request asks to store nothing valid.
pub async fn wait_for_nats_api(client: &async_nats::Client) {
    wait_until("NATS API endpoint", Duration::from_secs(20), || async {
        let reply = client.request(subjects::API_JOBS_PUT, "{}".into()).await;
        reply.ok().map(|_| ())
    })
    .await;
}
