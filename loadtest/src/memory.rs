//! `e2e-bench memory`: what a million jobs cost the whole `jetcron all`.
//!
//! N jobs firing once a day (spread over `--distinct-lines` different times
//! of day, so parsed cron lines are shared only as much as real schedules
//! would share them) plus one canary due every second, all with a NATS
//! target answered here. It prints, in one invocation on one server:
//! - the time to just read the bucket (an ordered KV watch of every current
//!   value, in this process): the floor of any cold start;
//! - `jetcron all` start → the canary's first due event, and → its first call;
//! - the process's resident memory at peak (`VmHWM`, which covers the
//!   missed-fire scans of the rest period) and at rest (`VmRSS` at the end),
//!   each per job;
//! - the canary's target-call lag over the rest period (fires on time while
//!   a million jobs are held).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream;
use futures::StreamExt as _;
use jetcron_core::subjects;
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_loadtest::{percentile, status_bytes};
use jetcron_testkit::JetcronProcess;

use crate::{keep_log, lags_between, ms, serve, Servers, TARGET_SUBJECT};

const CANARY_SUBJECT: &str = "bench.canary";
/// A canary call later than this (µs) after its instant is counted as late.
const LATE_US: i64 = 100_000;

#[derive(clap::Args, Clone)]
pub struct MemoryArgs {
    #[arg(long, default_value_t = 1_000_000)]
    jobs: usize,
    /// Different cron lines among the jobs (at most 86,400: one per second of the day).
    #[arg(long, default_value_t = 86_400)]
    distinct_lines: usize,
    /// Seconds `jetcron all` runs after the canary's first call (two
    /// missed-fire scans happen in the default 75).
    #[arg(long, default_value_t = 75)]
    rest: u64,
    /// The jetcron binary (default: beside this one).
    #[arg(long)]
    jetcron: Option<std::path::PathBuf>,
    /// Write the log of `jetcron all` here (its start-up timeline).
    #[arg(long)]
    keep_log: Option<std::path::PathBuf>,
    /// Then stop `jetcron all` (SIGTERM; it writes the snapshots of the
    /// shards that changed since their last one) and start it again: a
    /// restart reads the shards' snapshots, not the whole bucket.
    #[arg(long)]
    restart: bool,
    /// Seconds `jetcron all` runs after its restart's first due event.
    #[arg(long, default_value_t = 30)]
    restart_rest: u64,
}

/// The daily line of job `i`: one of `distinct` seconds of the day.
pub(crate) fn daily_line(i: usize, distinct: usize) -> String {
    let k = i % distinct.clamp(1, 86_400);
    format!("{} {} {} * * *", k % 60, (k / 60) % 60, (k / 3600) % 24)
}

