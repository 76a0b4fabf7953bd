//! The regression guard CI runs (`e2e-bench smoke`): three short `run`s,
//! compared with the figures recorded in `loadtest/smoke.json`:
//! - 10,000 jobs every second, more than this machine executes: runs/s and
//!   CPU per run;
//! - 1,000 jobs every second, which it keeps up with easily: target-call
//!   p99;
//! - 5,000 jobs every second, which it keeps up with under load: target-call
//!   p99 again, since how late calls get when the executor is busy (how many
//!   calls it holds out at once, how it spreads a burst) moves it while
//!   leaving the 1,000-job p99 alone.
//!
//! It fails only on a fall far below them (a third of the throughput, three
//! times the CPU per run or a p99), so a slowdown is caught when it lands
//! while the noise of a shared machine is not.
//!
//! `e2e-bench smoke --record` measures and writes the file instead; commit
//! it with the change that moved the figures, and say so in
//! docs/benchmarks.md.

use std::path::PathBuf;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::{run, RunArgs, Servers};
use jetcron_loadtest::percentile;

/// How far a figure may fall before the guard fails.
const TOLERANCE: f64 = 3.0;

/// The least growth of the target-call p99 that counts as a fall.
const LAG_SLACK_MS: f64 = 100.0;

#[derive(clap::Args, Clone)]
pub struct SmokeArgs {
    /// The recorded figures.
    #[arg(long, default_value = "loadtest/smoke.json")]
    recorded: PathBuf,
    /// Measure and write the recorded figures instead of checking them.
    #[arg(long)]
    record: bool,
    /// The jetcron binary (default: beside this one).
    #[arg(long)]
    jetcron: Option<PathBuf>,
}

/// The figures the guard compares.
#[derive(Debug, Serialize, Deserialize)]
struct Figures {
    /// At 10,000 jobs.
    runs_per_second: f64,
    /// At 10,000 jobs.
    cpu_per_run_us: f64,
    /// At 1,000 jobs.
    target_call_p99_ms: f64,
    /// At 5,000 jobs.
    target_call_p99_5k_ms: f64,
}

pub async fn check(args: &SmokeArgs) -> anyhow::Result<()> {
    let run_args = |jobs| RunArgs {
        jobs,
        seconds: 10,
        warmup: 5,
        jetcron: args.jetcron.clone(),
        jetcron_args: Vec::new(),
        log_filter: None,
        keep_log: None,
        per_second: false,
        trace_jobs: 0,
    };
    println!("### 10,000 jobs\n");
    let saturated = run(&Servers::start(), &run_args(10_000)).await?;
    println!("\n### 1,000 jobs\n");
    let kept_up = run(&Servers::start(), &run_args(1_000)).await?;
    println!("\n### 5,000 jobs\n");
    let busy = run(&Servers::start(), &run_args(5_000)).await?;
    let figures = Figures {
        runs_per_second: saturated.runs_per_second,
        cpu_per_run_us: saturated.cpu_per_run_us,
        target_call_p99_ms: p99_ms(&kept_up.lags),
        target_call_p99_5k_ms: p99_ms(&busy.lags),
    };
    if args.record {
        let text = serde_json::to_string_pretty(&figures)? + "\n";
        std::fs::write(&args.recorded, text)
            .with_context(|| format!("write {}", args.recorded.display()))?;
        println!("\nrecorded in {}: {figures:?}", args.recorded.display());
        return Ok(());
    }
    let recorded: Figures = serde_json::from_slice(
        &std::fs::read(&args.recorded)
            .with_context(|| format!("read {}", args.recorded.display()))?,
    )
    .with_context(|| format!("{}: not the recorded figures", args.recorded.display()))?;
    let falls = falls_below(&figures, &recorded);
    println!("\nmeasured {figures:?}\nrecorded {recorded:?}");
    anyhow::ensure!(
        falls.is_empty(),
        "far below the recorded figures: {}",
        falls.join("; ")
    );
    println!("smoke: within {TOLERANCE}x of the recorded figures");
    Ok(())
}

/// Each figure that fell more than [`TOLERANCE`] times below the recorded
/// one, said in words.
fn falls_below(measured: &Figures, recorded: &Figures) -> Vec<String> {
    let mut falls = Vec::new();
    if measured.runs_per_second * TOLERANCE < recorded.runs_per_second {
        falls.push(format!(
            "{:.0} runs/s, recorded {:.0}",
            measured.runs_per_second, recorded.runs_per_second
        ));
    }
    if measured.cpu_per_run_us > recorded.cpu_per_run_us * TOLERANCE {
        falls.push(format!(
            "{:.0} µs CPU per run, recorded {:.0}",
            measured.cpu_per_run_us, recorded.cpu_per_run_us
        ));
    }
    let p99s = [
        (
            "1,000",
            measured.target_call_p99_ms,
            recorded.target_call_p99_ms,
        ),
        (
            "5,000",
            measured.target_call_p99_5k_ms,
            recorded.target_call_p99_5k_ms,
        ),
    ];
    for (jobs, measured_ms, recorded_ms) in p99s {
        if lag_fell(measured_ms, recorded_ms) {
            falls.push(format!(
                "target-call p99 at {jobs} jobs {measured_ms:.0} ms, recorded {recorded_ms:.0}"
            ));
        }
    }
    falls
}

/// Whether a target-call p99 fell: [`TOLERANCE`] times the recorded one
/// and, since tens of milliseconds swing with a shared machine's other
/// work, at least [`LAG_SLACK_MS`] worse too.
fn lag_fell(measured_ms: f64, recorded_ms: f64) -> bool {
    measured_ms > recorded_ms * TOLERANCE && measured_ms > recorded_ms + LAG_SLACK_MS
}

/// The p99 of sorted lags in µs, in milliseconds.
fn p99_ms(lags: &[i64]) -> f64 {
    percentile(lags, 99.0) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(runs_per_second: f64, cpu_per_run_us: f64, p99_ms: f64, p99_5k_ms: f64) -> Figures {
        Figures {
            runs_per_second,
            cpu_per_run_us,
            target_call_p99_ms: p99_ms,
            target_call_p99_5k_ms: p99_5k_ms,
        }
    }

    #[test]
    fn noise_passes_and_a_third_fails() {
        let recorded = figures(6000.0, 320.0, 25.0, 45.0);
        assert!(falls_below(&figures(2500.0, 700.0, 120.0, 140.0), &recorded).is_empty());
        let falls = falls_below(&figures(1900.0, 1000.0, 130.0, 150.0), &recorded);
        assert_eq!(falls.len(), 4, "{falls:?}");
        assert!(falls[0].contains("1900 runs/s, recorded 6000"), "{falls:?}");
        assert!(
            falls[3].contains("p99 at 5,000 jobs 150 ms, recorded 45"),
            "{falls:?}"
        );
    }

    #[test]
    fn a_p99_fall_needs_both_the_ratio_and_the_slack() {
        assert!(!lag_fell(140.0, 45.0), "3.1 times, 95 ms worse");
        assert!(!lag_fell(1200.0, 430.0), "100+ ms worse, under 3 times");
        assert!(lag_fell(1300.0, 430.0));
    }
}
