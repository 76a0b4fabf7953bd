//! The clustered form as operators run it, for fault tests and the fault
//! benchmark: three nats-server nodes (R3 topology), two tickers, two
//! executors, a projector and a gateway as separate `jetcron` processes,
//! ClickHouse, and jobs whose target this harness answers and records.
//!
//! The faults are the ones of Jepsen's menu that a scheduler meets:
//! process crashes (SIGKILL), process pauses (SIGSTOP), network partitions
//! of a node, hung servers and skewed clocks. Each fault a scenario makes is
//! recorded with its time ([`Deployment::faults`]), so an audit can tell a
//! retry after a lost attempt from a call made twice ([`audit`]).

pub mod audit;
pub mod scenarios;
pub mod target;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use jetcron_core::events::RunId;
use jetcron_core::subjects;

use crate::{wait_until, ClickHouseServer, JetcronProcess, NatsCluster};

/// How long an audit watches calls at least after its window: past the
/// executors' ack wait (13 s) and a leader election, so a fire delivered
/// again after a fault at the window's end shows its second call.
const LATE_CALLS_WATCHED: Duration = Duration::from_secs(20);
use audit::{Findings, Fire, FireCalls, Lags};
use target::Calls;

/// The jobs a deployment runs.
#[derive(Debug, Clone)]
pub struct Jobs {
    /// `steady-<i>`: every second, overlap allowed.
    pub steady: usize,
    /// `flaky-<i>`: every 2 s; the first attempt fails on every fourth second.
    pub flaky: usize,
    /// `forbid-<i>`: every second, `concurrency: forbid`.
    pub forbid: usize,
}

impl Default for Jobs {
    /// What issue 39 was measured with: 20 every second, 5 flaky every 2 s.
    fn default() -> Self {
        Self {
            steady: 20,
            flaky: 5,
            forbid: 0,
        }
    }
}

impl Jobs {
    /// (job id, period in seconds, the job's JSON).
    fn definitions(&self) -> Vec<(String, i64, String)> {
        let job = |id: String, schedule: &str, concurrency: &str| {
            let target = target::target_subject(&id);
            let json = format!(
                r#"{{"id":"{id}","schedule":"{schedule}","concurrency":"{concurrency}","timeout":"5s","retry":{{"max_attempts":5,"backoff":"500ms"}},"target":{{"type":"nats","subject":"{target}"}}}}"#
            );
            (id, json)
        };
        let mut all = Vec::new();
        for i in 0..self.steady {
            let (id, json) = job(format!("steady-{i}"), "* * * * * *", "allow");
            all.push((id, 1, json));
        }
        for i in 0..self.flaky {
            let (id, json) = job(format!("flaky-{i}"), "*/2 * * * * *", "allow");
            all.push((id, 2, json));
        }
        for i in 0..self.forbid {
            let (id, json) = job(format!("forbid-{i}"), "* * * * * *", "forbid");
            all.push((id, 1, json));
        }
        all
    }

