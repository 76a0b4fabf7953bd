//! Ticker benchmarks against a real nats-server (started here on a free port).
//!
//! Scenarios (each prints a markdown table; `docs/benchmarks.md` keeps the
//! command and the output):
//! - `throughput`: raw JetStream publishes/s (same stream settings, same
//!   payload size, same `Nats-Msg-Id` header, same pipelined batches; once
//!   with short names, once named like the ticker's messages) against
//!   fires/s sustained by one ticker with N jobs all due every second, in
//!   one run, with the cores and CPU per message of this process and of
//!   nats-server in each window.
//! - `capacity`: the offered load (jobs all due every second) raised step
//!   by step until the ticker no longer stores every fire of a second
//!   within that second; the highest load it kept up with beside raw
//!   deduplicated publishes/s on the same server in the same run.
//! - `cold-start`: N jobs in the bucket (one canary due every second), time
//!   from ticker start to the canary's first due event, and resident memory
//!   per job.
//! - `lag`: N jobs due every second for a while, with R ticker replicas: fire
//!   lag (server store time minus scheduled time) p50/p99/max, and publish
//!   amplification (messages sent on `jetcron.due.>` per stored due event).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream::{self, stream};
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};
use futures::StreamExt as _;
use jetcron_core::clock::SystemClock;
use jetcron_core::events::DueEvent;
use jetcron_core::subjects;
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_loadtest::{percentile, CpuMark};
use jetcron_testkit::NatsServer;
use tokio_util::sync::CancellationToken;

/// The allocator of the `jetcron` binary: the ticker runs in this process,
/// and with glibc's malloc a sixth of its CPU went to the allocator
/// (`_int_malloc`, `unlink_chunk`, `malloc_consolidate`; perf at 75,000
/// fires/s), which the deployed ticker does not pay.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "jetcron ticker benchmarks on a real nats-server")]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Raw JetStream publishes/s vs ticker fires/s, same server, same run.
    Throughput {
        #[arg(long, default_value_t = 100_000)]
        jobs: usize,
        #[arg(long, default_value_t = 15)]
        seconds: u64,
    },
    /// The highest fires/s the ticker sustains, beside raw publishes/s.
    Capacity {
        /// The first offered load, in jobs due every second.
        #[arg(long, default_value_t = 20_000)]
        from: usize,
        /// Added to the load at each step.
        #[arg(long, default_value_t = 10_000)]
        step: usize,
        /// Seconds measured at each step (after two to settle).
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// The ticker's `--lookahead` (`jetcron ticker` on one node: 1.5s).
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        lookahead: Duration,
    },
    /// Ticker start to scheduling with many jobs, and memory per job.
    ColdStart {
        #[arg(long, default_value_t = 1_000_000)]
        jobs: usize,
    },
    /// Fire lag and publish amplification with R replicas.
    Lag {
        #[arg(long, default_value_t = 10_000)]
        jobs: usize,
        #[arg(long, default_value_t = 1)]
        replicas: usize,
        #[arg(long, default_value_t = 20)]
        seconds: u64,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The ticker's own log lines, when asked for (RUST_LOG=info).
    if std::env::var_os("RUST_LOG").is_some() {
        jetcron_io::telemetry::init(jetcron_io::telemetry::LogFormat::Text);
    }
    let nats = NatsServer::start();
    let client = nats.client().await;
    let js = jetstream::new(client.clone());
    let options = TopologyOptions::default();
    topology::ensure_jobs_bucket(&js, &options).await?;
    topology::ensure_due_stream(&js, &options).await?;
    topology::ensure_runs_stream(&js, &options).await?;
    match cli.scenario {
        Scenario::Throughput { jobs, seconds } => throughput(&nats, &js, jobs, seconds).await,
        Scenario::Capacity {
            from,
            step,
            seconds,
            lookahead,
        } => capacity(&nats, &js, from, step, seconds, lookahead).await,
        Scenario::ColdStart { jobs } => cold_start(&nats, &js, jobs).await,
        Scenario::Lag {
            jobs,
            replicas,
            seconds,
        } => lag(&nats, &js, jobs, replicas, seconds).await,
    }
}

/// Store `count` job definitions in the bucket with pipelined publishes.
async fn load_jobs(
    js: &jetstream::Context,
    count: usize,
    schedule: &str,
    id: impl Fn(usize) -> String,
) -> anyhow::Result<()> {
    load_job_range(js, 0..count, schedule, id).await
}

