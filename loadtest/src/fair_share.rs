//! `e2e-bench fair-share` (issue 41): one namespace's burst beside another's
//! every-second job, with the executor's call slots taken first come first
//! served (`--slot-sharing fifo`) and then shared among namespaces
//! (`--slot-sharing fair`), each on fresh servers and a fresh `jetcron all`.
//!
//! In each mode:
//! - namespace `bulk`: `--bulk-jobs` jobs `bulk.j00000`… on one line,
//!   `*/<burst-every> * * * * *`, so they all fire at one instant; their
//!   target answers each call after `--call-seconds`, from a task of its
//!   own, so the slots stay held while the responder keeps up;
//! - namespace `light`: `light.tick`, `* * * * * *`, answered at once.
//!
//! The first burst after `jetcron all` calls `light.tick` is the warm-up;
//! the `--bursts` bursts after it are measured, and so is every second from
//! the first of them to the one before the next burst. A fire is on time
//! when its target is called on time, so both are measured at the targets:
//! light's lag is arrival − `Jetcron-Scheduled-At`, each burst's calls are
//! counted by job (every bulk job called once per burst, by one run id),
//! and its drain is its instant to its last call's arrival.
//!
//! The promise measured: "with one namespace firing 5,000 jobs at one
//! instant, another namespace's every-second job starts within 100 ms p99
//! of its time, in the same run". It exits non-zero when a measured burst
//! misses a bulk fire or calls one twice.
//!
//! `./target/release/e2e-bench fair-share --bulk-jobs 5000 --bursts 3`

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream;
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_loadtest::percentile;
use jetcron_testkit::JetcronProcess;

use crate::{jetcron_binary, keep_log, lags_between, ms, serve, sleep_until, Arrivals, Servers};

const BULK_SUBJECT: &str = "bench.bulk";
const LIGHT_SUBJECT: &str = "bench.light";
const LIGHT_JOB: &str = "light.tick";

/// The promise: light's call lag p99 at most this, in µs.
const PROMISED_P99_US: i64 = 100_000;

/// The slot sharings compared, in the order they run.
const SHARINGS: [&str; 2] = ["fifo", "fair"];

#[derive(clap::Args, Clone)]
pub struct FairShareArgs {
    /// Jobs of namespace `bulk`, all firing at the same instants.
    #[arg(long, default_value_t = 5_000)]
    bulk_jobs: usize,
    /// Bursts measured, after the warm-up burst.
    #[arg(long, default_value_t = 3)]
    bursts: u32,
    /// Seconds between two bursts (`*/N` in the seconds field: divides 60).
    #[arg(long, default_value_t = 20)]
    burst_every: u32,
    /// Seconds the bulk target takes to answer each call.
    #[arg(long, default_value_t = 2.0)]
    call_seconds: f64,
    /// The jetcron binary (default: beside this one).
    #[arg(long)]
    jetcron: Option<PathBuf>,
    /// Extra arguments of `jetcron all`, in both modes (e.g.
    /// `--max-in-flight 1024`); `--slot-sharing` is set by the scenario.
    #[arg(long, allow_hyphen_values = true, num_args = 1..)]
    jetcron_args: Vec<String>,
    /// Write each mode's log of `jetcron all` here (`fifo.log`, `fair.log`).
    #[arg(long)]
    keep_logs: Option<PathBuf>,
}

/// One call the bulk target received.
#[derive(Debug, Clone)]
struct BulkCall {
    job: String,
    run: String,
    attempt: u32,
    scheduled: DateTime<Utc>,
    at: DateTime<Utc>,
}

/// What the bulk target saw, and how well it kept up.
#[derive(Default)]
struct BulkTarget {
    calls: Mutex<Vec<BulkCall>>,
    /// Replies pending now and at most at once.
    pending: AtomicUsize,
    most_pending: AtomicUsize,
    /// The latest a reply left after its due time (µs).
    latest_reply_us: AtomicI64,
}

