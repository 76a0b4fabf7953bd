//! `e2e-bench faults`: the fault menu of issue 39 on the clustered form,
//! one fresh deployment per scenario ([`jetcron_testkit::deployment`]:
//! three nats-server nodes (R3), two tickers, two executors, a projector
//! and a gateway as processes, 20 jobs every second and 5 flaky ones every
//! 2 s with NATS targets), each measured at the target. The same scenarios
//! run in the test suite (`cluster_chaos`, `cluster_faults`), which assert
//! on them; this prints one table for docs/benchmarks.md.
//!
//! Partitions put the nodes in network namespaces (root); skewed clocks
//! need Debian's libfaketime (`infra/test.sh` installs both).

use std::path::PathBuf;
use std::time::Duration;

use jetcron_testkit::deployment::audit::{self, Findings};
use jetcron_testkit::deployment::scenarios::{self, Outcome};

#[derive(clap::Args)]
pub struct FaultsArgs {
    /// Scenarios to run, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "stalls,network,clocks,leader-kills,one-at-a-time"
    )]
    only: Vec<String>,
    /// How long each crash scenario lasts (leader-kills, one-at-a-time).
    #[arg(long, default_value_t = 120)]
    crash_seconds: u64,
    /// The jetcron binary (default: beside this one).
    #[arg(long)]
    jetcron: Option<PathBuf>,
}

/// Run every scenario asked for, then print the table.
pub async fn measure(args: &FaultsArgs) -> anyhow::Result<()> {
    let jetcron = super::jetcron_binary(args.jetcron.as_deref())?;
    let crash_length = Duration::from_secs(args.crash_seconds);
    let mut rows = Vec::new();
    for scenario in &args.only {
        let outcome = match scenario.as_str() {
            "stalls" => scenarios::stalls(&jetcron).await,
            "network" => scenarios::network(&jetcron).await,
            "clocks" => scenarios::clocks(&jetcron).await.0,
            "leader-kills" => scenarios::leader_kills(&jetcron, crash_length).await,
            "one-at-a-time" => scenarios::one_at_a_time(&jetcron, crash_length).await,
            other => anyhow::bail!(
                "--only {other:?}: no such scenario (stalls, network, clocks, leader-kills, one-at-a-time)"
            ),
        };
        for defect in outcome.findings.defects() {
            println!("{scenario}: {defect}");
        }
        for line in audit::doubled_seconds(&outcome.findings.doubled) {
            println!("{scenario}: {line}");
        }
        rows.push(row(&outcome));
        let Outcome { deployment, .. } = outcome;
        drop(deployment);
    }
    println!("\n| scenario | fires | missing | skipped (forbid) | called twice | stale calls | early calls | retried | history wrong | first-call lag p50 / p99 / max |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for line in rows {
        println!("{line}");
    }
    Ok(())
}

/// The table row of one scenario's findings.
fn row(outcome: &Outcome) -> String {
    let Findings {
        scenario,
        expected,
        missing,
        skipped,
        doubled,
        retried,
        stale,
        early,
        lag,
        history,
        ..
    } = &outcome.findings;
    format!(
        "| {scenario} | {expected} | {} | {skipped} | {} | {} | {} | {retried} | {} | {:.3} / {:.3} / {:.3} s |",
        missing.len(),
        doubled.len(),
        stale.len(),
        early.len(),
        history.len(),
        lag.p50,
        lag.p99,
        lag.max
    )
}
