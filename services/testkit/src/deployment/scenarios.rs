//! The fault menu as scenarios, each on a fresh [`Deployment`]: the tests
//! (`cluster_chaos`, `cluster_faults`) assert on what they find, and
//! `e2e-bench faults` prints it for docs/benchmarks.md.
//!
//! Faults fall half a second into a second where their moment is chosen,
//! so none lands on an instant's burst of calls.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use jetcron_core::subjects;

use super::audit::{Findings, Lags};
use super::{Deployment, DeploymentOptions, Jobs};
use crate::NatsCluster;

/// A scenario's deployment, still running, and what its audit found.
pub struct Outcome {
    pub deployment: Deployment,
    pub findings: Findings,
    /// Figures beside the audit's, one line each (printed as they come).
    pub notes: Vec<String>,
}

impl Outcome {
    fn note(&mut self, line: String) {
        println!("{}: {line}", self.findings.scenario);
        self.notes.push(line);
    }
}

/// Sleep until `at` seconds after `start`, half a second into that second.
async fn at_half_second(start: DateTime<Utc>, at: u64) {
    let target = start + chrono::Duration::seconds(at as i64);
    let target = DateTime::from_timestamp(target.timestamp(), 500_000_000).unwrap_or(target);
    if let Ok(wait) = (target - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

/// Audit the window from `start` to a second ago.
async fn audited(deployment: Deployment, scenario: &str, start: DateTime<Utc>) -> Outcome {
    let findings = deployment
        .audit(scenario, start, Utc::now() - chrono::Duration::seconds(1))
        .await;
    Outcome {
        deployment,
        findings,
        notes: Vec::new(),
    }
}

/// `which` process of `deployment` paused (SIGSTOP) from `during.0` to
/// `during.1` (seconds and a half after `start`).
async fn paused(
    deployment: &mut Deployment,
    start: DateTime<Utc>,
    what: &str,
    which: fn(&Deployment) -> &crate::JetcronProcess,
    during: (u64, u64),
) {
    at_half_second(start, during.0).await;
    deployment.fault_begins("pause", what.to_string());
    which(deployment).pause();
    at_half_second(start, during.1).await;
    which(deployment).resume();
    deployment.fault_over("pause", what);
}

fn first_executor(deployment: &Deployment) -> &crate::JetcronProcess {
    &deployment.executors[0]
}

fn first_ticker(deployment: &Deployment) -> &crate::JetcronProcess {
    &deployment.tickers[0]
}

/// An executor paused (SIGSTOP) 40 s, past its ack wait (13 s), then a
/// ticker paused 20 s, past its lease (5 s).
pub async fn stalls(binary: &Path) -> Outcome {
    let mut deployment = Deployment::start(binary, DeploymentOptions::default()).await;
    let start = Utc::now();
    paused(
        &mut deployment,
        start,
        "executor 0",
        first_executor,
        (5, 45),
    )
    .await;
    paused(&mut deployment, start, "ticker t0", first_ticker, (55, 75)).await;
    at_half_second(start, 90).await;
    let mut outcome = audited(deployment, "stalls", start).await;
    let lost = outcome.deployment.executors[0]
        .log()
        .matches("lease ran out")
        .count();
    outcome.note(format!("leases the woken executor found run out: {lost}"));
    outcome
}

/// Node 0 cut from the other two for 25 s (its clients stay connected to
/// it), then, once every stream is whole again (the healed node caught up;
/// at least 15 s after the heal), node 1 hung (SIGSTOP of nats-server) for
/// 15 s. Two faults at once are not this scenario's: with the healed node
/// not yet back, a hung node leaves one of three and every stream waits
/// for it (fires 20 s late in runs here).
pub async fn network(binary: &Path) -> Outcome {
    let options = DeploymentOptions {
        partitionable: true,
        ..Default::default()
    };
    let mut deployment = Deployment::start(binary, options).await;
    let start = Utc::now();
    at_half_second(start, 5).await;
    deployment.fault_begins("partition", "node 0");
    deployment.cluster.partition(0).expect("cut node 0");
    at_half_second(start, 30).await;
    deployment.cluster.heal(0).expect("heal node 0");
    deployment.fault_over("partition", "node 0");
    let whole_after = deployment
        .cluster
        .wait_until_whole(2, Duration::from_secs(60))
        .await;
    let hang_at = 45.max(Utc::now().signed_duration_since(start).num_seconds() as u64 + 2);
    at_half_second(start, hang_at).await;
    deployment.fault_begins("pause", "node 1");
    deployment.cluster.pause(1);
    at_half_second(start, hang_at + 15).await;
    deployment.cluster.resume(1);
    deployment.fault_over("pause", "node 1");
    at_half_second(start, hang_at + 35).await;
    let mut outcome = audited(deployment, "network", start).await;
    outcome.note(format!(
        "every stream whole again {:.1} s after the heal",
        whole_after.as_secs_f64()
    ));
    let left: usize = outcome
        .deployment
        .processes()
        .iter()
        .map(|(_, p)| p.log().matches("moving to another server").count())
        .sum();
    outcome.note(format!(
        "connections that left a cut-off or hung server: {left}"
    ));
    outcome
}

/// What a skewed process's `/readyz` said: (offset, status, body).
pub type SkewedReadiness = (i64, u16, String);

/// A ticker and an executor 30 s ahead join for 30 s, then two 30 s behind.
pub async fn clocks(binary: &Path) -> (Outcome, Vec<SkewedReadiness>) {
    let mut deployment = Deployment::start(binary, DeploymentOptions::default()).await;
    let start = Utc::now();
    let mut readiness = Vec::new();
    for (offset, from, to) in [(30i64, 3, 33), (-30, 36, 66)] {
        at_half_second(start, from).await;
        let metrics = start_skewed(&mut deployment, offset);
        // While it runs, the skewed ticker says why it is not ready.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (status, body) = ready_state(&metrics).await;
        readiness.push((offset, status, body));
        at_half_second(start, to).await;
        for (_, process) in deployment.extra.iter_mut() {
            process.kill_9();
        }
        deployment.fault_over("skew", &format!("ticker {offset:+}s"));
        deployment.fault_over("skew", &format!("executor {offset:+}s"));
    }
    at_half_second(start, 75).await;
    let mut outcome = audited(deployment, "clocks", start).await;
    for (offset, status, body) in &readiness {
        outcome.note(format!("the ticker {offset:+} s: /readyz {status} {body}"));
    }
    (outcome, readiness)
}

/// Start a ticker (with a metrics address, returned) and an executor whose
/// wall clocks are `offset` seconds off.
fn start_skewed(deployment: &mut Deployment, offset: i64) -> String {
    let env = crate::faketime_env(offset).expect("libfaketime");
    let metrics = format!("127.0.0.1:{}", crate::free_port());
    let replica = format!("skewed{}", offset.abs());
    deployment.fault_begins("skew", format!("ticker {offset:+}s"));
    deployment.start_extra(
        &format!("ticker {offset:+}s"),
        &[
            "ticker",
            "--replica-id",
            &replica,
            "--metrics-addr",
            &metrics,
        ],
        &env,
    );
    deployment.fault_begins("skew", format!("executor {offset:+}s"));
    deployment.start_extra(&format!("executor {offset:+}s"), &["executor"], &env);
    metrics
}

/// `/readyz` of a process's metrics address: (status, body).
async fn ready_state(addr: &str) -> (u16, String) {
    match reqwest::get(format!("http://{addr}/readyz")).await {
        Ok(response) => (
            response.status().as_u16(),
            response.text().await.unwrap_or_default(),
        ),
        Err(e) => (0, e.to_string()),
    }
}

/// The crash scenarios' jobs: the usual ones and 3 `forbid` jobs.
fn with_forbid_jobs() -> DeploymentOptions {
    DeploymentOptions {
        jobs: Jobs {
            forbid: 3,
            ..Jobs::default()
        },
        ..Default::default()
    }
}

/// The leader of `JETCRON_DUE` SIGKILLed every 10 s for `length`, started
/// again on its store 3 s later.
pub async fn leader_kills(binary: &Path, length: Duration) -> Outcome {
    let mut deployment = Deployment::start(binary, with_forbid_jobs()).await;
    let start = Utc::now();
    let started = Instant::now();
    let mut elections = Vec::new();
    let mut next_kill = Duration::from_secs(5);
    let mut down: Option<(usize, Instant)> = None;
    while started.elapsed() < length {
        if let Some((node, since)) = down {
            if since.elapsed() >= Duration::from_secs(3) {
                deployment.cluster.restart(node);
                deployment.fault_over("kill", &format!("node {node}"));
                down = None;
            }
        }
        if down.is_none() && started.elapsed() >= next_kill {
            let probe = jetcron_io::topology::context(deployment.client.clone());
            if let Some(leader) = NatsCluster::stream_leader(&probe, subjects::DUE_STREAM).await {
                let killed_at = Instant::now();
                deployment.fault_begins("kill", format!("node {leader}"));
                deployment.cluster.kill(leader);
                down = Some((leader, killed_at));
                elections.push(measure_election(probe, killed_at));
            }
            next_kill += Duration::from_secs(10);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some((node, _)) = down {
        deployment.cluster.restart(node);
        deployment.fault_over("kill", &format!("node {node}"));
    }
    let mut election_times = Vec::new();
    for election in elections {
        if let Ok(Some(took)) = election.await {
            election_times.push(took);
        }
    }
    let mut outcome = audited(deployment, "leader-kills", start).await;
    outcome.note(format!(
        "JETCRON_DUE without a leader after SIGKILL of its leader: {}",
        Lags::of(election_times)
    ));
    outcome
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

/// One failure at a time for `length`: a node every 20 s (the next in
/// turn, restarted on its store 5 s later), and between them a ticker
/// (again while it restarts), an executor, the projector, the other
/// ticker, the other executor.
pub async fn one_at_a_time(binary: &Path, length: Duration) -> Outcome {
    let mut deployment = Deployment::start(binary, with_forbid_jobs()).await;
    let start = Utc::now();
    let started = Instant::now();
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
    plan.retain(|(at, _)| Duration::from_secs(*at) < length);
    plan.reverse();
    let mut node = 0;
    while started.elapsed() < length {
        while let Some((at, action)) = plan.last().copied() {
            if started.elapsed() < Duration::from_secs(at) {
                break;
            }
            plan.pop();
            act(&mut deployment, action, &mut node);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    audited(deployment, "one-at-a-time", start).await
}

/// One step of the one-at-a-time plan; `node` is the next node in turn.
fn act(deployment: &mut Deployment, action: &str, node: &mut usize) {
    let index = usize::from(action.ends_with('1'));
    match action {
        "kill node" => {
            deployment.fault_begins("kill", format!("node {node}"));
            deployment.cluster.kill(*node);
        }
        "restart node" => {
            deployment.cluster.restart(*node);
            deployment.fault_over("kill", &format!("node {node}"));
            *node = (*node + 1) % deployment.cluster.len();
        }
        "kill ticker t0" | "kill ticker t1" => {
            deployment.fault_begins("kill", format!("ticker t{index}"));
            deployment.tickers[index].kill_9();
        }
        "restart ticker t0" | "restart ticker t1" => {
            deployment.tickers[index].restart();
            deployment.fault_over("kill", &format!("ticker t{index}"));
        }
        "kill executor 0" | "kill executor 1" => deployment.kill_executor(index),
        "restart executor 0" | "restart executor 1" => {
            deployment.executors[index].restart();
            deployment.fault_over("kill", &format!("executor {index}"));
        }
        "kill projector" => {
            deployment.fault_begins("kill", "projector");
            deployment.projector.kill_9();
        }
        "restart projector" => {
            deployment.projector.restart();
            deployment.fault_over("kill", "projector");
        }
        other => unreachable!("{other}"),
    }
}