/// One measured burst, counted by job.
#[derive(Debug)]
struct Burst {
    instant: DateTime<Utc>,
    calls: usize,
    /// Bulk jobs not called for this instant.
    missing: Vec<String>,
    /// Jobs called more than once for this instant, said in words.
    doubled: Vec<String>,
    /// The instant to its last call's arrival.
    drain_us: Option<i64>,
}

/// What one mode measured.
struct Outcome {
    sharing: &'static str,
    bursts: Vec<Burst>,
    /// Light's lags over the measured seconds, µs, sorted.
    light_lags: Vec<i64>,
    light_seconds: u64,
    /// Measured seconds whose light fire was called more than once.
    light_doubled: usize,
    most_pending: usize,
    latest_reply_us: i64,
}

impl Outcome {
    fn missing(&self) -> usize {
        self.bursts.iter().map(|b| b.missing.len()).sum()
    }

    fn doubled(&self) -> usize {
        self.bursts.iter().map(|b| b.doubled.len()).sum()
    }

    fn light_p99(&self) -> i64 {
        percentile(&self.light_lags, 99.0)
    }
}

/// Both modes, one after the other, then the table.
pub async fn measure(args: &FairShareArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.burst_every > 0 && 60 % args.burst_every == 0,
        "--burst-every {}: must divide 60 (a `*/N` seconds field)",
        args.burst_every
    );
    anyhow::ensure!(args.bursts > 0, "--bursts: at least one");
    anyhow::ensure!(
        args.call_seconds >= 0.0 && args.call_seconds < 60.0,
        "--call-seconds {}: from 0 to below the jobs' 60 s timeout",
        args.call_seconds
    );
    let jetcron = jetcron_binary(args.jetcron.as_deref())?;
    let mut outcomes = Vec::new();
    for sharing in SHARINGS {
        eprintln!("fair-share: --slot-sharing {sharing}");
        outcomes.push(run_mode(&jetcron, args, sharing).await?);
    }
    print_table(args, &outcomes);
    let wrong: Vec<String> = outcomes
        .iter()
        .filter(|o| o.missing() + o.doubled() > 0)
        .map(|o| {
            format!(
                "{}: {} bulk fires missing, {} called twice",
                o.sharing,
                o.missing(),
                o.doubled()
            )
        })
        .collect();
    anyhow::ensure!(wrong.is_empty(), "{}", wrong.join("; "));
    Ok(())
}