pub async fn measure(args: &MemoryArgs) -> anyhow::Result<()> {
    let jetcron = crate::jetcron_binary(args.jetcron.as_deref())?;
    let alone = with_the_canary_alone(&jetcron, args.rest.min(CANARY_ALONE_REST)).await?;
    let servers = Servers::start();
    let client = servers.nats.client().await;
    let js = jetstream::new(client.clone());
    let bucket = topology::ensure_jobs_bucket(&js, &TopologyOptions::default()).await?;

    let loading = Instant::now();
    let distinct = args.distinct_lines;
    jetcron_loadtest::put_jobs(
        &js,
        0..args.jobs,
        |i| format!("mem-{i:07}"),
        |i| {
            format!(
                r#"{{"schedule":"{}","target":{{"type":"nats","subject":"{TARGET_SUBJECT}"}}}}"#,
                daily_line(i, distinct)
            )
        },
    )
    .await?;
    put_canary(&js).await?;
    let loaded_in = loading.elapsed();

    let reading = Instant::now();
    let read = read_bucket(&bucket).await?;
    let read_in = reading.elapsed();
    anyhow::ensure!(
        read == args.jobs + 1,
        "read {read} values, stored {}",
        args.jobs + 1
    );

    let _targets = serve(servers.nats.client().await, TARGET_SUBJECT).await?;
    let canary_calls = serve(servers.nats.client().await, CANARY_SUBJECT).await?;
    let mut canary_due = canary_due_events(&client).await?;
    let started = Instant::now();
    let (mut process, pid) = start_all(&jetcron, &servers)?;
    tokio::time::timeout(Duration::from_secs(300), canary_due.next())
        .await
        .context("no due event of the canary within 300 s")?;
    let to_due = started.elapsed();
    let to_call = loop {
        if !canary_calls.lock().expect("arrivals").is_empty() {
            break started.elapsed();
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(300),
            "the canary's target was not called within 300 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let rest_from = chrono::Utc::now();
    let mut samples = Vec::new();
    let resting = Instant::now();
    while resting.elapsed() < Duration::from_secs(args.rest) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        samples.push(memory_of(pid)?);
    }
    let at_rest = memory_of(pid)?;
    let huge_pages = smaps_bytes(pid, "AnonHugePages:")?;
    let rest_to = chrono::Utc::now() - chrono::Duration::seconds(1);
    let lags = lags_between(&canary_calls, rest_from, rest_to);
    // Whole seconds in [rest_from, rest_to): the canary's instants there.
    let first = rest_from.timestamp() + i64::from(rest_from.timestamp_subsec_nanos() > 0);
    let end = rest_to.timestamp() + i64::from(rest_to.timestamp_subsec_nanos() > 0);
    let expected = (end - first).max(0);
    let called: std::collections::BTreeSet<i64> = canary_calls
        .lock()
        .expect("arrivals")
        .iter()
        .filter(|a| a.scheduled >= rest_from && a.scheduled < rest_to)
        .map(|a| a.scheduled.timestamp_millis())
        .collect();
    let restarted = if args.restart {
        Some(restart(&mut process, &js, &canary_calls, args.restart_rest).await?)
    } else {
        None
    };
    keep_log(&process, args.keep_log.as_deref())?;
    drop(process);

    let jobs = args.jobs + 1;
    let per_job = |bytes: u64| bytes as f64 / jobs as f64;
    let mib = |bytes: u64| bytes as f64 / 1_048_576.0;
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| jobs in the bucket | {jobs} ({distinct} distinct daily lines + a canary every second) |"
    );
    println!(
        "| time to store them (pipelined KV puts) | {:.1} s |",
        loaded_in.as_secs_f64()
    );
    println!(
        "| time to read the bucket (KV watch, this process) | {:.2} s |",
        read_in.as_secs_f64()
    );
    println!(
        "| `jetcron all` start → first due event of the canary | {:.2} s |",
        to_due.as_secs_f64()
    );
    println!(
        "| `jetcron all` start → first call of the canary | {:.2} s |",
        to_call.as_secs_f64()
    );
    println!(
        "| resident at peak (VmHWM, {} s incl. missed-fire scans) | {:.0} MiB, {:.0} bytes/job |",
        args.rest,
        mib(at_rest.peak),
        per_job(at_rest.peak)
    );
    println!(
        "| resident at rest (VmRSS at the end) | {:.0} MiB, {:.0} bytes/job |",
        mib(at_rest.resident),
        per_job(at_rest.resident)
    );
    let growth = |bytes: u64, alone: u64| bytes.saturating_sub(alone) as f64 / args.jobs as f64;
    println!(
        "| `jetcron all` with the canary alone (fresh servers, {} s): peak / at rest | {:.0} / {:.0} MiB |",
        args.rest.min(CANARY_ALONE_REST),
        mib(alone.peak),
        mib(alone.resident)
    );
    println!(
        "| growth per job over the canary alone: at peak / at rest | {:.0} / {:.0} bytes/job |",
        growth(at_rest.peak, alone.peak),
        growth(at_rest.resident, alone.resident)
    );
    println!(
        "| of it in 2 MB pages at rest (AnonHugePages) | {:.0} MiB |",
        mib(huge_pages)
    );
    let max_sampled = samples.iter().map(|s| s.resident).max().unwrap_or(0);
    println!(
        "| highest VmRSS sampled each second | {:.0} MiB |",
        mib(max_sampled)
    );
    if let Some(restarted) = &restarted {
        println!(
            "| `jetcron all` stopped (SIGTERM) at the end of the rest → exited | {:.2} s; {} |",
            restarted.stop.as_secs_f64(),
            restarted.written_at_stop
        );
        println!(
            "| `jetcron all` stopped (SIGTERM) and started again → first due event of the canary | {:.2} s |",
            restarted.to_due.as_secs_f64()
        );
        println!(
            "| the restart: jobs loaded from the shards' snapshots (log) | {} |",
            restarted.preloaded
        );
        println!(
            "| after the restart, resident at peak (VmHWM) / highest sampled / at rest ({} s) | {:.0} / {:.0} / {:.0} MiB, {:.0} / {:.0} / {:.0} bytes/job |",
            restarted.rest,
            mib(restarted.memory.peak),
            mib(restarted.highest),
            mib(restarted.memory.resident),
            per_job(restarted.memory.peak),
            per_job(restarted.highest),
            per_job(restarted.memory.resident)
        );
        println!(
            "| canary calls in the {} s after the restart's first due event | {} calls; lag p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms |",
            restarted.rest,
            restarted.lags.len(),
            ms(percentile(&restarted.lags, 50.0)),
            ms(percentile(&restarted.lags, 99.0)),
            ms(restarted.lags.last().copied().unwrap_or_default()),
        );
    }
    let late = lags.iter().filter(|lag| **lag > LATE_US).count();
    println!(
        "| canary calls in the rest period | {} instants called of {expected}, {} calls in all; lag p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {late} calls over {} ms late |",
        called.len(),
        lags.len(),
        ms(percentile(&lags, 50.0)),
        ms(percentile(&lags, 99.0)),
        ms(lags.last().copied().unwrap_or_default()),
        LATE_US / 1_000
    );
    Ok(())
}

