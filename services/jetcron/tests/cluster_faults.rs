//! The clustered form through the faults besides crashes (issue 39), each
//! on real processes: three nats-server nodes (R3), two tickers, two
//! executors, a projector and a gateway as separate `jetcron` processes,
//! ClickHouse, 20 jobs every second and 5 flaky ones every 2 s with NATS
//! targets this test answers ([`jetcron_testkit::deployment`]).
//!
//! - stalls: an executor paused (SIGSTOP) past its ack wait, then a ticker
//!   paused past its lease;
//! - network: a node cut from the other two while its clients stay
//!   connected to it, then a node hung (SIGSTOP of nats-server);
//! - clocks: a ticker and an executor 30 s ahead join, then two 30 s behind.
//!
//! Each asserts the exact fire set, no stale call (an older attempt after a
//! newer one), no early call, every run in ClickHouse once, no call made
//! twice (the network scenario: a bounded share, see there), and the lag of
//! each fire's first call at its target: at most 15 s, p99 at most 5 s
//! (the network scenario: see there). The figures are printed for
//! docs/benchmarks.md:
//! `cargo nextest run -E 'test(/^cluster_faults::/)' --no-capture`.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use jetcron_testkit::deployment::audit::Findings;
use jetcron_testkit::deployment::{Deployment, DeploymentOptions};

fn jetcron() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_jetcron"))
}

/// Issue 39's bounds on the first call of each fire, seconds.
const MAX_LAG: f64 = 15.0;
const P99_LAG: f64 = 5.0;

