//! The clustered form under crashes, as operators run it
//! ([`jetcron_testkit::deployment`]: three nats-server nodes (R3), two
//! tickers, two executors, a projector and a gateway as separate processes;
//! 20 jobs every second and 5 flaky ones every 2 s with NATS targets this
//! test answers, and 3 `concurrency: forbid` jobs every second).
//!
//! Two scenarios, both in the suite:
//! - the leader of `JETCRON_DUE` is SIGKILLed every 10 s and started again
//!   on its store 3 s later;
//! - failures one at a time: a node every 20 s (the next one in turn,
//!   restarted on its store 5 s later), and between them a ticker (again
//!   while it restarts), an executor, the projector, the other ticker, the
//!   other executor.
//!
//! Then: every fire called, none twice but for recorded retries, no stale
//! or early call, every run in ClickHouse once, succeeded; the first call
//! of each fire of the jobs that allow overlap within the bounds below
//! (issue 39 asks 15 s max, 5 s p99: not held yet). A `forbid` fire takes its
//! claim in `jetcron_running` at its instant: a node kill that takes that
//! bucket's leader costs it one election, bounded apart. The figures are
//! printed for docs/benchmarks.md:
//! `cargo nextest run -E 'test(/^cluster_chaos::/)' --no-capture`.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::Utc;
use jetcron_core::subjects;
use jetcron_testkit::deployment::audit::{Findings, Lags};
use jetcron_testkit::deployment::{Deployment, DeploymentOptions, Jobs};
use jetcron_testkit::NatsCluster;

fn jetcron() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_jetcron"))
}

/// How long a scenario lasts (`JETCRON_CHAOS_SECS` shortens it by hand).
fn chaos_length() -> Duration {
    Duration::from_secs(
        std::env::var("JETCRON_CHAOS_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(120),
    )
}

fn options() -> DeploymentOptions {
    DeploymentOptions {
        jobs: Jobs {
            forbid: 3,
            ..Jobs::default()
        },
        ..Default::default()
    }
}

/// Bounds on the first call of each fire, seconds: issue 39 asks 15 s
/// max and 5 s p99, which these runs do not hold yet (docs/operations.md,
/// "Faults"): an executor's SIGKILL leaves the fires it held to the ack
/// wait (3 s after their instant) and to the survivor's look at each run's
/// history (p99 7.1-17.6 s, max 11.9-22.5 s in runs of the one-at-a-time
/// scenario here). What is asserted is what holds every run, with room.
const MAX_LAG: f64 = 30.0;
const P99_LAG: f64 = 20.0;

/// A `forbid` fire waits for its claim through the election of the
/// `jetcron_running` bucket's leader (nats-server: 4-9 s) and the claim's
/// release by the run before it: at most this late.
const FORBID_MAX_LAG: f64 = 30.0;

/// The rules both scenarios hold to.
fn assert_held(findings: &Findings) {
    let defects = findings.defects();
    assert!(defects.is_empty(), "{}: {defects:#?}", findings.scenario);
    let none = Lags::default();
    for kind in ["steady", "flaky"] {
        let lags = findings.lag_by_kind.get(kind).unwrap_or(&none);
        assert!(
            lags.max <= MAX_LAG && lags.p99 <= P99_LAG,
            "{}: first calls of {kind} jobs {lags}, over {MAX_LAG} s max or {P99_LAG} s p99",
            findings.scenario
        );
    }
    let forbid = findings.lag_by_kind.get("forbid").unwrap_or(&none);
    assert!(
        forbid.max <= FORBID_MAX_LAG,
        "{}: first calls of forbid jobs {forbid}, over {FORBID_MAX_LAG} s",
        findings.scenario
    );
    // A request lost with a killed node holds its job for its timeout
    // (5 s): a few seconds of one job's fires per kill at most.
    assert!(
        findings.skipped * 100 <= findings.expected * 5,
        "{}: {} of {} fires skipped by forbid, over 5 %",
        findings.scenario,
        findings.skipped,
        findings.expected
    );
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
    let mut deployment = Deployment::start(jetcron(), options()).await;
    let window_start = Utc::now();
    let started = Instant::now();
    let mut elections = Vec::new();
    let mut next_kill = Duration::from_secs(5);
    let mut down: Option<(usize, Instant)> = None;
    while started.elapsed() < chaos_length() {
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
    let window_end = Utc::now() - chrono::Duration::seconds(1);
    let mut election_times = Vec::new();
    for election in elections {
        if let Ok(Some(took)) = election.await {
            election_times.push(took);
        }
    }
    println!(
        "leader-kills: JETCRON_DUE without a leader after SIGKILL of its leader: {}",
        Lags::of(election_times)
    );
    let findings = deployment
        .audit("leader-kills", window_start, window_end)
        .await;
    assert_held(&findings);
    deployment.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_tickers_executors_and_the_projector_killed_one_at_a_time() {
    let mut deployment = Deployment::start(jetcron(), options()).await;
    let window_start = Utc::now();
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
    plan.retain(|(at, _)| Duration::from_secs(*at) < chaos_length());
    plan.reverse();
    let mut node = 0;
    while started.elapsed() < chaos_length() {
        while let Some((at, action)) = plan.last().copied() {
            if started.elapsed() < Duration::from_secs(at) {
                break;
            }
            plan.pop();
            act(&mut deployment, action, &mut node);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let window_end = Utc::now() - chrono::Duration::seconds(1);
    let findings = deployment
        .audit("one-at-a-time", window_start, window_end)
        .await;
    assert_held(&findings);
    deployment.stop();
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