/// One mode on fresh servers: load, start, warm up, measure.
async fn run_mode(
    jetcron: &std::path::Path,
    args: &FairShareArgs,
    sharing: &'static str,
) -> anyhow::Result<Outcome> {
    let servers = Servers::start();
    let Servers {
        nats, clickhouse, ..
    } = &servers;
    let js = jetstream::new(nats.client().await);
    topology::ensure_jobs_bucket(&js, &TopologyOptions::default()).await?;
    load_jobs(&js, args.bulk_jobs, args.burst_every).await?;
    let call_time = Duration::from_secs_f64(args.call_seconds);
    let bulk = Arc::new(BulkTarget::default());
    let bulk_responder = answer_after(nats.client().await, call_time, bulk.clone()).await?;
    let light = serve(nats.client().await, LIGHT_SUBJECT).await?;

    let http_addr = format!("127.0.0.1:{}", jetcron_testkit::free_port());
    let mut command: Vec<&str> = vec!["all", "--http-addr", &http_addr];
    command.extend(args.jetcron_args.iter().map(String::as_str));
    command.extend(["--slot-sharing", sharing]);
    let (nats_url, clickhouse_url) = (nats.url(), clickhouse.url());
    let env = [
        ("JETCRON_NATS_URL", nats_url.as_str()),
        ("JETCRON_CLICKHOUSE_URL", clickhouse_url.as_str()),
    ];
    let process = JetcronProcess::start(jetcron, &command, &env);

    // Running once light's job is called; the next burst is the warm-up.
    let started = tokio::time::Instant::now();
    while light.lock().expect("arrivals").is_empty() {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "{sharing}: no call of {LIGHT_JOB} within 60 s of the start of jetcron all"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let every = chrono::Duration::seconds(i64::from(args.burst_every));
    let warmup = next_burst(Utc::now() + chrono::Duration::seconds(2), args.burst_every);
    let from = warmup + every;
    let to = from + every * i32::try_from(args.bursts).context("--bursts")?;
    let instants: Vec<DateTime<Utc>> = (0..args.bursts).map(|k| from + every * k as i32).collect();
    eprintln!(
        "fair-share: {sharing}: warm-up burst at {}, measuring {} to {}",
        warmup.format("%H:%M:%S"),
        from.format("%H:%M:%S"),
        to.format("%H:%M:%S")
    );
    sleep_until(to).await;

    // Late calls of the window still count: wait until every measured fire
    // was called (or a minute), then a little more for doubles.
    let light_seconds = (to - from).num_seconds() as u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        let bursts_done = instants.iter().all(|instant| {
            let calls = bulk.calls.lock().expect("bulk calls");
            calls.iter().filter(|c| c.scheduled == *instant).count() >= args.bulk_jobs
        });
        let light_done = lags_between(&light, from, to).len() as u64 >= light_seconds;
        if bursts_done && light_done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(call_time + Duration::from_secs(1)).await;

    let calls = bulk.calls.lock().expect("bulk calls").clone();
    let bursts = instants
        .iter()
        .map(|instant| count_burst(&calls, *instant, args.bulk_jobs))
        .collect();
    let light_lags = lags_between(&light, from, to);
    let light_doubled = doubled_seconds(&light, from, to);
    if let Some(dir) = &args.keep_logs {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        keep_log(&process, Some(&dir.join(format!("{sharing}.log"))))?;
    }
    drop(process);
    bulk_responder.abort();
    drop(servers);
    Ok(Outcome {
        sharing,
        bursts,
        light_lags,
        light_seconds,
        light_doubled,
        most_pending: bulk.most_pending.load(Ordering::Relaxed),
        latest_reply_us: bulk.latest_reply_us.load(Ordering::Relaxed),
    })
}

/// The bulk jobs (one line, the burst) and light's every-second job.
async fn load_jobs(
    js: &jetstream::Context,
    bulk_jobs: usize,
    burst_every: u32,
) -> anyhow::Result<()> {
    let bulk = format!(
        r#"{{"schedule":"*/{burst_every} * * * * *","target":{{"type":"nats","subject":"{BULK_SUBJECT}"}}}}"#
    );
    jetcron_loadtest::put_jobs(js, 0..bulk_jobs, bulk_job, |_| bulk.clone()).await?;
    let light = format!(
        r#"{{"schedule":"* * * * * *","target":{{"type":"nats","subject":"{LIGHT_SUBJECT}"}}}}"#
    );
    jetcron_loadtest::put_jobs(js, 0..1, |_| LIGHT_JOB.to_string(), |_| light.clone()).await
}

fn bulk_job(i: usize) -> String {
    format!("bulk.j{i:05}")
}

/// The first burst instant (a multiple of `burst_every` seconds) at or after
/// `after`.
fn next_burst(after: DateTime<Utc>, burst_every: u32) -> DateTime<Utc> {
    let every = i64::from(burst_every);
    let seconds = after.timestamp() + i64::from(after.timestamp_subsec_nanos() > 0);
    let first = (seconds + every - 1).div_euclid(every) * every;
    DateTime::from_timestamp(first, 0).expect("burst instant")
}

/// Answer every request on the bulk subject `after` its arrival, each from
/// a task of its own, recording who called.
async fn answer_after(
    client: async_nats::Client,
    after: Duration,
    target: Arc<BulkTarget>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let mut requests = client.subscribe(BULK_SUBJECT).await?;
    Ok(tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let at = Utc::now();
            let header = |name: &str| jetcron_loadtest::call_header(&request, name);
            if let Some(scheduled) = jetcron_loadtest::call_scheduled_at(&request) {
                target.calls.lock().expect("bulk calls").push(BulkCall {
                    job: header("Jetcron-Job-Id").unwrap_or_default(),
                    run: header("Jetcron-Run-Id").unwrap_or_default(),
                    attempt: header("Jetcron-Attempt")
                        .and_then(|a| a.parse().ok())
                        .unwrap_or(0),
                    scheduled,
                    at,
                });
            }
            let Some(reply) = request.reply else { continue };
            let pending = target.pending.fetch_add(1, Ordering::Relaxed) + 1;
            target.most_pending.fetch_max(pending, Ordering::Relaxed);
            let (client, target) = (client.clone(), target.clone());
            tokio::spawn(async move {
                let due = tokio::time::Instant::now() + after;
                tokio::time::sleep_until(due).await;
                let late = tokio::time::Instant::now().duration_since(due);
                target
                    .latest_reply_us
                    .fetch_max(late.as_micros() as i64, Ordering::Relaxed);
                let _ = client.publish(reply, "ok".into()).await;
                target.pending.fetch_sub(1, Ordering::Relaxed);
            });
        }
    }))
}