/// Sleep until `at` seconds after `start` and half a second into a second:
/// a fault then never falls on an instant's burst of calls.
async fn at_half_second(start: DateTime<Utc>, at: u64) {
    let target = start + chrono::Duration::seconds(at as i64);
    let target = DateTime::from_timestamp(target.timestamp(), 500_000_000).unwrap_or(target);
    if let Ok(wait) = (target - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

/// The rules every scenario holds to.
fn assert_held(findings: &Findings) {
    let defects = findings.defects();
    assert!(defects.is_empty(), "{}: {defects:#?}", findings.scenario);
    assert!(
        findings.lag.max <= MAX_LAG,
        "{}: a fire first called {:.3} s late (over {MAX_LAG} s)",
        findings.scenario,
        findings.lag.max
    );
    assert!(
        findings.lag.p99 <= P99_LAG,
        "{}: p99 of first calls {:.3} s (over {P99_LAG} s)",
        findings.scenario,
        findings.lag.p99
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_executor_or_ticker_acts_on_nothing_it_held_and_fires_stay_on_time() {
    let mut deployment = Deployment::start(jetcron(), DeploymentOptions::default()).await;
    let start = Utc::now();
    // Past the executors' ack wait on a cluster (15 s): every fire the
    // executor held went to the other meanwhile.
    at_half_second(start, 5).await;
    deployment.fault_begins("pause", "executor 0");
    deployment.executors[0].pause();
    at_half_second(start, 45).await;
    deployment.executors[0].resume();
    deployment.fault_over("pause", "executor 0");
    // Past the ticker lease's TTL (5 s): its shards went to the other ticker.
    at_half_second(start, 55).await;
    deployment.fault_begins("pause", "ticker t0");
    deployment.tickers[0].pause();
    at_half_second(start, 75).await;
    deployment.tickers[0].resume();
    deployment.fault_over("pause", "ticker t0");
    at_half_second(start, 90).await;
    let findings = deployment
        .audit("stalls", start, Utc::now() - chrono::Duration::seconds(1))
        .await;
    let woke = deployment.executors[0].log();
    println!(
        "stalls: leases the woken executor found run out: {}",
        woke.matches("lease ran out").count()
    );
    assert_held(&findings);
    deployment.stop();
}

/// What a cut-off or hung node still costs, held every run with room
/// (docs/operations.md, "Faults"): fires that reached an executor through
/// the node in its first seconds are called again once the majority hands
/// them out (0.4-2.3 % of the fires in the last runs here), and the first
/// calls of a few seconds come up to 13 s late.
const NETWORK_MAX_LAG: f64 = 30.0;
const NETWORK_P99_LAG: f64 = 15.0;
const NETWORK_DOUBLED_PERCENT: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_cut_off_or_hung_is_left_within_seconds_and_fires_stay_on_time() {
    let mut deployment = Deployment::start(
        jetcron(),
        DeploymentOptions {
            partitionable: true,
            ..Default::default()
        },
    )
    .await;
    let start = Utc::now();
    at_half_second(start, 5).await;
    deployment.fault_begins("partition", "node 0");
    deployment.cluster.partition(0).expect("cut node 0");
    at_half_second(start, 30).await;
    deployment.cluster.heal(0).expect("heal node 0");
    deployment.fault_over("partition", "node 0");
    at_half_second(start, 45).await;
    deployment.fault_begins("pause", "node 1");
    deployment.cluster.pause(1);
    at_half_second(start, 60).await;
    deployment.cluster.resume(1);
    deployment.fault_over("pause", "node 1");
    at_half_second(start, 80).await;
    let findings = deployment
        .audit("network", start, Utc::now() - chrono::Duration::seconds(1))
        .await;
    let left: usize = deployment
        .processes()
        .iter()
        .map(|(_, p)| p.log().matches("moving to another server").count())
        .sum();
    println!("network: connections that left a cut-off or hung server: {left}");
    let doubled = findings.doubled.len();
    let others: Vec<String> = findings
        .defects()
        .into_iter()
        .filter(|d| !d.contains("called twice"))
        .collect();
    assert!(others.is_empty(), "network: {others:#?}");
    assert!(
        doubled * 100 <= findings.expected * NETWORK_DOUBLED_PERCENT,
        "network: {doubled} of {} fires called twice, over {NETWORK_DOUBLED_PERCENT} %",
        findings.expected
    );
    assert!(
        findings.lag.max <= NETWORK_MAX_LAG && findings.lag.p99 <= NETWORK_P99_LAG,
        "network: first calls {}, over {NETWORK_MAX_LAG} s max or {NETWORK_P99_LAG} s p99",
        findings.lag
    );
    deployment.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ticker_and_an_executor_with_skewed_clocks_call_nothing_early() {
    let mut deployment = Deployment::start(jetcron(), DeploymentOptions::default()).await;
    let start = Utc::now();
    let mut readyz = Vec::new();
    for (offset, from, to) in [(30i64, 3, 33), (-30, 36, 66)] {
        at_half_second(start, from).await;
        let env = jetcron_testkit::faketime_env(offset).expect("libfaketime");
        let name = |role: &str| format!("{role} {offset:+}s");
        deployment.fault_begins("skew", name("ticker"));
        let metrics = format!("127.0.0.1:{}", jetcron_testkit::free_port());
        deployment.start_extra(
            &name("ticker"),
            &[
                "ticker",
                "--replica-id",
                &format!("skewed{}", offset.abs()),
                "--metrics-addr",
                &metrics,
            ],
            &env,
        );
        deployment.fault_begins("skew", name("executor"));
        deployment.start_extra(&name("executor"), &["executor"], &env);
        // While it runs, the skewed ticker says why it is not ready.
        tokio::time::sleep(Duration::from_secs(10)).await;
        readyz.push((offset, ready_state(&metrics).await));
        at_half_second(start, to).await;
        for (_, process) in deployment.extra.iter_mut() {
            process.kill_9();
        }
        deployment.fault_over("skew", &name("ticker"));
        deployment.fault_over("skew", &name("executor"));
    }
    at_half_second(start, 75).await;
    let findings = deployment
        .audit("clocks", start, Utc::now() - chrono::Duration::seconds(1))
        .await;
    for (offset, (status, body)) in &readyz {
        println!("clocks: the ticker {offset:+} s: /readyz {status} {body}");
        assert_eq!(*status, 503, "{body}");
        let expected = if *offset > 0 { "ahead of" } else { "behind" };
        assert!(body.contains(expected), "{body}");
    }
    assert_held(&findings);
    deployment.stop();
}

/// `/readyz` of a process's metrics address: (status, body).
async fn ready_state(addr: &str) -> (u16, String) {
    let url = format!("http://{addr}/readyz");
    match jetcron_testkit::reqwest::get(&url).await {
        Ok(response) => (
            response.status().as_u16(),
            response.text().await.unwrap_or_default(),
        ),
        Err(e) => (0, e.to_string()),
    }
}