    /// Every fire scheduled in (`from`, `to`].
    pub fn fires_between(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> BTreeSet<Fire> {
        let mut fires = BTreeSet::new();
        for (job, period, _) in self.definitions() {
            for second in from.timestamp() + 1..=to.timestamp() {
                if second % period == 0 {
                    fires.insert((
                        job.clone(),
                        DateTime::from_timestamp(second, 0).unwrap_or(from),
                    ));
                }
            }
        }
        fires
    }
}

/// How a deployment is made.
#[derive(Debug, Clone, Default)]
pub struct DeploymentOptions {
    pub jobs: Jobs,
    /// Nodes in network namespaces of their own, so one can be cut from the
    /// others ([`NatsCluster::partition`]).
    pub partitionable: bool,
    /// Extra arguments of every executor.
    pub executor_args: Vec<String>,
}

/// A fault a scenario made, and when.
#[derive(Debug, Clone)]
pub struct Fault {
    /// "kill", "pause", "partition", "skew", …
    pub kind: &'static str,
    /// What it hit: "executor 0", "node 1", …
    pub what: String,
    pub from: DateTime<Utc>,
    pub to: Option<DateTime<Utc>>,
}

/// The whole clustered deployment, firing.
pub struct Deployment {
    pub clickhouse: ClickHouseServer,
    pub cluster: NatsCluster,
    /// A client that may use every node.
    pub client: async_nats::Client,
    pub http_addr: String,
    pub gateway: JetcronProcess,
    pub tickers: Vec<JetcronProcess>,
    pub executors: Vec<JetcronProcess>,
    pub projector: JetcronProcess,
    /// Processes a scenario added (a skewed ticker, say).
    pub extra: Vec<(String, JetcronProcess)>,
    pub calls: Calls,
    pub jobs: Jobs,
    faults: Vec<Fault>,
    binary: PathBuf,
    env: Vec<(String, String)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Deployment {
    /// Start everything with `binary` (the `jetcron` executable), put the
    /// jobs as users do (`nats req jetcron.api.jobs.put`) and wait until
    /// every job's target is called.
    pub async fn start(binary: &Path, options: DeploymentOptions) -> Self {
        let clickhouse = ClickHouseServer::start();
        let cluster = if options.partitionable {
            NatsCluster::start_partitionable(3)
                .await
                .expect("a partitionable NATS cluster")
        } else {
            NatsCluster::start(3).await
        };
        let env = vec![
            ("JETCRON_NATS_URL".to_string(), cluster.urls()),
            ("JETCRON_REPLICAS".to_string(), "3".to_string()),
            ("JETCRON_CLICKHOUSE_URL".to_string(), clickhouse.url()),
        ];
        let env_refs: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let http_addr = format!("127.0.0.1:{}", crate::free_port());
        let gateway = JetcronProcess::start(
            binary,
            &[
                "gateway",
                "--http-addr",
                &http_addr,
                "--missed-scan-interval",
                "0s",
            ],
            &env_refs,
        );
        let tickers = ["t0", "t1"]
            .iter()
            .map(|id| JetcronProcess::start(binary, &["ticker", "--replica-id", id], &env_refs))
            .collect();
        let mut executor_args = vec![
            "executor".to_string(),
            "--shutdown-grace".into(),
            "5s".into(),
        ];
        executor_args.extend(options.executor_args.iter().cloned());
        let executor_args: Vec<&str> = executor_args.iter().map(String::as_str).collect();
        let executors = (0..2)
            .map(|_| JetcronProcess::start(binary, &executor_args, &env_refs))
            .collect();
        let projector = JetcronProcess::start(binary, &["projector"], &env_refs);
        let client = cluster.client().await;
        let mut node_clients = Vec::new();
        for node in 0..cluster.len() {
            node_clients.push(cluster.node(node).client().await);
        }
        let (calls, tasks) = target::serve(node_clients).await;
        let deployment = Self {
            clickhouse,
            cluster,
            client,
            http_addr,
            gateway,
            tickers,
            executors,
            projector,
            extra: Vec::new(),
            calls,
            jobs: options.jobs,
            faults: Vec::new(),
            binary: binary.to_path_buf(),
            env,
            tasks,
        };
        deployment.wait_ready().await;
        deployment.put_jobs().await;
        deployment.wait_every_job_called().await;
        deployment
    }

    async fn wait_ready(&self) {
        let readyz = format!("http://{}/readyz", self.http_addr);
        wait_until("the gateway ready", Duration::from_secs(60), || {
            let readyz = readyz.clone();
            async move {
                let response = reqwest::get(&readyz).await.ok()?;
                (response.status() == 200).then_some(())
            }
        })
        .await;
    }

    async fn put_jobs(&self) {
        for (_, _, job) in self.jobs.definitions() {
            // `/readyz` says the gateway serves; its API subscription may
            // still be on its way to the node this client is on (no
            // responders for a moment), as `nats req` would see too.
            let reply = wait_until("the job API answering", Duration::from_secs(10), || {
                let (client, job) = (self.client.clone(), job.clone());
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
    }

    async fn wait_every_job_called(&self) {
        let wanted = self.jobs.definitions().len();
        wait_until("every job firing", Duration::from_secs(30), || async {
            let jobs: BTreeSet<String> = self.calls.snapshot().into_iter().map(|c| c.job).collect();
            (jobs.len() == wanted).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    /// The environment every process of the deployment is started with.
    pub fn env(&self) -> Vec<(String, String)> {
        self.env.clone()
    }

    /// Start another process of the deployment (`args` after the binary),
    /// with `env` added: a ticker or executor under a skewed clock, say.
    pub fn start_extra(&mut self, name: &str, args: &[&str], env: &[(String, String)]) {
        let all: Vec<(&str, &str)> = self
            .env
            .iter()
            .chain(env)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let process = JetcronProcess::start(&self.binary, args, &all);
        self.extra.push((name.to_string(), process));
    }

    /// Record that `kind` hit `what` from now (see [`Deployment::fault_over`]).
    pub fn fault_begins(&mut self, kind: &'static str, what: impl Into<String>) {
        let what = what.into();
        println!("fault: {} {kind} {what}", Utc::now().format("%H:%M:%S%.3f"));
        self.faults.push(Fault {
            kind,
            what,
            from: Utc::now(),
            to: None,
        });
    }

    /// Record that the last fault of `kind` on `what` ended now.
    pub fn fault_over(&mut self, kind: &'static str, what: &str) {
        println!(
            "fault over: {} {kind} {what}",
            Utc::now().format("%H:%M:%S%.3f")
        );
        if let Some(fault) = self
            .faults
            .iter_mut()
            .rev()
            .find(|f| f.kind == kind && f.what == what && f.to.is_none())
        {
            fault.to = Some(Utc::now());
        }
    }

    pub fn faults(&self) -> &[Fault] {
        &self.faults
    }

    /// SIGKILL executor `index` (recorded as a fault).
    pub fn kill_executor(&mut self, index: usize) {
        self.fault_begins("kill", format!("executor {index}"));
        self.executors[index].kill_9();
    }

    /// Every process of the deployment, by name.
    pub fn processes(&self) -> Vec<(String, &JetcronProcess)> {
        let mut all = vec![
            ("t0".to_string(), &self.tickers[0]),
            ("t1".to_string(), &self.tickers[1]),
            ("e0".to_string(), &self.executors[0]),
            ("e1".to_string(), &self.executors[1]),
            ("projector".to_string(), &self.projector),
            ("gateway".to_string(), &self.gateway),
        ];
        all.extend(self.extra.iter().map(|(n, p)| (n.clone(), p)));
        all
    }

    /// With `JETCRON_CHAOS_LOGS=<dir>`, write every process's log there,
    /// named by scenario, the time of the dump and process (runs of one
    /// scenario keep theirs apart).
    pub fn dump_logs(&self, scenario: &str) {
        let Ok(dir) = std::env::var("JETCRON_CHAOS_LOGS") else {
            return;
        };
        let _ = std::fs::create_dir_all(&dir);
        let at = Utc::now().format("%H%M%S");
        for (name, process) in self.processes() {
            let _ = std::fs::write(
                format!("{dir}/{scenario}-{at}-{name}.log"),
                crate::without_colour_codes(&process.log()),
            );
        }
    }

    /// Audit every fire scheduled in (`from`, `to`]: waits up to a minute
    /// for late fires and for ClickHouse, then says what it found.
    pub async fn audit(&self, scenario: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> Findings {
        let expected = self.jobs.fires_between(from, to);
        let (not_called, mut skips) = self.wait_for_calls(&expected).await;
        let not_called: BTreeSet<Fire> = not_called.into_iter().collect();
        self.dump_logs(scenario);
        let mut findings = Findings {
            scenario: scenario.to_string(),
            expected: expected.len(),
            ..Findings::default()
        };
        // First every run of the window in ClickHouse: what follows reads
        // single runs, which are there by then.
        findings.history = self
            .history_problems(&expected, &not_called, from, to)
            .await;
        for fire in &not_called {
            if skips.contains(fire) || self.skipped_by_forbid(fire).await {
                skips.insert(fire.clone());
                findings.skipped += 1;
            } else {
                findings.missing.push(fire.clone());
            }
        }
        let calls = self.calls.snapshot();
        findings.skipped_and_called = calls
            .iter()
            .map(|c| (c.job.clone(), c.scheduled_at))
            .filter(|fire| skips.contains(fire))
            .collect::<BTreeSet<Fire>>()
            .into_iter()
            .collect();
        findings.foreign = audit::foreign_run_ids(&calls).len();
        let per_fire = audit::calls_per_fire(&expected, &calls);
        self.judge_calls(&per_fire, &mut findings).await;
        for line in audit::late_seconds(&per_fire) {
            println!("{scenario}: {line}");
        }
        println!("{}", findings.report());
        findings
    }

    /// Lags, early, stale, doubled and retried calls of each called fire.
    async fn judge_calls(
        &self,
        per_fire: &std::collections::BTreeMap<Fire, FireCalls>,
        findings: &mut Findings,
    ) {
        let mut lags = Vec::new();
        let mut by_kind: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
        for fire in per_fire.values() {
            lags.push(fire.lag());
            by_kind
                .entry(audit::kind_of(&fire.fire.0).to_string())
                .or_default()
                .push(fire.lag());
            if let Some(early) = fire.early_by() {
                findings.early.push((fire.fire.clone(), early));
            }
            if fire.stale() {
                findings.stale.push(fire.clone());
            } else if fire.calls.len() > 1 {
                if self.retries_of_failed_attempts(fire).await {
                    findings.retried += 1;
                } else {
                    findings.doubled.push(fire.clone());
                }
            }
        }
        findings.later_than_15s = lags.iter().filter(|l| **l > 15.0).count();
        findings.lag = Lags::of(lags);
        findings.lag_by_kind = by_kind
            .into_iter()
            .map(|(kind, lags)| (kind, Lags::of(lags)))
            .collect();
    }

    /// Wait up to a minute for every fire of `expected` to reach its
    /// target, or, once only fires of `forbid` jobs are left, to be
    /// recorded as skipped (waiting on would only wait out the minute), but
    /// then at least [`LATE_CALLS_WATCHED`], as the minute did, so a late
    /// second call of a fire (a redelivery after a fault at the window's
    /// end) is still seen; the fires not called, and those of them found
    /// skipped. A skip is final: a skipped fire called later is a defect
    /// the audit reports. When every fire was called it returns at once, as
    /// it always did: the scenarios end 9-20 s after their last fault, but
    /// for the leader kills, whose `forbid` skips then hold it for the
    /// watch.
    async fn wait_for_calls(&self, expected: &BTreeSet<Fire>) -> (Vec<Fire>, BTreeSet<Fire>) {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(60);
        let mut skipped: BTreeSet<Fire> = BTreeSet::new();
        loop {
            let called: BTreeSet<Fire> = self
                .calls
                .snapshot()
                .into_iter()
                .map(|c| (c.job, c.scheduled_at))
                .collect();
            let missing: Vec<Fire> = expected.difference(&called).cloned().collect();
            let watched = started.elapsed() >= LATE_CALLS_WATCHED;
            if missing.is_empty()
                || Instant::now() > deadline
                || (watched && self.all_skipped(&missing, &mut skipped).await)
            {
                return (missing, skipped);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Whether every fire of `missing` is a `forbid` job's fire recorded as
    /// skipped; `skipped` keeps those found so, so each is asked once.
    /// Asks nothing while a fire of another kind is missing.
    async fn all_skipped(&self, missing: &[Fire], skipped: &mut BTreeSet<Fire>) -> bool {
        let unsettled: Vec<&Fire> = missing.iter().filter(|f| !skipped.contains(*f)).collect();
        if unsettled
            .iter()
            .any(|(job, _)| audit::kind_of(job) != "forbid")
        {
            return false;
        }
        for fire in unsettled {
            if !self.skipped_by_forbid(fire).await {
                return false;
            }
            skipped.insert(fire.clone());
        }
        true
    }

    /// Whether a fire never called was skipped by `forbid` while its
    /// previous run still called its target.
    async fn skipped_by_forbid(&self, (job, at): &Fire) -> bool {
        let Ok(run) = self.run(RunId::for_fire(job, *at).as_str()).await else {
            return false;
        };
        run["status"] == "skipped"
            && run["error"]
                .as_str()
                .is_some_and(|e| e.contains("is still going"))
    }

    /// Whether every call of a fire but the last was one the target
    /// answered with a failure, or an attempt its run records as failed or
    /// timed out (its reply lost), or as lost with an executor killed or
    /// paused around that call (no process can know a call it made and died
    /// or stalled before recording).
    async fn retries_of_failed_attempts(&self, fire: &FireCalls) -> bool {
        let earlier = &fire.calls[..fire.calls.len() - 1];
        if earlier.iter().all(|(_, _, failed)| *failed) {
            return true;
        }
        let Ok(run) = self
            .run(RunId::for_fire(&fire.fire.0, fire.fire.1).as_str())
            .await
        else {
            return false;
        };
        let outcome_of = |attempt: u32| {
            run["attempts"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| a["attempt"].as_u64() == Some(u64::from(attempt)))
                .and_then(|a| a["outcome"].as_str())
                .map(str::to_string)
        };
        earlier.iter().all(|(attempt, at, failed)| {
            *failed
                || match outcome_of(*attempt).as_deref() {
                    Some("timed_out" | "failed") => true,
                    Some("lost") => self.executor_fault_around(*at),
                    _ => false,
                }
        })
    }

    /// Whether an executor was killed or paused within a few seconds after
    /// `call` (its outcome would have been stored by then).
    fn executor_fault_around(&self, call: DateTime<Utc>) -> bool {
        self.faults.iter().any(|f| {
            matches!(f.kind, "kill" | "pause")
                && f.what.starts_with("executor")
                && f.from - chrono::Duration::seconds(5) <= call
                && call <= f.from + chrono::Duration::milliseconds(200)
        })
    }

    /// Runs of the window missing from ClickHouse (read through the
    /// gateway), listed twice, or not succeeded; a minute is given for the
    /// projector to catch up.
    async fn history_problems(
        &self,
        expected: &BTreeSet<Fire>,
        skipped: &BTreeSet<Fire>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Vec<String> {
        let jobs: BTreeSet<&String> = expected.iter().map(|(j, _)| j).collect();
        let mut problems = Vec::new();
        for job in jobs {
            let wanted: BTreeSet<DateTime<Utc>> = expected
                .iter()
                .filter(|(j, _)| j == job)
                .filter(|f| !skipped.contains(*f))
                .map(|(_, t)| *t)
                .collect();
            problems.extend(self.job_history_problems(job, &wanted, from, to).await);
        }
        problems
    }

    async fn job_history_problems(
        &self,
        job: &str,
        wanted: &BTreeSet<DateTime<Utc>>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Vec<String> {
        let url = format!(
            "http://{}/v1/runs?job={job}&limit=500&from={}&to={}",
            self.http_addr,
            jetcron_core::time_format::rfc3339_millis(from),
            jetcron_core::time_format::rfc3339_millis(to + chrono::Duration::seconds(1))
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let runs = self.runs_listed(&url).await;
            let succeeded: BTreeSet<DateTime<Utc>> = runs
                .iter()
                .filter(|(_, _, status)| status == "succeeded")
                .map(|(_, at, _)| *at)
                .collect();
            let missing: Vec<&DateTime<Utc>> = wanted.difference(&succeeded).collect();
            if missing.is_empty() || Instant::now() > deadline {
                let mut problems: Vec<String> = missing
                    .iter()
                    .map(|at| {
                        let status = runs
                            .iter()
                            .find(|(_, t, _)| t == *at)
                            .map_or("absent", |(_, _, s)| s.as_str());
                        format!("{job} {at}: {status}")
                    })
                    .collect();
                let mut ids = BTreeSet::new();
                for (id, at, _) in &runs {
                    if !ids.insert(id.clone()) {
                        problems.push(format!("{job} {at}: run {id} listed twice"));
                    }
                }
                return problems;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// (run id, scheduled time, status) of every run a listing answers.
    async fn runs_listed(&self, url: &str) -> Vec<(String, DateTime<Utc>, String)> {
        let Ok(response) = reqwest::get(url).await else {
            return Vec::new();
        };
        let Ok(body) = response.json::<serde_json::Value>().await else {
            return Vec::new();
        };
        body["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                let at = DateTime::parse_from_rfc3339(r["scheduled_at"].as_str()?).ok()?;
                Some((
                    r["run_id"].as_str()?.to_string(),
                    at.with_timezone(&Utc),
                    r["status"].as_str()?.to_string(),
                ))
            })
            .collect()
    }

    /// A run through the gateway (`GET /v1/runs/{id}`), waiting up to 3 s
    /// for it (the audit asks only once the window's runs were listed).
    pub async fn run(&self, run_id: &str) -> Result<serde_json::Value, String> {
        let url = format!("http://{}/v1/runs/{run_id}", self.http_addr);
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            if let Ok(response) = reqwest::get(&url).await {
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

    /// Check every process the deployment started with still runs, and
    /// stop the harness's tasks (the processes and servers stop when
    /// dropped).
    pub fn stop(mut self) {
        for (name, process) in self.processes_mut() {
            assert!(process.is_running(), "{name} exited:\n{}", process.log());
        }
        for task in &self.tasks {
            task.abort();
        }
    }

    fn processes_mut(&mut self) -> Vec<(String, &mut JetcronProcess)> {
        let mut all: Vec<(String, &mut JetcronProcess)> = Vec::new();
        for (i, t) in self.tickers.iter_mut().enumerate() {
            all.push((format!("ticker {i}"), t));
        }
        for (i, e) in self.executors.iter_mut().enumerate() {
            all.push((format!("executor {i}"), e));
        }
        all.push(("projector".into(), &mut self.projector));
        all.push(("gateway".into(), &mut self.gateway));
        all
    }
}