/// The calls of the burst at `instant`, counted by job: each of the
/// `bulk_jobs` jobs called once, by one run id.
fn count_burst(calls: &[BulkCall], instant: DateTime<Utc>, bulk_jobs: usize) -> Burst {
    let mut by_job: BTreeMap<&str, Vec<&BulkCall>> = BTreeMap::new();
    for call in calls.iter().filter(|c| c.scheduled == instant) {
        by_job.entry(call.job.as_str()).or_default().push(call);
    }
    let missing = (0..bulk_jobs)
        .map(bulk_job)
        .filter(|job| !by_job.contains_key(job.as_str()))
        .collect();
    let doubled = by_job
        .iter()
        .filter(|(_, calls)| calls.len() > 1)
        .map(|(job, calls)| {
            let runs: BTreeSet<&str> = calls.iter().map(|c| c.run.as_str()).collect();
            let attempts: Vec<u32> = calls.iter().map(|c| c.attempt).collect();
            format!(
                "{job} at {}: {} calls, {} run id(s), attempts {attempts:?}",
                instant.format("%H:%M:%S"),
                calls.len(),
                runs.len()
            )
        })
        .collect();
    let drain_us = by_job
        .values()
        .flatten()
        .map(|c| (c.at - instant).num_microseconds().unwrap_or(i64::MAX))
        .max();
    Burst {
        instant,
        calls: by_job.values().map(Vec::len).sum(),
        missing,
        doubled,
        drain_us,
    }
}

/// Seconds of `[from, to)` whose fire the target received more than once.
fn doubled_seconds(arrivals: &Arrivals, from: DateTime<Utc>, to: DateTime<Utc>) -> usize {
    let mut per_second: BTreeMap<DateTime<Utc>, usize> = BTreeMap::new();
    for a in arrivals.lock().expect("arrivals").iter() {
        if a.scheduled >= from && a.scheduled < to {
            *per_second.entry(a.scheduled).or_default() += 1;
        }
    }
    per_second.values().filter(|n| **n > 1).count()
}