/// Store the job definitions numbered `range`.
async fn load_job_range(
    js: &jetstream::Context,
    range: std::ops::Range<usize>,
    schedule: &str,
    id: impl Fn(usize) -> String,
) -> anyhow::Result<()> {
    let value =
        format!(r#"{{"schedule":"{schedule}","target":{{"type":"nats","subject":"bench.svc"}}}}"#);
    jetcron_loadtest::put_jobs(js, range, id, |_| value.clone()).await
}

/// A due event as the ticker would publish it, for a realistic payload size.
fn sample_due_payload() -> Vec<u8> {
    let job = jetcron_core::job::parse_job(
        br#"{"id":"bench-000001","schedule":"* * * * * *","target":{"type":"nats","subject":"bench.svc"}}"#,
        None,
    )
    .expect("sample job");
    let now = Utc::now();
    let event = DueEvent {
        run_id: jetcron_core::RunId::for_fire("bench-000001", now),
        job_id: "bench-000001".into(),
        scheduled_at: now,
        trigger: jetcron_core::Trigger::Schedule,
        pool: subjects::DEFAULT_POOL.into(),
        job_revision: 1,
        job: job.spec,
        shard: None,
        parent: None,
    };
    serde_json::to_vec(&event).expect("encode")
}

/// Stop the ticker and drop the due stream it filled, for the raw
/// publishes after it.
async fn stop_ticker(
    ticker: tokio::task::JoinHandle<anyhow::Result<()>>,
    stop: &CancellationToken,
    js: &jetstream::Context,
) -> anyhow::Result<()> {
    stop.cancel();
    ticker.await??;
    js.delete_stream(subjects::DUE_STREAM).await?;
    Ok(())
}

/// The due stream's state: `messages` held, `last_sequence` ever stored.
async fn due_state(js: &jetstream::Context) -> anyhow::Result<stream::State> {
    let mut stream = js.get_stream(subjects::DUE_STREAM).await?;
    Ok(stream.info().await?.state.clone())
}

fn start_ticker(
    client: async_nats::Client,
    stop: &CancellationToken,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    start_ticker_with(client, stop, Duration::ZERO)
}

fn start_ticker_with(
    client: async_nats::Client,
    stop: &CancellationToken,
    lookahead: Duration,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    tokio::spawn(jetcron_ticker::run(
        jetcron_ticker::TickerConfig {
            lookahead,
            ..Default::default()
        },
        client,
        Arc::new(SystemClock),
        stop.clone(),
    ))
}

/// What the raw publisher's messages are named.
#[derive(Clone, Copy)]
enum RawShape {
    /// `bench.raw.job<n % 100,000>`, `Nats-Msg-Id: raw-<n>`: the
    /// baseline since the ticker's first benchmark.
    Short,
    /// Named like the ticker's: a subject per job of `jobs`, as long as a
    /// due event's (`bench.raw.due.default.bench-000001`), and a UUID's 36
    /// characters as `Nats-Msg-Id`, unique per message as a run id is.
    Fires { jobs: usize },
}

impl RawShape {
    fn subject(self, sent: u64) -> String {
        match self {
            Self::Short => format!("bench.raw.job{}", sent % 100_000),
            Self::Fires { jobs } => {
                format!(
                    "bench.raw.due.default.bench-{:06}",
                    sent % jobs.max(1) as u64
                )
            }
        }
    }

    fn msg_id(self, sent: u64) -> String {
        match self {
            Self::Short => format!("raw-{sent}"),
            Self::Fires { .. } => format!("6a1c3f0e-9b7d-4e52-8c1a-{sent:012x}"),
        }
    }
}

/// Publish due-event-sized messages to a scratch stream with the due stream's
/// settings for `seconds`, in the ticker's pipelined batches: msgs/s, and
/// the CPU this process and the server used for them.
async fn raw_publish_rate(
    nats: &NatsServer,
    js: &jetstream::Context,
    seconds: u64,
    shape: RawShape,
) -> anyhow::Result<Window> {
    js.create_stream(stream::Config {
        name: "BENCH_RAW".into(),
        subjects: vec!["bench.raw.>".into()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: Duration::from_secs(600),
        ..Default::default()
    })
    .await?;
    let payload = bytes::Bytes::from(sample_due_payload());
    // The ticker's publishing pattern: batches of MAX_BATCH / PIPELINE, the
    // next one sent while the previous one's acks are awaited.
    let batch = jetcron_ticker::MAX_BATCH / jetcron_ticker::PIPELINE;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let cpu = CpuMark::now(nats.pid());
    let mut sent: u64 = 0;
    let mut in_flight = std::collections::VecDeque::new();
    while Instant::now() < deadline || !in_flight.is_empty() {
        if in_flight.len() < jetcron_ticker::PIPELINE && Instant::now() < deadline {
            let mut acks = Vec::with_capacity(batch);
            for _ in 0..batch {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Msg-Id", shape.msg_id(sent).as_str());
                acks.push(
                    js.publish_with_headers(shape.subject(sent), headers, payload.clone())
                        .await?,
                );
                sent += 1;
            }
            in_flight.push_back(acks);
            continue;
        }
        if let Some(acks) = in_flight.pop_front() {
            for ack in acks {
                ack.await?;
            }
        }
    }
    let window = window_since(&cpu, nats, sent);
    js.delete_stream("BENCH_RAW").await?;
    Ok(window)
}

/// The window from `mark` to now, in which `messages` were stored: this
/// process is the raw publisher or the ticker, the server nats-server.
fn window_since(mark: &CpuMark, nats: &NatsServer, messages: u64) -> Window {
    let used = mark.since(nats.pid());
    Window {
        per_second: messages as f64 / used.seconds,
        own_cores: used.own / used.seconds,
        server_cores: used.server / used.seconds,
    }
}

/// Messages stored per second over a window, and the cores each process
/// used meanwhile: whether the two cores were full, and what a message cost
/// each side.
struct Window {
    per_second: f64,
    own_cores: f64,
    server_cores: f64,
}

impl Window {
    /// The mean of two windows' rates (a baseline before and after).
    fn mean_rate(&self, other: &Window) -> f64 {
        (self.per_second + other.per_second) / 2.0
    }

    /// A markdown row: rate, then cores and µs of CPU per message of this
    /// process and of the server, then both processes' cores.
    fn row(&self, name: &str) -> String {
        let per_message = |cores: f64| cores * 1e6 / self.per_second.max(1.0);
        format!(
            "| {name} | {:.0} | {:.2}, {:.1} µs | {:.2}, {:.1} µs | {:.2} |",
            self.per_second,
            self.own_cores,
            per_message(self.own_cores),
            self.server_cores,
            per_message(self.server_cores),
            self.own_cores + self.server_cores,
        )
    }
}

/// The CPU table of a run's windows.
fn print_cpu(windows: &[(&str, &Window)]) {
    println!();
    println!("| window | messages stored/s | this process: cores, CPU per message | nats-server: cores, CPU per message | cores used by both |");
    println!("|---|---|---|---|---|");
    for (name, window) in windows {
        println!("{}", window.row(name));
    }
}

async fn throughput(
    nats: &NatsServer,
    js: &jetstream::Context,
    jobs: usize,
    seconds: u64,
) -> anyhow::Result<()> {
    // Raw JetStream before and after the ticker window, to see the drift;
    // named both ways.
    let named_like_fires = RawShape::Fires { jobs };
    let raw_before = raw_publish_rate(nats, js, seconds, RawShape::Short).await?;
    let fires_before = raw_publish_rate(nats, js, seconds, named_like_fires).await?;

    load_jobs(js, jobs, "* * * * * *", |i| format!("bench-{i:06}")).await?;
    let stop = CancellationToken::new();
    let ticker = start_ticker(nats.client().await, &stop);
    // Warm up until fires flow, then measure a steady window.
    while due_state(js).await?.messages < jobs as u64 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let before = due_state(js).await?.messages;
    let cpu = CpuMark::now(nats.pid());
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let after = due_state(js).await?.messages;
    let fires = window_since(&cpu, nats, after - before);
    stop_ticker(ticker, &stop, js).await?;
    let raw_after = raw_publish_rate(nats, js, seconds, RawShape::Short).await?;
    let fires_after = raw_publish_rate(nats, js, seconds, named_like_fires).await?;
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| payload bytes per due event | {} |",
        sample_due_payload().len()
    );
    println!(
        "| raw JetStream publishes/s before / after ({} batches of {} in flight, Nats-Msg-Id) | {:.0} / {:.0} |",
        jetcron_ticker::PIPELINE,
        jetcron_ticker::MAX_BATCH / jetcron_ticker::PIPELINE,
        raw_before.per_second,
        raw_after.per_second,
    );
    println!(
        "| … named like the ticker's (a subject per job, a UUID as Nats-Msg-Id) before / after | {:.0} / {:.0} |",
        fires_before.per_second, fires_after.per_second,
    );
    println!("| jobs due every second | {jobs} |");
    println!(
        "| ticker fires/s (stored due events, {seconds} s window) | {:.0} |",
        fires.per_second
    );
    println!(
        "| ratio fires/s ÷ mean raw publishes/s | {:.2} |",
        fires.per_second / raw_before.mean_rate(&raw_after)
    );
    println!(
        "| ratio fires/s ÷ mean raw publishes/s named like the ticker's | {:.2} |",
        fires.per_second / fires_before.mean_rate(&fires_after)
    );
    print_cpu(&[
        ("raw publishes, before", &raw_before),
        ("raw publishes named like fires, before", &fires_before),
        ("ticker", &fires),
        ("raw publishes, after", &raw_after),
        ("raw publishes named like fires, after", &fires_after),
    ]);
    Ok(())
}

/// One step of the capacity sweep: the load offered and what was stored.
struct CapacityStep {
    offered: usize,
    stored_per_second: f64,
}

impl CapacityStep {
    /// Kept up: the window stored (nearly) every fire offered. A ticker
    /// that falls behind stores at its own pace, below the offered load,
    /// while its backlog of late fires grows.
    fn kept_up(&self) -> bool {
        self.stored_per_second >= self.offered as f64 * 0.98
    }
}

async fn capacity(
    nats: &NatsServer,
    js: &jetstream::Context,
    from: usize,
    step: usize,
    seconds: u64,
    lookahead: Duration,
) -> anyhow::Result<()> {
    let raw_before = raw_publish_rate(nats, js, seconds, RawShape::Short).await?;
    // The first load before the ticker starts, like a restart with a full
    // bucket; the steps' additions arrive through its watch.
    load_job_range(js, 0..from, "* * * * * *", |i| format!("cap-{i:07}")).await?;
    let stop = CancellationToken::new();
    let ticker = start_ticker_with(nats.client().await, &stop, lookahead);
    let mut steps: Vec<CapacityStep> = Vec::new();
    let mut loaded = from;
    let mut offered = from;
    loop {
        load_job_range(js, loaded..offered, "* * * * * *", |i| {
            format!("cap-{i:07}")
        })
        .await?;
        loaded = offered;
        let measured = capacity_step(js, offered, seconds).await?;
        let kept_up = measured.kept_up();
        eprintln!(
            "offered {offered}/s: stored {:.0}/s",
            measured.stored_per_second
        );
        steps.push(measured);
        if !kept_up {
            break;
        }
        offered += step;
    }
    stop_ticker(ticker, &stop, js).await?;
    let raw_after = raw_publish_rate(nats, js, seconds, RawShape::Short).await?;
    let raw = raw_before.mean_rate(&raw_after);

    println!("| offered (jobs due every second) | stored due events/s | kept up (≥ 98 %) |");
    println!("|---|---|---|");
    for s in &steps {
        println!(
            "| {} | {:.0} | {} |",
            s.offered,
            s.stored_per_second,
            if s.kept_up() { "yes" } else { "no" }
        );
    }
    // The load kept up with, not what was stored in its window: a window
    // may also hold fires caught up from before it.
    let best = steps
        .iter()
        .filter(|s| s.kept_up())
        .map(|s| s.offered as f64)
        .fold(0.0, f64::max);
    println!();
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| raw JetStream publishes/s before / after (Nats-Msg-Id, the ticker's batches) | {:.0} / {:.0} |",
        raw_before.per_second, raw_after.per_second,
    );
    println!(
        "| highest load the ticker kept up with (lookahead {} ms) | {best:.0} fires/s |",
        lookahead.as_millis()
    );
    println!("| ratio to mean raw publishes/s | {:.2} |", best / raw);
    print_cpu(&[
        ("raw publishes, before", &raw_before),
        ("raw publishes, after", &raw_after),
    ]);
    Ok(())
}

/// Settle three seconds at this load, then the stored rate over a window
/// of whole seconds.
async fn capacity_step(
    js: &jetstream::Context,
    offered: usize,
    seconds: u64,
) -> anyhow::Result<CapacityStep> {
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Fires come in one burst per second, at the second: a window from
    // 950 ms past a second to 950 ms past a later one holds exactly its
    // seconds' bursts when each burst is done within 950 ms.
    let now = Utc::now();
    let start = DateTime::from_timestamp(now.timestamp() + 1, 950_000_000).context("second")?;
    tokio::time::sleep((start - now).to_std().unwrap_or_default()).await;
    let before = due_state(js).await?.last_sequence;
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let after = due_state(js).await?.last_sequence;
    let stored_per_second = after.saturating_sub(before) as f64 / started.elapsed().as_secs_f64();
    Ok(CapacityStep {
        offered,
        stored_per_second,
    })
}

fn rss_bytes() -> u64 {
    jetcron_loadtest::status_bytes("self", "VmRSS:").unwrap_or(0)
}

async fn cold_start(nats: &NatsServer, js: &jetstream::Context, jobs: usize) -> anyhow::Result<()> {
    let load_started = Instant::now();
    load_jobs(js, jobs, "0 0 0 * * *", |i| format!("cold-{i:07}")).await?;
    load_jobs(js, 1, "* * * * * *", |_| "canary".to_string()).await?;
    let load_time = load_started.elapsed();
    let mut canary = nats
        .client()
        .await
        .subscribe(subjects::due_subject(subjects::DEFAULT_POOL, "canary"))
        .await?;
    let rss_before = rss_bytes();
    let stop = CancellationToken::new();
    let started = Instant::now();
    let ticker = start_ticker(nats.client().await, &stop);
    canary.next().await.context("canary never fired")?;
    let to_scheduling = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after = rss_bytes();
    stop.cancel();
    ticker.await??;
    let per_job = rss_after.saturating_sub(rss_before) as f64 / jobs as f64;
    println!("| measure | value |");
    println!("|---|---|");
    println!("| jobs in the bucket | {} |", jobs + 1);
    println!(
        "| time to load them (pipelined KV puts) | {:.1} s |",
        load_time.as_secs_f64()
    );
    println!(
        "| ticker start → first due event of the canary | {:.1} s |",
        to_scheduling.as_secs_f64()
    );
    println!(
        "| ticker resident memory | {:.0} MiB |",
        rss_after.saturating_sub(rss_before) as f64 / 1048576.0
    );
    println!("| resident memory per job | {per_job:.0} bytes |");
    Ok(())
}

async fn lag(
    nats: &NatsServer,
    js: &jetstream::Context,
    jobs: usize,
    replicas: usize,
    seconds: u64,
) -> anyhow::Result<()> {
    load_jobs(js, jobs, "* * * * * *", |i| format!("lag-{i:06}")).await?;
    // Count every message sent on the due subjects, duplicates included.
    let sent = Arc::new(AtomicU64::new(0));
    let mut tap = nats.client().await.subscribe("jetcron.due.>").await?;
    let counter = sent.clone();
    tokio::spawn(async move {
        while tap.next().await.is_some() {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
    let stop = CancellationToken::new();
    let mut tickers = Vec::new();
    for _ in 0..replicas {
        tickers.push(start_ticker(nats.client().await, &stop));
    }
    let started_at = Utc::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.cancel();
    for ticker in tickers {
        ticker.await??;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = sent.load(Ordering::Relaxed);

    // Read every stored due event back (a work-queue stream only takes
    // explicit-ack consumers; acking empties it, which is fine at the end).
    let stream = js.get_stream(subjects::DUE_STREAM).await?;
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some("bench-reader".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            max_ack_pending: -1,
            ..Default::default()
        })
        .await?;
    let stored = due_state(js).await?.messages;
    let mut messages = consumer.messages().await?;
    // Skip the first seconds: replicas start, load the bucket and share shards.
    let warm = started_at + chrono::Duration::seconds(5);
    let mut lags = Vec::new();
    let mut read = 0u64;
    while read < stored {
        let Some(message) = messages.next().await else {
            break;
        };
        let message = message?;
        read += 1;
        let published: DateTime<Utc> = message
            .info()
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .published;
        let event: DueEvent = serde_json::from_slice(&message.payload)?;
        let _ = message.ack().await;
        if event.scheduled_at >= warm {
            lags.push((published - event.scheduled_at).num_milliseconds());
        }
    }
    lags.sort_unstable();
    println!("| measure | value |");
    println!("|---|---|");
    println!("| ticker replicas | {replicas} |");
    println!("| jobs due every second | {jobs} |");
    println!("| due events stored | {stored} |");
    println!("| messages sent on jetcron.due.> | {sent} |");
    println!(
        "| publish amplification (sent ÷ stored) | {:.3} |",
        sent as f64 / stored.max(1) as f64
    );
    println!("| fires measured (after 5 s warm-up) | {} |", lags.len());
    println!("| fire lag p50 | {} ms |", percentile(&lags, 50.0));
    println!("| fire lag p99 | {} ms |", percentile(&lags, 99.0));
    println!(
        "| fire lag max | {} ms |",
        lags.last().copied().unwrap_or(0)
    );
    Ok(())
}