/// What a restart of `jetcron all` measured.
struct Restarted {
    /// From SIGTERM to the process's exit.
    stop: Duration,
    /// The stop's log line of the snapshots it wrote.
    written_at_stop: String,
    to_due: Duration,
    /// The log line of the load from snapshots, or why there was none.
    preloaded: String,
    memory: Memory,
    /// The highest `VmRSS` sampled each second.
    highest: u64,
    rest: u64,
    /// Canary target-call lags (µs) after the restart's first due event, sorted.
    lags: Vec<i64>,
}

/// Stop `process` with SIGTERM, start it again, and measure its start to
/// the canary's first due event, its memory and the canary's calls.
async fn restart(
    process: &mut JetcronProcess,
    js: &jetstream::Context,
    canary_calls: &crate::Arrivals,
    rest: u64,
) -> anyhow::Result<Restarted> {
    // Stopped at the end of the rest, whatever snapshots were written by
    // then: a graceful stop writes the changed shards it holds first.
    let client = js.client();
    let logged_at_stop = process.log().len();
    let stopping = Instant::now();
    process.terminate();
    let stop = stopping.elapsed();
    let stop_log = jetcron_testkit::without_colour_codes(&process.log().split_off(logged_at_stop));
    let written_at_stop = logged_line(&stop_log, &["shard snapshots written at the stop"])
        .unwrap_or_else(|| "none logged (no shard had changed)".to_string());
    let mut canary_due = canary_due_events(&client).await?;
    let logged_before = process.log().len();
    let started = Instant::now();
    process.restart();
    let pid = process.pid().context("jetcron all has no pid")?;
    tokio::time::timeout(Duration::from_secs(300), canary_due.next())
        .await
        .context("no due event of the canary within 300 s of the restart")?;
    let to_due = started.elapsed();
    let rest_from = chrono::Utc::now();
    let mut highest = 0;
    for _ in 0..rest {
        tokio::time::sleep(Duration::from_secs(1)).await;
        highest = highest.max(memory_of(pid)?.resident);
    }
    let memory = memory_of(pid)?;
    let rest_to = chrono::Utc::now() - chrono::Duration::seconds(1);
    let lags = lags_between(canary_calls, rest_from, rest_to);
    let log = jetcron_testkit::without_colour_codes(&process.log().split_off(logged_before));
    let preloaded = logged_line(
        &log,
        &["jobs loaded from the shards' snapshots", "snapshot"],
    )
    .unwrap_or_else(|| "none logged".to_string());
    Ok(Restarted {
        stop,
        written_at_stop,
        to_due,
        preloaded,
        memory,
        highest,
        rest,
        lags,
    })
}

/// The first line of `log` that holds the first of `wanted` found, without
/// its time and level.
fn logged_line(log: &str, wanted: &[&str]) -> Option<String> {
    let line = wanted
        .iter()
        .find_map(|w| log.lines().find(|line| line.contains(w)))?;
    Some(
        line.split_once(" INFO ")
            .map_or(line, |(_, l)| l)
            .trim()
            .to_string(),
    )
}

