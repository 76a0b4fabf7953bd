//! The clustered form under fire, as operators run it: three nats-server
//! nodes (R3 topology), two tickers, two executors, a projector and a gateway
//! as separate processes, 25 jobs firing every second with
//! `concurrency: forbid` and a NATS target this test answers.
//!
//! Two scenarios of two minutes each, both in the suite:
//! - the leader of `JETCRON_DUE` is SIGKILLed every 10 s and started again
//!   on its store 3 s later (the target of docs/operations.md);
//! - failures one at a time: a node every 20 s (the next one in turn,
//!   restarted on its store 5 s later), and between them, once the cluster
//!   settled, a ticker (again while it restarts), an executor, the
//!   projector, the other ticker, the other executor.
//!
//! Then: every scheduled second of every job called its target exactly
//! once, with its own run id; every run is in ClickHouse, read through the
//! gateway, once, succeeded; and the lag bounds hold. The figures are
//! printed for docs/benchmarks.md:
//! `cargo nextest run -E 'test(/^cluster_chaos::/)' --no-capture`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use jetcron_core::events::{DueEvent, RunId};
use jetcron_core::subjects;
use jetcron_testkit::{
    wait_until, without_colour_codes, ClickHouseServer, JetcronProcess, NatsCluster,
};

const JOBS: usize = 25;
const CHAOS_SECS: u64 = 120;

fn jetcron() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_jetcron"))
}

/// How long a scenario lasts (`JETCRON_CHAOS_SECS` shortens it by hand).
fn chaos_length() -> Duration {
    Duration::from_secs(
        std::env::var("JETCRON_CHAOS_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(CHAOS_SECS),
    )
}

/// One call of the target, as the target saw it.
#[derive(Debug, Clone)]
struct Call {
    job: String,
    run_id: String,
    scheduled_at: DateTime<Utc>,
    attempt: u32,
    at: DateTime<Utc>,
}

type Calls = Arc<Mutex<Vec<Call>>>;
/// Run id → (scheduled time, when its due event was last published).
type DueSeen = Arc<Mutex<BTreeMap<String, (DateTime<Utc>, DateTime<Utc>)>>>;

/// Answer every `svc.chaos.*` request with "ok", recording it: one
/// responder per node in a queue group, as a service that itself runs
/// highly available (a responder whose node is killed is gone until it
/// reconnects; the others answer meanwhile).
async fn serve_target(
    clients: Vec<async_nats::Client>,
) -> (Calls, Vec<tokio::task::JoinHandle<()>>) {
    let calls: Calls = Arc::default();
    let mut tasks = Vec::new();
    for client in clients {
        let mut requests = client
            .queue_subscribe("svc.chaos.*", "chaos-target".to_string())
            .await
            .expect("subscribe target");
        let recorded = calls.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(request) = requests.next().await {
                let at = Utc::now();
                let header = |name: &str| {
                    request
                        .headers
                        .as_ref()
                        .and_then(|h| h.get(name))
                        .map(|v| v.as_str().to_string())
                        .unwrap_or_default()
                };
                let call = Call {
                    job: request
                        .subject
                        .as_str()
                        .trim_start_matches("svc.chaos.")
                        .to_string(),
                    run_id: header("Jetcron-Run-Id"),
                    scheduled_at: DateTime::parse_from_rfc3339(&header("Jetcron-Scheduled-At"))
                        .map(|t| t.with_timezone(&Utc))
                        .unwrap_or_default(),
                    attempt: header("Jetcron-Attempt").parse().unwrap_or(0),
                    at,
                };
                recorded.lock().expect("calls").push(call);
                if let Some(reply) = request.reply {
                    let _ = client.publish(reply, "ok".into()).await;
                }
            }
        }));
    }
    (calls, tasks)
}