/// The two modes side by side, then what went wrong, if anything.
fn print_table(args: &FairShareArgs, outcomes: &[Outcome]) {
    let extra = if args.jetcron_args.is_empty() {
        String::new()
    } else {
        format!(", `{}`", args.jetcron_args.join(" "))
    };
    println!(
        "\n### {} bulk jobs `*/{} * * * * *` ({} s calls) beside `{LIGHT_JOB}` every second, bursts measured: {}{extra}\n",
        args.bulk_jobs, args.burst_every, args.call_seconds, args.bursts
    );
    let header: Vec<&str> = outcomes.iter().map(|o| o.sharing).collect();
    println!("| | {} |", header.join(" | "));
    println!("|---|{}", "---|".repeat(outcomes.len()));
    let row = |label: &str, cell: &dyn Fn(&Outcome) -> String| {
        let cells: Vec<String> = outcomes.iter().map(cell).collect();
        println!("| {label} | {} |", cells.join(" | "));
    };
    let per_burst = |o: &Outcome, value: &dyn Fn(&Burst) -> String| {
        o.bursts.iter().map(value).collect::<Vec<_>>().join(" / ")
    };
    row(
        &format!(
            "light: calls of the measured seconds (of {})",
            outcomes[0].light_seconds
        ),
        &|o| format!("{} ({} called twice)", o.light_lags.len(), o.light_doubled),
    );
    row("light: call lag p50 / p99 / max", &|o| {
        format!(
            "{:.1} / {:.1} / {:.1} ms",
            ms(percentile(&o.light_lags, 50.0)),
            ms(o.light_p99()),
            ms(o.light_lags.last().copied().unwrap_or(0))
        )
    });
    row("light: calls later than 100 ms", &|o| {
        let late = o
            .light_lags
            .iter()
            .filter(|l| **l > PROMISED_P99_US)
            .count();
        format!("{late}")
    });
    row("promise: light p99 ≤ 100 ms", &|o| {
        let kept = o.light_p99() <= PROMISED_P99_US && !o.light_lags.is_empty();
        (if kept { "kept" } else { "broken" }).to_string()
    });
    row(
        &format!("bulk: calls per burst (of {})", args.bulk_jobs),
        &|o| per_burst(o, &|b| b.calls.to_string()),
    );
    row("bulk: fires missing / called twice", &|o| {
        format!("{} / {}", o.missing(), o.doubled())
    });
    row("bulk: drain per burst (instant → last call)", &|o| {
        let drains = per_burst(o, &|b| {
            b.drain_us
                .map_or("-".to_string(), |us| format!("{:.2}", us as f64 / 1e6))
        });
        format!("{drains} s")
    });
    row(
        "bulk target: replies pending at most / latest reply",
        &|o| format!("{} / {:.1} ms late", o.most_pending, ms(o.latest_reply_us)),
    );
    let [fifo, fair] = outcomes else { return };
    println!(
        "\nlight p99 fifo ÷ fair: {:.1}",
        fifo.light_p99() as f64 / fair.light_p99().max(1) as f64
    );
    for outcome in outcomes {
        for burst in &outcome.bursts {
            let at = burst.instant.format("%H:%M:%S");
            if !burst.missing.is_empty() {
                let shown: Vec<&str> = burst.missing.iter().take(10).map(String::as_str).collect();
                println!(
                    "{}: burst {at}: {} missing: {}{}",
                    outcome.sharing,
                    burst.missing.len(),
                    shown.join(", "),
                    if burst.missing.len() > 10 {
                        ", …"
                    } else {
                        ""
                    }
                );
            }
            for line in burst.doubled.iter().take(10) {
                println!("{}: {line}", outcome.sharing);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(
        job: usize,
        run: &str,
        attempt: u32,
        instant: DateTime<Utc>,
        after_ms: i64,
    ) -> BulkCall {
        BulkCall {
            job: bulk_job(job),
            run: run.to_string(),
            attempt,
            scheduled: instant,
            at: instant + chrono::Duration::milliseconds(after_ms),
        }
    }

    #[test]
    fn a_burst_counts_missing_and_doubled_fires_by_job() {
        let instant = DateTime::from_timestamp(1_800_000_000, 0).expect("instant");
        let other = instant + chrono::Duration::seconds(20);
        let calls = vec![
            call(0, "r0", 1, instant, 10),
            call(1, "r1", 1, instant, 2_500),
            call(1, "r1", 2, instant, 4_000),
            call(3, "r3", 1, instant, 30),
            call(2, "r2", 1, other, 5),
        ];
        let burst = count_burst(&calls, instant, 4);
        assert_eq!(burst.calls, 4);
        assert_eq!(burst.missing, vec!["bulk.j00002".to_string()]);
        assert_eq!(burst.doubled.len(), 1);
        assert!(
            burst.doubled[0].starts_with("bulk.j00001"),
            "{:?}",
            burst.doubled
        );
        assert_eq!(burst.drain_us, Some(4_000_000));
    }

    #[test]
    fn bursts_fall_on_multiples_of_the_period() {
        let at = |s| DateTime::from_timestamp(s, 0).expect("instant");
        assert_eq!(next_burst(at(1_800_000_000), 20), at(1_800_000_000));
        assert_eq!(next_burst(at(1_800_000_001), 20), at(1_800_000_020));
        let just_after = at(1_800_000_000) + chrono::Duration::milliseconds(1);
        assert_eq!(next_burst(just_after, 20), at(1_800_000_020));
    }
}