/// Every current value of the bucket, read once through a KV watch (as the
/// ticker reads it); returns how many there are.
async fn read_bucket(bucket: &jetstream::kv::Store) -> anyhow::Result<usize> {
    let mut entries = bucket.watch_with_history(">").await?;
    let mut count = 0;
    while let Some(entry) = entries.next().await {
        let entry = entry.context("read the jobs bucket")?;
        count += 1;
        if entry.seen_current {
            break;
        }
    }
    Ok(count)
}

#[derive(Debug, Clone, Copy)]
struct Memory {
    resident: u64,
    peak: u64,
}

/// Store the canary: a job due every second whose calls are counted.
async fn put_canary(js: &jetstream::Context) -> anyhow::Result<()> {
    jetcron_loadtest::put_jobs(
        js,
        0..1,
        |_| "canary".to_string(),
        |_| {
            format!(
                r#"{{"schedule":"* * * * * *","target":{{"type":"nats","subject":"{CANARY_SUBJECT}"}}}}"#
            )
        },
    )
    .await
}

/// `jetcron all` on `servers`, with its pid.
fn start_all(
    jetcron: &std::path::Path,
    servers: &Servers,
) -> anyhow::Result<(JetcronProcess, u32)> {
    let http_addr = format!("127.0.0.1:{}", jetcron_testkit::free_port());
    let process = JetcronProcess::start(
        jetcron,
        &["all", "--http-addr", &http_addr],
        &[
            ("JETCRON_NATS_URL", servers.nats.url().as_str()),
            ("JETCRON_CLICKHOUSE_URL", servers.clickhouse.url().as_str()),
        ],
    );
    let pid = process.pid().context("jetcron all has no pid")?;
    Ok((process, pid))
}

/// The canary's due events, as they are stored.
async fn canary_due_events(client: &async_nats::Client) -> anyhow::Result<async_nats::Subscriber> {
    Ok(client
        .subscribe(subjects::due_subject(subjects::DEFAULT_POOL, "canary"))
        .await?)
}

/// How long the run with the canary alone rests (at most; `--rest` when shorter).
const CANARY_ALONE_REST: u64 = 10;

/// The memory of `jetcron all` over a bucket with the canary alone, on
/// servers of its own, `rest` seconds after the canary's first due event:
/// what the process holds before any job, so that what a job adds is the
/// difference.
async fn with_the_canary_alone(jetcron: &std::path::Path, rest: u64) -> anyhow::Result<Memory> {
    let servers = Servers::start();
    let client = servers.nats.client().await;
    let js = jetstream::new(client.clone());
    topology::ensure_jobs_bucket(&js, &TopologyOptions::default()).await?;
    put_canary(&js).await?;
    let _calls = serve(servers.nats.client().await, CANARY_SUBJECT).await?;
    let mut canary_due = canary_due_events(&client).await?;
    let (_process, pid) = start_all(jetcron, &servers)?;
    tokio::time::timeout(Duration::from_secs(60), canary_due.next())
        .await
        .context("no due event of the canary alone within 60 s")?;
    tokio::time::sleep(Duration::from_secs(rest)).await;
    memory_of(pid)
}

/// A field of `/proc/PID/smaps_rollup`, in bytes.
fn smaps_bytes(pid: u32, field: &str) -> anyhow::Result<u64> {
    jetcron_loadtest::proc_file_bytes(&format!("/proc/{pid}/smaps_rollup"), field)
}

/// `VmRSS` and `VmHWM` of a process, in bytes.
fn memory_of(pid: u32) -> anyhow::Result<Memory> {
    let pid = pid.to_string();
    Ok(Memory {
        resident: status_bytes(&pid, "VmRSS:")?,
        peak: status_bytes(&pid, "VmHWM:")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daily_lines_spread_over_the_seconds_of_a_day() {
        assert_eq!(daily_line(0, 86_400), "0 0 0 * * *");
        assert_eq!(daily_line(3_661, 86_400), "1 1 1 * * *");
        assert_eq!(daily_line(86_399, 86_400), "59 59 23 * * *");
        assert_eq!(daily_line(86_400, 86_400), "0 0 0 * * *");
        assert_eq!(daily_line(5, 1), "0 0 0 * * *");
    }
}