/// The last publish of every due event seen on the wire (a core
/// subscription sees each publish, stored or not; the last one of a run is
/// the one that was stored).
async fn watch_due_events(client: async_nats::Client) -> (DueSeen, tokio::task::JoinHandle<()>) {
    let seen: DueSeen = Arc::default();
    let mut due = client
        .subscribe("jetcron.due.>")
        .await
        .expect("subscribe due");
    let recorded = seen.clone();
    let task = tokio::spawn(async move {
        while let Some(message) = due.next().await {
            let at = Utc::now();
            if let Ok(event) = serde_json::from_slice::<DueEvent>(&message.payload) {
                recorded
                    .lock()
                    .expect("due")
                    .insert(event.run_id.as_str().to_string(), (event.scheduled_at, at));
            }
        }
    });
    (seen, task)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Print and return (p50, p99, max).
fn summary(scenario: &str, name: &str, mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(|a, b| a.total_cmp(b));
    let (p50, p99) = (percentile(&values, 50.0), percentile(&values, 99.0));
    let max = values.last().copied().unwrap_or(f64::NAN);
    println!(
        "chaos {scenario}: {name}: n={} p50={p50:.3}s p99={p99:.3}s max={max:.3}s",
        values.len()
    );
    (p50, p99, max)
}

/// Instants (the RFC 3339 stamp that opens each log line) at which a log says `needle`.
fn log_instants(log: &str, needle: &str) -> Vec<DateTime<Utc>> {
    without_colour_codes(log)
        .lines()
        .filter(|line| line.contains(needle))
        .filter_map(|line| {
            let stamp = line.split_whitespace().next()?;
            DateTime::parse_from_rfc3339(stamp)
                .ok()
                .map(|t| t.with_timezone(&Utc))
        })
        .collect()
}

/// Values of `field=<number>` on the log lines that say `needle`.
fn log_numbers(log: &str, needle: &str, field: &str) -> Vec<f64> {
    without_colour_codes(log)
        .lines()
        .filter(|line| line.contains(needle))
        .filter_map(|line| line.split(&format!("{field}=")).nth(1))
        .filter_map(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .collect()
}

/// The whole clustered deployment, firing.
struct Deployment {
    _clickhouse: ClickHouseServer,
    cluster: NatsCluster,
    client: async_nats::Client,
    http_addr: String,
    gateway: JetcronProcess,
    tickers: Vec<JetcronProcess>,
    executors: Vec<JetcronProcess>,
    projector: JetcronProcess,
    calls: Calls,
    due_seen: DueSeen,
    /// When an executor was sent SIGKILL (taken just before the signal).
    executor_kills: Vec<DateTime<Utc>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Deployment {
    async fn start() -> Self {
        let clickhouse = ClickHouseServer::start();
        let cluster = NatsCluster::start(3).await;
        let urls = cluster.urls();
        let clickhouse_url = clickhouse.url();
        let env: Vec<(&str, &str)> = vec![
            ("JETCRON_NATS_URL", urls.as_str()),
            ("JETCRON_REPLICAS", "3"),
            ("JETCRON_CLICKHOUSE_URL", clickhouse_url.as_str()),
        ];
        let http_addr = format!("127.0.0.1:{}", jetcron_testkit::free_port());
        let executor_args = [
            "executor",
            "--ack-wait",
            "10s",
            "--progress-interval",
            "2s",
            "--shutdown-grace",
            "5s",
        ];
        let gateway = JetcronProcess::start(
            jetcron(),
            &[
                "gateway",
                "--http-addr",
                &http_addr,
                "--missed-scan-interval",
                "0s",
            ],
            &env,
        );
        let tickers = ["t0", "t1"]
            .iter()
            .map(|id| JetcronProcess::start(jetcron(), &["ticker", "--replica-id", id], &env))
            .collect();
        let executors = (0..2)
            .map(|_| JetcronProcess::start(jetcron(), &executor_args, &env))
            .collect();
        let projector = JetcronProcess::start(jetcron(), &["projector"], &env);
        let client = cluster.client().await;
        let mut node_clients = Vec::new();
        for node in 0..cluster.len() {
            node_clients.push(cluster.node(node).client().await);
        }
        let (calls, mut target) = serve_target(node_clients).await;
        let (due_seen, due_watch) = watch_due_events(client.clone()).await;
        let deployment = Self {
            _clickhouse: clickhouse,
            cluster,
            client,
            http_addr,
            gateway,
            tickers,
            executors,
            projector,
            calls,
            due_seen,
            executor_kills: Vec::new(),
            tasks: {
                target.push(due_watch);
                target
            },
        };
        let readyz = format!("http://{}/readyz", deployment.http_addr);
        wait_until("the gateway ready", Duration::from_secs(60), || {
            let readyz = readyz.clone();
            async move {
                let response = jetcron_testkit::reqwest::get(&readyz).await.ok()?;
                (response.status() == 200).then_some(())
            }
        })
        .await;
        // 25 jobs, as a user puts them: `nats req jetcron.api.jobs.put`.
        for i in 0..JOBS {
            let job = format!(
                r#"{{"id":"chaos-{i}","schedule":"* * * * * *","concurrency":"forbid","timeout":"5s","retry":{{"max_attempts":5,"backoff":"500ms"}},"target":{{"type":"nats","subject":"svc.chaos.chaos-{i}"}}}}"#
            );
            // `/readyz` says the gateway serves; its API subscription may
            // still be on its way to the node this client is connected to
            // (no responders for a moment), as `nats req` would see too.
            let reply = wait_until("the job API answering", Duration::from_secs(10), || {
                let (client, job) = (deployment.client.clone(), job.clone());
                async move {
                    match client.request(subjects::API_JOBS_PUT, job.into()).await {
                        Ok(reply) => Some(reply),
                        Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => None,
                        Err(e) => panic!("put job: {e}"),
                    }
                }
            })
            .await;
            let text = String::from_utf8_lossy(&reply.payload).to_string();
            assert!(text.contains(r#""ok":true"#), "{text}");
        }
        let calls = deployment.calls.clone();
        wait_until("every job firing", Duration::from_secs(30), || {
            let calls = calls.clone();
            async move {
                let jobs: BTreeSet<String> = calls
                    .lock()
                    .expect("calls")
                    .iter()
                    .map(|c| c.job.clone())
                    .collect();
                (jobs.len() == JOBS).then_some(())
            }
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        deployment
    }

    /// A JetStream context that gives up after 2 s (a stream without a
    /// leader does not answer).
    fn probe(&self) -> async_nats::jetstream::Context {
        jetcron_io::topology::context(self.client.clone())
    }

    fn processes(&self) -> Vec<(&'static str, &JetcronProcess)> {
        vec![
            ("t0", &self.tickers[0]),
            ("t1", &self.tickers[1]),
            ("e0", &self.executors[0]),
            ("e1", &self.executors[1]),
            ("projector", &self.projector),
            ("gateway", &self.gateway),
        ]
    }

    /// With `JETCRON_CHAOS_LOGS=<dir>`, write every process's log there.
    fn dump_logs(&self, scenario: &str) {
        if let Ok(dir) = std::env::var("JETCRON_CHAOS_LOGS") {
            let _ = std::fs::create_dir_all(&dir);
            for (name, process) in self.processes() {
                let _ = std::fs::write(
                    format!("{dir}/{scenario}-{name}.log"),
                    without_colour_codes(&process.log()),
                );
            }
        }
    }

    /// Check every fire scheduled in `window` and print the figures; returns
    /// (fire lag p99, fire lag max, target-call lag max).
    async fn verify(&self, scenario: &str, window: (DateTime<Utc>, DateTime<Utc>)) -> Figures {
        let (window_start, window_end) = window;
        let expected: BTreeSet<(String, DateTime<Utc>)> = (0..JOBS)
            .flat_map(|i| {
                let job = format!("chaos-{i}");
                (window_start.timestamp() + 1..=window_end.timestamp())
                    .map(move |s| (job.clone(), DateTime::from_timestamp(s, 0).expect("second")))
            })
            .collect();
        let called = || -> BTreeSet<(String, DateTime<Utc>)> {
            self.calls
                .lock()
                .expect("calls")
                .iter()
                .map(|c| (c.job.clone(), c.scheduled_at))
                .collect()
        };
        // Every fire of the window reaches its target (late ones included).
        let deadline = Instant::now() + Duration::from_secs(60);
        let missing = loop {
            let missing: Vec<_> = expected.difference(&called()).cloned().collect();
            if missing.is_empty() || Instant::now() > deadline {
                break missing;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        self.dump_logs(scenario);
        // A fire `forbid` skipped because its previous run was still calling
        // its target (a request lost with a killed node waits out its
        // timeout) is the policy at work; anything else is a failure.
        let mut skipped = BTreeSet::new();
        let mut unexplained = Vec::new();
        for fire in &missing {
            match self.skip_by_policy(&fire.0, fire.1).await {
                Ok(()) => {
                    skipped.insert(fire.clone());
                }
                Err(why) => unexplained.push((fire.clone(), why)),
            }
        }
        println!(
            "chaos {scenario}: {} fires skipped by forbid while their previous run called its target",
            skipped.len()
        );
        if !unexplained.is_empty() {
            self.explain_missing(scenario, &unexplained, window_start)
                .await;
        }
        // A target request lost with a killed node holds its job for the
        // job's timeout (5 s here): a few seconds of one job's fires per
        // kill at most. The bound only catches a regression.
        assert!(
            skipped.len() * 100 <= expected.len() * 5,
            "{scenario}: {} of {} fires skipped by forbid, over 5 %",
            skipped.len(),
            expected.len()
        );
        let expected: BTreeSet<(String, DateTime<Utc>)> =
            expected.difference(&skipped).cloned().collect();

        // Exactly once per fire, with the fire's own run id.
        let calls: Vec<Call> = self.calls.lock().expect("calls").clone();
        let mut per_fire: BTreeMap<(String, DateTime<Utc>), Vec<&Call>> = BTreeMap::new();
        for call in &calls {
            let fire = (call.job.clone(), call.scheduled_at);
            if expected.contains(&fire) {
                per_fire.entry(fire).or_default().push(call);
            }
        }
        for ((job, scheduled), calls) in &per_fire {
            let run_id = RunId::for_fire(job, *scheduled).as_str().to_string();
            assert!(
                calls.iter().all(|c| c.run_id == run_id),
                "{job} {scheduled}: {calls:?}"
            );
        }
        let doubled: Vec<_> = per_fire
            .iter()
            .filter(|(_, calls)| calls.len() > 1)
            .map(|(fire, calls)| {
                let at: Vec<_> = calls.iter().map(|c| (c.attempt, c.at)).collect();
                (fire.clone(), at)
            })
            .collect();

        // The figures.
        // A fire whose first attempt never reached the target (its request
        // died with a killed node) waits out the attempt's timeout and the
        // backoff before its retry: measured apart, with the retry's cost.
        let mut target_lag = Vec::new();
        let mut reached_by_retry = Vec::new();
        for ((job, scheduled), calls) in &per_fire {
            let first = calls.iter().min_by_key(|c| c.at).expect("a call");
            let lag = (first.at - first.scheduled_at).num_milliseconds() as f64 / 1000.0;
            if first.attempt > 1 {
                if reached_by_retry.len() < 10 {
                    self.print_attempts(scenario, job, *scheduled).await;
                }
                reached_by_retry.push(RetriedFire {
                    lag,
                    attempt: first.attempt,
                });
            } else {
                target_lag.push(lag);
            }
        }
        print_late_calls(scenario, &per_fire);
        let due = self.due_seen.lock().expect("due").clone();
        let fire_lag: Vec<f64> = expected
            .iter()
            .filter_map(|(job, scheduled)| {
                let (_, stored) = due.get(RunId::for_fire(job, *scheduled).as_str())?;
                Some(((*stored - *scheduled).num_milliseconds() as f64 / 1000.0).max(0.0))
            })
            .collect();
        let (_, fire_p99, fire_max) = summary(
            scenario,
            "fire lag (due event stored - scheduled; 0 when stored ahead)",
            fire_lag,
        );
        let (target_p50, target_p99, target_max) = summary(
            scenario,
            "target-call lag (target called - scheduled; first attempt)",
            target_lag,
        );
        summary(
            scenario,
            "target-call lag of fires first reached by a later attempt (the first lost with a node, or never started before its redelivery)",
            reached_by_retry.iter().map(|r| r.lag).collect(),
        );
        let stalls: Vec<f64> = self
            .tickers
            .iter()
            .flat_map(|t| log_numbers(&t.log(), "due events stored again", "stalled_ms"))
            .map(|ms| ms / 1000.0)
            .collect();
        summary(
            scenario,
            "ticker publish stalls (first failed to first stored batch)",
            stalls,
        );
        println!(
            "chaos {scenario}: {} fires, {} target calls, doubled {doubled:?}",
            expected.len(),
            calls.len()
        );

        // Every run in ClickHouse, once, succeeded, through the gateway.
        let http = jetcron_testkit::reqwest::Client::new();
        for i in 0..JOBS {
            let job = format!("chaos-{i}");
            let url = format!(
                "http://{}/v1/runs?job={job}&limit=500&from={}&to={}",
                self.http_addr,
                jetcron_core::time_format::rfc3339_millis(window_start),
                jetcron_core::time_format::rfc3339_millis(
                    window_end + chrono::Duration::seconds(1)
                )
            );
            let wanted: BTreeSet<DateTime<Utc>> = expected
                .iter()
                .filter(|(j, _)| *j == job)
                .map(|(_, t)| *t)
                .collect();
            let runs = wait_until("runs in ClickHouse", Duration::from_secs(90), || {
                let (http, url, wanted) = (http.clone(), url.clone(), wanted.clone());
                async move {
                    let body: serde_json::Value =
                        http.get(&url).send().await.ok()?.json().await.ok()?;
                    let runs = body["runs"].as_array()?.clone();
                    let succeeded: BTreeSet<DateTime<Utc>> = runs
                        .iter()
                        .filter(|r| r["status"] == "succeeded")
                        .filter_map(|r| r["scheduled_at"].as_str())
                        .filter_map(|t| DateTime::parse_from_rfc3339(t).ok())
                        .map(|t| t.with_timezone(&Utc))
                        .collect();
                    wanted.is_subset(&succeeded).then_some(runs)
                }
            })
            .await;
            let mut ids = BTreeSet::new();
            for run in &runs {
                let id = run["run_id"].as_str().expect("run id").to_string();
                assert!(ids.insert(id.clone()), "{job}: run {id} listed twice");
            }
        }
        // A second call is a retry, not a duplicate, when every call but the
        // last was an attempt the run records as timed out or failed (a
        // reply lost with a killed node: the target was called, the
        // executor could not know), or as lost with an executor SIGKILLed
        // right after it called the target (docs/runs.md, "Executor crash":
        // no process can know a call it made and died before recording).
        let mut duplicates = Vec::new();
        let mut retried = 0;
        for ((job, at), calls) in &doubled {
            if self.retries_of_failed_attempts(job, *at, calls).await {
                retried += 1;
            } else {
                duplicates.push(((job.clone(), *at), calls.clone()));
            }
        }
        println!(
            "chaos {scenario}: {retried} fires called again by a retry after a timed-out, failed or lost attempt"
        );
        assert!(
            duplicates.is_empty(),
            "{scenario}: targets called twice: {duplicates:?}"
        );
        Figures {
            fire_p99,
            fire_max,
            target_p50,
            target_p99,
            target_max,
            called_fires: per_fire.len(),
            reached_by_retry,
        }
    }

    /// Print what the run of a fire first reached by a retry records of
    /// each attempt (outcome, start, end, error): where its time went.
    async fn print_attempts(&self, scenario: &str, job: &str, at: DateTime<Utc>) {
        let attempts = match self.run(RunId::for_fire(job, at).as_str()).await {
            Ok(run) => run["attempts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| {
                    format!(
                        "#{} {} {}..{} {}",
                        a["attempt"],
                        a["outcome"].as_str().unwrap_or("-"),
                        a["started_at"].as_str().unwrap_or("-"),
                        a["finished_at"].as_str().unwrap_or("-"),
                        a["error"].as_str().unwrap_or("")
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
            Err(why) => why,
        };
        println!("chaos {scenario}: reached by a retry: {job} {at}: {attempts}");
    }

    /// `Ok` when the run of `job`'s fire at `at` was skipped by `forbid`
    /// naming a previous run that had an attempt going within the 2 s grace
    /// before the skip; else what it was.
    async fn skip_by_policy(&self, job: &str, at: DateTime<Utc>) -> Result<(), String> {
        let run = self.run(RunId::for_fire(job, at).as_str()).await?;
        let error = run["error"].as_str().unwrap_or_default();
        if run["status"] != "skipped" || !error.contains("is still going") {
            return Err(format!("status {}, error {error:?}", run["status"]));
        }
        let skipped_at = instant(&run["finished_at"]).ok_or("skip without finished_at")?;
        let holder = error
            .strip_prefix("run ")
            .and_then(|rest| rest.split(' ').next())
            .ok_or_else(|| format!("no holder in {error:?}"))?;
        let holder_run = self.run(holder).await?;
        let going = holder_run["attempts"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|attempt| {
                let started = instant(&attempt["started_at"]);
                let finished = instant(&attempt["finished_at"]);
                started.is_some_and(|s| s <= skipped_at)
                    && finished.is_none_or(|f| f >= skipped_at - chrono::Duration::seconds(3))
            });
        if going {
            Ok(())
        } else {
            Err(format!(
                "skipped for {holder}, which was not going: {holder_run}"
            ))
        }
    }

    /// Whether `calls` (attempt, instant) of a fire are one per attempt and
    /// every attempt but the last is recorded as timed out or failed.
    async fn retries_of_failed_attempts(
        &self,
        job: &str,
        at: DateTime<Utc>,
        calls: &[(u32, DateTime<Utc>)],
    ) -> bool {
        let Ok(run) = self.run(RunId::for_fire(job, at).as_str()).await else {
            return false;
        };
        let mut numbers: Vec<u32> = calls.iter().map(|c| c.0).collect();
        numbers.sort_unstable();
        let distinct = numbers.windows(2).all(|w| w[0] != w[1]);
        let outcome_of = |attempt: u32| {
            run["attempts"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| a["attempt"].as_u64() == Some(u64::from(attempt)))
                .and_then(|a| a["outcome"].as_str())
                .map(str::to_string)
        };
        let mut earlier: Vec<(u32, DateTime<Utc>)> = calls.to_vec();
        earlier.sort_unstable();
        earlier.pop();
        distinct
            && earlier
                .iter()
                .all(|(attempt, at)| match outcome_of(*attempt).as_deref() {
                    Some("timed_out" | "failed") => true,
                    Some("lost") => self.executor_killed_after(*at),
                    _ => false,
                })
    }

    /// Whether an executor was SIGKILLed within a few seconds after `call`
    /// (its own outcome would have been stored by then); the kill instant is
    /// taken just before the signal, so a call a moment after it counts.
    fn executor_killed_after(&self, call: DateTime<Utc>) -> bool {
        self.executor_kills.iter().any(|kill| {
            *kill - chrono::Duration::seconds(5) <= call
                && call <= *kill + chrono::Duration::milliseconds(200)
        })
    }

    fn kill_executor(&mut self, index: usize) {
        self.executor_kills.push(Utc::now());
        self.executors[index].kill_9();
    }

    /// A run through the gateway (`GET /v1/runs/{id}`), waiting for the
    /// projector to store it.
    async fn run(&self, run_id: &str) -> Result<serde_json::Value, String> {
        let url = format!("http://{}/v1/runs/{run_id}", self.http_addr);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(response) = jetcron_testkit::reqwest::get(&url).await {
                if let Ok(body) = response.json::<serde_json::Value>().await {
                    if body["ok"] == true {
                        return Ok(body["run"].clone());
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(format!("run {run_id} not found through the gateway"));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Say what became of fires that never reached their target, and fail.
    async fn explain_missing(
        &self,
        scenario: &str,
        missing: &[((String, DateTime<Utc>), String)],
        window_start: DateTime<Utc>,
    ) {
        let mut by_second: BTreeMap<i64, usize> = BTreeMap::new();
        for ((_, t), _) in missing {
            *by_second
                .entry(t.timestamp() - window_start.timestamp())
                .or_default() += 1;
        }
        for ((job, t), why) in missing.iter().take(3) {
            println!(
                "chaos {scenario}: {job} {t}: {}",
                why.chars().take(800).collect::<String>()
            );
        }
        panic!(
            "{scenario}: {} fires never called their target; by second of the window: {by_second:?}",
            missing.len()
        );
    }

    fn stop(mut self) {
        for process in self
            .tickers
            .iter_mut()
            .chain(self.executors.iter_mut())
            .chain([&mut self.projector, &mut self.gateway])
        {
            assert!(process.is_running(), "a process exited:\n{}", process.log());
        }
        for task in &self.tasks {
            task.abort();
        }
    }
}

struct Figures {
    fire_p99: f64,
    fire_max: f64,
    target_p50: f64,
    target_p99: f64,
    target_max: f64,
    /// Fires whose first attempt never reached the target (lost with a
    /// node, or held by an executor and redelivered before it started).
    reached_by_retry: Vec<RetriedFire>,
    /// Fires whose target was called (by any attempt).
    called_fires: usize,
}

/// A fire whose target was first called by a later attempt.
struct RetriedFire {
    /// Target-call lag of that call, seconds.
    lag: f64,
    /// The attempt that first reached the target.
    attempt: u32,
}

/// What each attempt that never reached the target may cost the fire
/// (seconds): the larger of the job's timeout and backoff (5 s + at most
/// 1 s up to a third attempt) and the executors' `--ack-wait` (10 s), which
/// a held fire redelivered before it started waits out.
const LOST_ATTEMPT_SECS: f64 = 10.0;

/// The latest attempt a fire may first be reached by.
const LATEST_FIRST_CALL: u32 = 3;

/// Bounds of the target-call lag (seconds): p50, p99, max.
///
/// Past the due event, a `forbid` fire needs the `jetcron_running` bucket's
/// leader at its instant (its claim is a compare-and-swap), so a node kill
/// that takes that leader costs the fires of that moment one election
/// (nats-server: 4-9 s). Leader kills alone stay within one election
/// (`LEADER_KILLS`). An executor's SIGKILL costs the fires it held one
/// `--ack-wait` (10 s here) past its last progress ack, and kills that
/// stack up on a node still catching up cost more (`ONE_AT_A_TIME`).
/// docs/operations.md explains both.
struct TargetLagBounds {
    p50: f64,
    p99: f64,
    max: f64,
    /// The share of fires (percent) that may be first reached by a later
    /// attempt.
    reached_late_percent: usize,
}

/// The ticker's lookahead on a cluster (its default with 3 replicas), seconds.
const LOOKAHEAD_SECS: f64 = 10.0;

/// The leader-kill scenario: a kill every 10 s, the node back 3 s later.
const KILL_EVERY: Duration = Duration::from_secs(10);
const KILLED_NODE_BACK_AFTER: Duration = Duration::from_secs(3);

/// A later attempt first reached 0.1-5.4 % of the fires in runs here (held
/// fires whose progress acks an election lost, requests lost with a node;
/// the most with both scenarios at once on two cores, as the suite runs).
const LEADER_KILLS: TargetLagBounds = TargetLagBounds {
    p50: 1.0,
    p99: 10.0,
    max: 15.0,
    reached_late_percent: 10,
};

/// Each executor SIGKILL hands the fires it held (about half the jobs'
/// for the 10 s lookahead) to the other as second attempts: 211 of 2,950
/// fires (7.2 %) in a CI run with two executor kills, 8.1 % in another.
const ONE_AT_A_TIME: TargetLagBounds = TargetLagBounds {
    p50: 1.0,
    p99: 30.0,
    max: 45.0,
    reached_late_percent: 15,
};

impl Figures {
    /// `stacked`: what the p99 and max of first attempts may add for kills that
    /// stacked up (see the leader-kill scenario); `election`: the longest a
    /// stream went without a leader after a kill (a retry's redelivery may
    /// meet the next kill).
    fn check_target_lag(&self, bounds: TargetLagBounds, stacked: f64, election: f64) {
        assert!(
            self.target_p50 <= bounds.p50,
            "target-call lag p50 {:.3}s > {} s",
            self.target_p50,
            bounds.p50
        );
        assert!(
            self.target_p99 <= bounds.p99 + stacked,
            "target-call lag p99 {:.3}s > {} s",
            self.target_p99,
            bounds.p99 + stacked
        );
        assert!(
            self.target_max <= bounds.max + stacked,
            "target-call lag max {:.3}s > {} s (p99 {:.3}s)",
            self.target_max,
            bounds.max + stacked,
            self.target_p99
        );
        let called_fires = self.called_fires;
        assert!(
            self.reached_by_retry.len() * 100 <= called_fires * bounds.reached_late_percent,
            "{} of {called_fires} fires first reached by a later attempt, over {} %",
            self.reached_by_retry.len(),
            bounds.reached_late_percent
        );
        // Each attempt lost before the one that reached the target adds its
        // timeout and backoff; attempts that span more than the 10 s between
        // kills can meet the next kill, whose election the redelivery waits
        // for (CI: attempts 1 and 2 of a fire lost after one kill, attempt 3
        // delivered after the next one's election, 27.9 s).
        for retried in &self.reached_by_retry {
            assert!(
                retried.attempt <= LATEST_FIRST_CALL,
                "a fire first reached by attempt {} (lag {:.3}s)",
                retried.attempt,
                retried.lag
            );
            let lost = f64::from(retried.attempt - 1);
            let bound = bounds.max + lost * LOST_ATTEMPT_SECS + election;
            assert!(
                retried.lag <= bound,
                "target-call lag of a fire first reached by attempt {} {:.3}s > {bound:.1} s",
                retried.attempt,
                retried.lag
            );
        }
    }
}

/// An RFC 3339 instant of a gateway answer.
fn instant(value: &serde_json::Value) -> Option<DateTime<Utc>> {
    value
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// The fires whose target was called over 2 s late, by scheduled second
/// (how many, lag range, attempts): where a failure cost time.
fn print_late_calls(scenario: &str, per_fire: &BTreeMap<(String, DateTime<Utc>), Vec<&Call>>) {
    let mut by_second: BTreeMap<DateTime<Utc>, Vec<(f64, u32)>> = BTreeMap::new();
    for ((_, scheduled), calls) in per_fire {
        let Some(first) = calls.iter().min_by_key(|c| c.at) else {
            continue;
        };
        let lag = (first.at - *scheduled).num_milliseconds() as f64 / 1000.0;
        if lag > 2.0 {
            by_second
                .entry(*scheduled)
                .or_default()
                .push((lag, first.attempt));
        }
    }
    for (second, late) in by_second.iter().take(60) {
        let lo = late.iter().map(|l| l.0).fold(f64::MAX, f64::min);
        let hi = late.iter().map(|l| l.0).fold(0.0, f64::max);
        let attempts: BTreeSet<u32> = late.iter().map(|l| l.1).collect();
        println!(
            "chaos {scenario}: late calls of {}: {} fires, lag {lo:.1}-{hi:.1}s, attempts {attempts:?}",
            second.format("%H:%M:%S"),
            late.len()
        );
    }
}

/// How long the stream takes to have a leader again after `killed_at`.
fn measure_election(
    probe: async_nats::jetstream::Context,
    killed_at: Instant,
) -> tokio::task::JoinHandle<Option<f64>> {
    tokio::spawn(async move {
        while killed_at.elapsed() < Duration::from_secs(30) {
            if NatsCluster::stream_leader(&probe, subjects::DUE_STREAM)
                .await
                .is_some()
            {
                return Some(killed_at.elapsed().as_secs_f64());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_due_stream_leader_killed_every_10_s_loses_and_doubles_no_fire() {
    let mut deployment = Deployment::start().await;
    let window_start = Utc::now() + chrono::Duration::seconds(1);
    let started = Instant::now();
    let mut elections = Vec::new();
    let mut next_kill = Duration::from_secs(5);
    let mut down: Option<(usize, Instant)> = None;
    while started.elapsed() < chaos_length() {
        if let Some((node, since)) = down {
            if since.elapsed() >= KILLED_NODE_BACK_AFTER {
                deployment.cluster.restart(node);
                down = None;
            }
        }
        if down.is_none() && started.elapsed() >= next_kill {
            let probe = deployment.probe();
            if let Some(leader) = NatsCluster::stream_leader(&probe, subjects::DUE_STREAM).await {
                let killed_at = Instant::now();
                println!(
                    "chaos leader-kills: {} kill node {leader} (leader of {})",
                    Utc::now().format("%H:%M:%S%.3f"),
                    subjects::DUE_STREAM
                );
                deployment.cluster.kill(leader);
                down = Some((leader, killed_at));
                elections.push(measure_election(probe, killed_at));
            }
            next_kill += KILL_EVERY;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some((node, _)) = down {
        deployment.cluster.restart(node);
    }
    let window_end = Utc::now() - chrono::Duration::seconds(1);
    let mut election_times = Vec::new();
    for election in elections {
        if let Ok(Some(took)) = election.await {
            election_times.push(took);
        }
    }
    let scenario = "leader-kills";
    let longest_election = election_times.iter().copied().fold(0.0, f64::max);
    summary(
        scenario,
        "JETCRON_DUE without a leader after SIGKILL of its leader",
        election_times,
    );
    let figures = deployment
        .verify(scenario, (window_start, window_end))
        .await;
    // The bounds hold while each election stays within the lookahead (10 s
    // on a cluster; nats-server's usual 4-9 s). A slower one (once 19 s
    // here) delays the fires by what it takes beyond the lookahead and no
    // more: publishing never stalls longer than the cluster's own election.
    // The bounds move by that much, and say so.
    let beyond = (longest_election - LOOKAHEAD_SECS).max(0.0);
    if beyond > 0.0 {
        println!("chaos {scenario}: an election took {longest_election:.1} s, {beyond:.1} s beyond the lookahead; bounds moved by that");
    }
    // An election longer than the time from a node's return to the next
    // kill (7 s) can meet that kill before the returned node is current:
    // the stream has one current replica, no quorum, until it catches up,
    // and the fires of that moment wait for both (a run here: elections up
    // to 10.5 s, three first attempts 17.3 s late). Whole seconds of fires
    // wait then, so the p99 moves with the max (9.7-9.9 s against 10 in runs
    // here with both scenarios at once).
    let between_kills = (KILL_EVERY - KILLED_NODE_BACK_AFTER).as_secs_f64();
    let stacked = if longest_election > between_kills {
        println!("chaos {scenario}: an election took {longest_election:.1} s, over the {between_kills} s from a node's return to the next kill; p99 and max bounds moved by it");
        longest_election
    } else {
        0.0
    };
    assert!(
        figures.fire_p99 <= 5.0 + beyond,
        "fire lag p99 {:.3}s > 5 s (+ {beyond:.1} s of election beyond the lookahead)",
        figures.fire_p99
    );
    assert!(
        figures.fire_max <= 15.0 + beyond,
        "fire lag max {:.3}s > 15 s (+ {beyond:.1} s of election beyond the lookahead)",
        figures.fire_max
    );
    figures.check_target_lag(
        TargetLagBounds {
            p99: LEADER_KILLS.p99 + beyond,
            max: LEADER_KILLS.max + beyond,
            ..LEADER_KILLS
        },
        stacked,
        longest_election,
    );
    deployment.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_tickers_executors_and_the_projector_killed_one_at_a_time() {
    let mut deployment = Deployment::start().await;
    let window_start = Utc::now() + chrono::Duration::seconds(1);
    let started = Instant::now();
    // (second, action), one failure at a time: a node every 20 s, a
    // process in between once the cluster has settled.
    let mut plan: Vec<(u64, &str)> = vec![
        (5, "kill node"),
        (10, "restart node"),
        (17, "kill ticker t0"),
        (19, "restart ticker t0"),
        (20, "kill ticker t0"),
        (23, "restart ticker t0"),
        (25, "kill node"),
        (30, "restart node"),
        (37, "kill executor 0"),
        (40, "restart executor 0"),
        (45, "kill node"),
        (50, "restart node"),
        (57, "kill projector"),
        (62, "restart projector"),
        (65, "kill node"),
        (70, "restart node"),
        (77, "kill ticker t1"),
        (82, "restart ticker t1"),
        (85, "kill node"),
        (90, "restart node"),
        (97, "kill executor 1"),
        (100, "restart executor 1"),
        (105, "kill node"),
        (110, "restart node"),
    ];
    plan.retain(|(at, _)| Duration::from_secs(*at) < chaos_length());
    plan.reverse();
    let mut node = 0;
    let mut ticker_kills: Vec<(usize, DateTime<Utc>)> = Vec::new();
    let mut acquired_before_start = [0usize; 2];
    while started.elapsed() < chaos_length() {
        while let Some((at, action)) = plan.last().copied() {
            if started.elapsed() < Duration::from_secs(at) {
                break;
            }
            plan.pop();
            println!(
                "chaos one-at-a-time: {} {action}",
                Utc::now().format("%H:%M:%S%.3f")
            );
            match action {
                "kill node" => deployment.cluster.kill(node),
                "restart node" => {
                    deployment.cluster.restart(node);
                    node = (node + 1) % deployment.cluster.len();
                }
                "kill ticker t0" | "kill ticker t1" => {
                    let index = usize::from(action.ends_with("t1"));
                    // A takeover is measured when the killed ticker owned
                    // shards (not when it died before acquiring any).
                    let owned = log_instants(&deployment.tickers[index].log(), "shard acquired")
                        .len()
                        > acquired_before_start[index];
                    deployment.tickers[index].kill_9();
                    if owned {
                        ticker_kills.push((index, Utc::now()));
                    }
                }
                "restart ticker t0" | "restart ticker t1" => {
                    let index = usize::from(action.ends_with("t1"));
                    acquired_before_start[index] =
                        log_instants(&deployment.tickers[index].log(), "shard acquired").len();
                    deployment.tickers[index].restart();
                }
                "kill executor 0" => deployment.kill_executor(0),
                "restart executor 0" => deployment.executors[0].restart(),
                "kill executor 1" => deployment.kill_executor(1),
                "restart executor 1" => deployment.executors[1].restart(),
                "kill projector" => deployment.projector.kill_9(),
                "restart projector" => deployment.projector.restart(),
                other => unreachable!("{other}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let window_end = Utc::now() - chrono::Duration::seconds(1);
    let scenario = "one-at-a-time";
    // Takeover: from a ticker's SIGKILL to the other's first acquisition.
    let takeovers: Vec<f64> = ticker_kills
        .iter()
        .filter_map(|(killed, at)| {
            let survivor = &deployment.tickers[1 - killed];
            let first = log_instants(&survivor.log(), "shard acquired")
                .into_iter()
                .filter(|t| t > at)
                .min()?;
            Some((first - *at).num_milliseconds() as f64 / 1000.0)
        })
        .collect();
    summary(
        scenario,
        "shards taken over after a ticker SIGKILL",
        takeovers.clone(),
    );
    let figures = deployment
        .verify(scenario, (window_start, window_end))
        .await;
    assert!(
        figures.fire_p99 <= 5.0,
        "fire lag p99 {:.3}s > 5 s",
        figures.fire_p99
    );
    assert!(
        figures.fire_max <= 15.0,
        "fire lag max {:.3}s > 15 s",
        figures.fire_max
    );
    // Elections are not measured here; nats-server's take 4-9 s, so a
    // retry's redelivery is allowed one of 10 s.
    figures.check_target_lag(ONE_AT_A_TIME, 0.0, LOOKAHEAD_SECS);
    // The first kill finds t0 with half the shards on a settled cluster.
    if let Some(first) = takeovers.first() {
        assert!(
            *first <= 5.0,
            "takeover after {first:.3}s, over the 5 s TTL"
        );
    }
    deployment.stop();
}
