//! End to end, as a user sees it: `jetcron all` (one process: ticker,
//! executor, projector, gateway) with nats-server and clickhouse-server on
//! this machine, N jobs `* * * * * *` whose NATS target is answered here.
//! A fire is on time when its target is called on time, so the lag is
//! measured at the target: arrival minus `Jetcron-Scheduled-At`.
//!
//! `run` prints, for the measured seconds (after a warm-up):
//! - runs/s reaching the target, and how many of the window's fires did;
//! - target-call lag p50/p99/max and fires called early (before their time);
//! - CPU seconds of each process (`/proc/<pid>/stat`) and per run in µs;
//! - how long until every measured run is queryable in ClickHouse;
//! - what each run costs nats-server (its monitoring endpoint, before and
//!   after the window): messages in and out, and messages and bytes stored
//!   per stream;
//! - the same burst from an *ideal sender*: this process publishes N
//!   requests at each whole second to the same subscriber through the same
//!   server, the floor for a burst of that size here (measured first, in
//!   the same invocation);
//! - the same burst from an *ideal caller*: jetcron's own calls (its four
//!   headers, its JSON body, a reply each, read back), built ahead and
//!   handed to a client of their own at the instant: the floor for calls
//!   of that shape.
//!
//! `versus-schedules` runs the same, then nats-server's own message
//! schedules (`Nats-Schedule`, the same line, as many schedules as jobs) on
//! the same server, one after the other, and prints both lags side by side.
//!
//! `call-shapes` measures the ideal sender's burst beside bursts of calls
//! of each shape (one header or jetcron's four and its body, a reply or
//! none) on one server: what a call's shape costs ([`call_shapes`]).
//!
//! `wire-floor` does a run's wire operations from the leanest client, then
//! `run` on the same server: what nats-server's share of a run costs
//! before any of jetcron's own work ([`wire_floor`]).
//!
//! `fair-share` runs one namespace's burst of calls beside another
//! namespace's every-second job, with the executor's call slots first come
//! first served and then shared fairly, and prints both side by side
//! ([`fair_share`]).
//!
//! `memory` holds a million daily jobs and measures resident memory per job
//! and the cold start ([`memory`]); `replicas` what each of R ticker
//! replicas holds, and a dead one's shards loaded again ([`replicas`]).
//!
//! `cargo build --release -p jetcron -p jetcron-loadtest && ./target/release/e2e-bench run --jobs 10000`

// A benchmark scenario reads from its set-up to its printed table in one
// function; the workspace's 120-line limit (clippy.toml) holds for the
// services, not here.
#![allow(clippy::too_many_lines)]

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream;
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};
use futures::StreamExt as _;
use jetcron_core::subjects;
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_loadtest::{call_header, call_scheduled_at, cpu_seconds, percentile};
use jetcron_testkit::{ClickHouseServer, JetcronProcess, NatsServer};

mod call_shapes;
mod fair_share;
mod faults;
mod memory;
mod replicas;
mod server_schedules;
mod smoke;
mod stages;
mod sweep;
mod wire_floor;

#[derive(Parser)]
#[command(about = "jetcron end-to-end benchmark: jetcron all, nats-server, clickhouse-server")]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// N jobs firing every second through `jetcron all` to a NATS target.
    Run(RunArgs),
    /// `run`, then as many nats-server message schedules on the same server.
    VersusSchedules(RunArgs),
    /// A short `run` for CI, failing when a figure falls far below the
    /// recorded one.
    Smoke(smoke::SmokeArgs),
    /// A million jobs held by `jetcron all`: resident memory per job at
    /// peak and at rest, cold start beside the time to read the bucket.
    Memory(memory::MemoryArgs),
    /// R `jetcron ticker` replicas: memory of each once it holds only its
    /// own shards, and a SIGKILLed one's shards loaded by the others.
    Replicas(replicas::ReplicasArgs),
    /// A run's wire operations done by the leanest client, then `run` on
    /// the same server: nats-server's CPU per run under each.
    WireFloor(wire_floor::WireFloorArgs),
    /// The fault menu on a 3-node cluster (issue 39): stalls, a partition
    /// and a hung node, skewed clocks, leader kills, one crash at a time.
    Faults(faults::FaultsArgs),
    /// One namespace's burst beside another's every-second job (issue 41):
    /// `--slot-sharing fifo`, then `fair`, side by side.
    FairShare(fair_share::FairShareArgs),
    /// `run` at 1k, 3k, 5k and 8k fires/s and at the highest rate kept up
    /// with, each beside the ideal sender and the wire floor (issue 44).
    Sweep(sweep::SweepArgs),
    /// The ideal sender's burst, then bursts of calls of each shape (one
    /// header or jetcron's four and its JSON body, with a reply or
    /// without), side by side on one server: what a call's shape costs.
    CallShapes(call_shapes::CallShapesArgs),
}

#[derive(clap::Args, Clone)]
struct RunArgs {
    #[arg(long, default_value_t = 10_000)]
    jobs: usize,
    /// Seconds measured, after the warm-up.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    #[arg(long, default_value_t = 10)]
    warmup: u64,
    /// The jetcron binary (default: beside this one).
    #[arg(long)]
    jetcron: Option<PathBuf>,
    /// Extra arguments of `jetcron all` (e.g. `--max-in-flight 1024`).
    #[arg(long, allow_hyphen_values = true, num_args = 1..)]
    jetcron_args: Vec<String>,
    /// `RUST_LOG` of `jetcron all` (e.g.
    /// `info,jetcron_executor::instant_calls=debug` for the timeline of
    /// each instant's calls).
    #[arg(long)]
    log_filter: Option<String>,
    /// Write the log of `jetcron all` here.
    #[arg(long)]
    keep_log: Option<PathBuf>,
    /// Print the first and last call's lag of every second of the window.
    #[arg(long)]
    per_second: bool,
    /// Trace the stages of every fire of this many jobs (held, slot taken,
    /// start recorded, request sent, reply) from the executor's log, and
    /// print where the time goes (0: no trace).
    #[arg(long, default_value_t = 0)]
    trace_jobs: usize,
}

impl RunArgs {
    /// The jetcron binary: given, or the one beside this benchmark.
    fn jetcron(&self) -> anyhow::Result<PathBuf> {
        jetcron_binary(self.jetcron.as_deref())
    }
}

/// The jetcron binary: `given`, or the one beside this benchmark.
fn jetcron_binary(given: Option<&std::path::Path>) -> anyhow::Result<PathBuf> {
    let path = match given {
        Some(path) => path.to_path_buf(),
        None => std::env::current_exe()?
            .parent()
            .context("bench binary without a directory")?
            .join("jetcron"),
    };
    anyhow::ensure!(
        path.exists(),
        "no jetcron binary at {} (cargo build --release -p jetcron, or --jetcron)",
        path.display()
    );
    Ok(path)
}

/// The servers of one invocation: nats-server (with its monitoring port)
/// and clickhouse-server.
struct Servers {
    nats: NatsServer,
    monitor: NatsMonitor,
    clickhouse: ClickHouseServer,
}

impl Servers {
    fn start() -> Self {
        let monitor_port = jetcron_testkit::free_port();
        Self {
            nats: NatsServer::start_with_config(&format!("http_port: {monitor_port}")),
            monitor: NatsMonitor::new(monitor_port),
            clickhouse: ClickHouseServer::start(),
        }
    }
}

const TARGET_SUBJECT: &str = "bench.target";
const IDEAL_SUBJECT: &str = "bench.ideal";
const IDEAL_CALLS_SUBJECT: &str = "bench.ideal-calls";

/// `base` with a number no earlier call got: each burst measured has a
/// subscriber of its own (one left from an earlier burst would receive,
/// and answer, the next one's messages too).
fn fresh_subject(base: &str) -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{base}.{n}")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().scenario {
        Scenario::Run(args) => {
            let servers = Servers::start();
            run(&servers, &args).await?;
            Ok(())
        }
        Scenario::VersusSchedules(args) => versus_schedules(&args).await,
        Scenario::Smoke(args) => smoke::check(&args).await,
        Scenario::Memory(args) => memory::measure(&args).await,
        Scenario::Replicas(args) => replicas::measure(&args).await,
        Scenario::WireFloor(args) => wire_floor::measure(&args).await,
        Scenario::Faults(args) => faults::measure(&args).await,
        Scenario::FairShare(args) => fair_share::measure(&args).await,
        Scenario::Sweep(args) => sweep::measure(&args).await,
        Scenario::CallShapes(args) => call_shapes::measure(&args).await,
    }
}

/// jetcron's run, then the server's own schedules, same server, same line.
async fn versus_schedules(args: &RunArgs) -> anyhow::Result<()> {
    let servers = Servers::start();
    println!("### jetcron all\n");
    let jetcron = run(&servers, args).await?.lags;
    let js = jetstream::new(servers.nats.client().await);
    let server = server_schedules::measure(&js, args.jobs, args.warmup, args.seconds).await?;
    let expected = args.jobs as u64 * args.seconds;
    let row = |name: &str, lags: &[i64]| {
        println!(
            "| {name} | {} of {expected} | {} |",
            lags.len(),
            lag_cells(lags)
        );
    };
    println!(
        "\n### Side by side, same server, {} schedules `{}`\n",
        args.jobs,
        server_schedules::LINE
    );
    println!("| | fires measured | lag p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|");
    row("jetcron: target called (arrival − scheduled)", &jetcron);
    row(
        "nats-server message schedules: copy stored (stored − scheduled)",
        &server.lags_us,
    );
    println!(
        "\njetcron target-call p99 ÷ server stored p99: {:.2}; server copies stored early: {}",
        percentile(&jetcron, 99.0) as f64 / percentile(&server.lags_us, 99.0).max(1) as f64,
        server.early
    );
    Ok(())
}

/// Lags (sorted, µs) as table cells: p50, p99 and max, in ms.
fn lag_cells(lags: &[i64]) -> String {
    format!(
        "{:.1} | {:.1} | {:.1}",
        ms(percentile(lags, 50.0)),
        ms(percentile(lags, 99.0)),
        ms(lags.last().copied().unwrap_or(0))
    )
}

/// One call seen by the target: the second it was scheduled for and its lag.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    scheduled: DateTime<Utc>,
    at: DateTime<Utc>,
    lag_us: i64,
}

type Arrivals = Arc<Mutex<Vec<Arrival>>>;

/// Answer every request on `subject`, recording arrival minus the request's
/// `Jetcron-Scheduled-At`.
async fn serve(client: async_nats::Client, subject: &str) -> anyhow::Result<Arrivals> {
    Ok(serve_tracing(client, subject, HashSet::new()).await?.0)
}

/// [`serve`], also keeping the calls of the `traced` jobs by run id
/// ([`stages`]).
async fn serve_tracing(
    client: async_nats::Client,
    subject: &str,
    traced: HashSet<String>,
) -> anyhow::Result<(Arrivals, stages::TracedCalls)> {
    let arrivals: Arrivals = Arc::default();
    let traced_calls: stages::TracedCalls = Arc::default();
    let mut requests = client.subscribe(subject.to_string()).await?;
    let (recorded, recorded_traced) = (arrivals.clone(), traced_calls.clone());
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let now = Utc::now();
            let header = |name: &str| call_header(&request, name);
            if let Some(scheduled) = call_scheduled_at(&request) {
                let lag_us = (now - scheduled).num_microseconds().unwrap_or(i64::MAX);
                recorded.lock().expect("arrivals").push(Arrival {
                    scheduled,
                    at: now,
                    lag_us,
                });
                let traced_run = header("Jetcron-Job-Id")
                    .filter(|job| traced.contains(job))
                    .and_then(|_| header("Jetcron-Run-Id"));
                if let Some(run_id) = traced_run {
                    let call = stages::TracedCall {
                        scheduled,
                        arrived: now,
                    };
                    recorded_traced.lock().expect("traced").insert(run_id, call);
                }
            }
            if let Some(reply) = request.reply {
                let _ = client.publish(reply, "ok".into()).await;
            }
        }
    });
    Ok((arrivals, traced_calls))
}

/// nats-server's monitoring endpoint: what the server did, in totals.
struct NatsMonitor {
    base: String,
    http: reqwest::Client,
}

/// Counters of nats-server at one moment (or their growth over a window).
#[derive(Debug, Default)]
struct NatsCounts {
    in_msgs: u64,
    out_msgs: u64,
    /// Per stream: messages ever stored (its last sequence) and the mean
    /// size of those it holds now, in bytes (unknown while it holds none: a
    /// work queue drained by its consumers).
    streams: std::collections::BTreeMap<String, (u64, Option<u64>)>,
}

impl NatsCounts {
    fn since(&self, before: &NatsCounts) -> NatsCounts {
        NatsCounts {
            in_msgs: self.in_msgs.saturating_sub(before.in_msgs),
            out_msgs: self.out_msgs.saturating_sub(before.out_msgs),
            streams: self
                .streams
                .iter()
                .map(|(name, (seq, mean_size))| {
                    let seq0 = before.streams.get(name).map_or(0, |(seq, _)| *seq);
                    (name.clone(), (seq.saturating_sub(seq0), *mean_size))
                })
                .collect(),
        }
    }
}

impl NatsMonitor {
    fn new(port: u16) -> Self {
        Self {
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        }
    }

    async fn get(&self, path: &str) -> anyhow::Result<serde_json::Value> {
        let url = format!("{}{path}", self.base);
        self.http
            .get(&url)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?
            .json()
            .await
            .with_context(|| format!("GET {url}: not JSON"))
    }

    async fn counts(&self) -> anyhow::Result<NatsCounts> {
        let varz = self.get("/varz").await?;
        let jsz = self.get("/jsz?streams=true").await?;
        let number = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        let mut streams = std::collections::BTreeMap::new();
        for account in jsz["account_details"].as_array().into_iter().flatten() {
            for stream in account["stream_detail"].as_array().into_iter().flatten() {
                let name = stream["name"].as_str().unwrap_or("?").to_string();
                let state = &stream["state"];
                let held = number(&state["messages"]);
                let mean_size = (held > 0).then(|| number(&state["bytes"]) / held);
                streams.insert(name, (number(&state["last_seq"]), mean_size));
            }
        }
        Ok(NatsCounts {
            in_msgs: number(&varz["in_msgs"]),
            out_msgs: number(&varz["out_msgs"]),
            streams,
        })
    }
}

/// Store `count` job definitions, every second to the target.
async fn load_jobs(js: &jetstream::Context, count: usize) -> anyhow::Result<()> {
    let value = format!(
        r#"{{"schedule":"* * * * * *","target":{{"type":"nats","subject":"{TARGET_SUBJECT}"}}}}"#
    );
    jetcron_loadtest::put_jobs(js, 0..count, job_name, |_| value.clone()).await
}

/// The id of bench job `i`.
fn job_name(i: usize) -> String {
    format!("e2e-{i:07}")
}

/// Lags (µs, sorted) of the arrivals scheduled in `[from, to)`.
fn lags_between(arrivals: &Arrivals, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<i64> {
    let mut lags: Vec<i64> = arrivals
        .lock()
        .expect("arrivals")
        .iter()
        .filter(|a| a.scheduled >= from && a.scheduled < to)
        .map(|a| a.lag_us)
        .collect();
    lags.sort_unstable();
    lags
}

/// Calls the target received in `[from, to)`, whenever they were scheduled.
fn received_between(arrivals: &Arrivals, from: DateTime<Utc>, to: DateTime<Utc>) -> u64 {
    arrivals
        .lock()
        .expect("arrivals")
        .iter()
        .filter(|a| a.at >= from && a.at < to)
        .count() as u64
}

/// Due events stored and not yet consumed.
async fn due_backlog(js: &jetstream::Context) -> anyhow::Result<u64> {
    Ok(js
        .get_stream(subjects::DUE_STREAM)
        .await?
        .info()
        .await?
        .state
        .messages)
}

/// Per second of `[from, to)`: the lag (µs) of its first and of its last
/// arrival, each sorted. A burst spread out shows as last ≫ first; a burst
/// sent late as both late. `print_each` prints a table row per second.
fn burst_edges(
    arrivals: &Arrivals,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    print_each: bool,
) -> (Vec<i64>, Vec<i64>) {
    let mut per_second: std::collections::BTreeMap<DateTime<Utc>, (i64, i64)> =
        std::collections::BTreeMap::new();
    for a in arrivals.lock().expect("arrivals").iter() {
        if a.scheduled >= from && a.scheduled < to {
            let edges = per_second
                .entry(a.scheduled)
                .or_insert((a.lag_us, a.lag_us));
            edges.0 = edges.0.min(a.lag_us);
            edges.1 = edges.1.max(a.lag_us);
        }
    }
    if print_each {
        for (second, (first, last)) in &per_second {
            println!(
                "| {} | first call {:.1} ms, last {:.1} ms |",
                second.format("%H:%M:%S"),
                ms(*first),
                ms(*last)
            );
        }
    }
    let (mut first, mut last): (Vec<i64>, Vec<i64>) = per_second.into_values().unzip();
    first.sort_unstable();
    last.sort_unstable();
    (first, last)
}

/// Write `process`'s log (colour codes removed) to `path`, when given.
fn keep_log(process: &JetcronProcess, path: Option<&std::path::Path>) -> anyhow::Result<()> {
    if let Some(path) = path {
        std::fs::write(path, jetcron_testkit::without_colour_codes(&process.log()))
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

/// Microseconds in milliseconds, for the tables.
fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

/// The next whole second after now.
fn next_second() -> DateTime<Utc> {
    let now = Utc::now();
    DateTime::from_timestamp(now.timestamp() + 1, 0).expect("second")
}

async fn sleep_until(at: DateTime<Utc>) {
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

/// The ideal sender: `jobs` requests published at each whole second for
/// `seconds`, with their second as `Jetcron-Scheduled-At`; lags as seen by
/// the same kind of subscriber.
async fn ideal_sender(nats: &NatsServer, jobs: usize, seconds: u64) -> anyhow::Result<Vec<i64>> {
    let subject = fresh_subject(IDEAL_SUBJECT);
    let arrivals = serve(nats.client().await, &subject).await?;
    let sender = nats.client().await;
    let first = next_second() + chrono::Duration::seconds(1);
    for s in 0..seconds as i64 {
        let at = first + chrono::Duration::seconds(s);
        sleep_until(at).await;
        let stamp = jetcron_core::time_format::rfc3339_millis(at);
        for _ in 0..jobs {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Jetcron-Scheduled-At", stamp.as_str());
            sender
                .publish_with_headers(subject.clone(), headers, "{}".into())
                .await?;
        }
        sender.flush().await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(lags_between(
        &arrivals,
        first,
        first + chrono::Duration::seconds(seconds as i64),
    ))
}

/// What a call carries: jetcron's four headers (run id, job id, scheduled
/// time, attempt) and its JSON body, or only `Jetcron-Scheduled-At` and
/// `{}` as the ideal sender's; and whether it asks for a reply.
#[derive(Debug, Clone, Copy)]
struct CallShape {
    jetcron_headers: bool,
    reply: bool,
    /// Replies read on a connection of their own, not the sending one.
    replies_apart: bool,
}

impl CallShape {
    /// A call as an executor makes it to a `nats` target.
    const JETCRON: CallShape = CallShape {
        jetcron_headers: true,
        reply: true,
        replies_apart: false,
    };

    /// `jobs` calls of this shape to `subject` for the second `at`.
    fn burst(
        self,
        subject: &str,
        jobs: usize,
        at: DateTime<Utc>,
        inbox: &str,
    ) -> Vec<async_nats::message::OutboundMessage> {
        (0..jobs)
            .map(|n| {
                let (headers, payload) = match self.jetcron_headers {
                    true => jetcron_call(subject, n, at),
                    false => {
                        let mut headers = async_nats::HeaderMap::new();
                        let stamp = jetcron_core::time_format::rfc3339_millis(at);
                        headers.insert("Jetcron-Scheduled-At", stamp.as_str());
                        (headers, "{}".into())
                    }
                };
                async_nats::message::OutboundMessage {
                    subject: subject.to_string().into(),
                    reply: self.reply.then(|| format!("{inbox}.{n}").into()),
                    payload,
                    headers: Some(headers),
                }
            })
            .collect()
    }
}

/// The headers and body an executor sends job `n` of the bench for `at`
/// (a `nats` target on `subject`).
fn jetcron_call(
    subject: &str,
    n: usize,
    at: DateTime<Utc>,
) -> (async_nats::HeaderMap, bytes::Bytes) {
    let target = jetcron_core::job::NatsTarget {
        subject: subject.to_string(),
        payload: None,
        headers: Default::default(),
    };
    let job_id = format!("bench-{n:06}");
    let run = jetcron_executor::targets::RunContext {
        run_id: jetcron_core::events::RunId::for_fire(&job_id, at),
        job_id,
        scheduled_at: at,
        attempt: 1,
        shard: None,
        parent: None,
    };
    jetcron_executor::targets::nats::prepare(&target, &run)
}

/// The ideal sender of calls of `shape`: `jobs` requests at each whole
/// second, every message built before the instant and handed to the client
/// at it (the last 2 ms waited by spinning, as the executor does), each
/// reply (when asked for) read by this sender. The sender and its
/// connection run on a runtime of their own (two threads), apart from the
/// target's, as an executor's calls run in a process of their own. What
/// the target sees of [`CallShape::JETCRON`] is the floor for a burst of
/// jetcron's calls here: the *ideal caller*.
async fn ideal_caller(
    nats: &NatsServer,
    jobs: usize,
    seconds: u64,
    shape: CallShape,
) -> anyhow::Result<Vec<i64>> {
    let subject = fresh_subject(IDEAL_CALLS_SUBJECT);
    let arrivals = serve(nats.client().await, &subject).await?;
    let url = nats.url();
    let first = next_second() + chrono::Duration::seconds(1);
    let sender = std::thread::spawn(move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?
            .block_on(send_calls(url, subject, jobs, first, seconds, shape))
    });
    tokio::task::spawn_blocking(move || sender.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the ideal caller's thread panicked"))??;
    Ok(lags_between(
        &arrivals,
        first,
        first + chrono::Duration::seconds(seconds as i64),
    ))
}

/// The ideal caller's sending side ([`ideal_caller`]): one burst a second
/// from `first`, every reply (when asked for) counted.
async fn send_calls(
    url: String,
    subject: String,
    jobs: usize,
    first: DateTime<Utc>,
    seconds: u64,
    shape: CallShape,
) -> anyhow::Result<()> {
    use futures::SinkExt;
    let mut sender = async_nats::connect(&url).await?;
    let listener = match shape.replies_apart {
        true => async_nats::connect(&url).await?,
        false => sender.clone(),
    };
    let inbox = listener.new_inbox();
    let mut replies = listener.subscribe(format!("{inbox}.*")).await?;
    let replied = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = replied.clone();
    tokio::spawn(async move {
        while replies.next().await.is_some() {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    for s in 0..seconds as i64 {
        let at = first + chrono::Duration::seconds(s);
        let burst = shape.burst(&subject, jobs, at, &inbox);
        if let Ok(wait) = (at - Utc::now()).to_std() {
            tokio::time::sleep(wait.saturating_sub(Duration::from_millis(2))).await;
        }
        while Utc::now() < at {
            std::hint::spin_loop();
        }
        for message in burst {
            sender.feed(message).await?;
        }
        SinkExt::<async_nats::message::OutboundMessage>::flush(&mut sender).await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let expected = if shape.reply {
        jobs * seconds as usize
    } else {
        0
    };
    let got = replied.load(std::sync::atomic::Ordering::Relaxed);
    anyhow::ensure!(
        got == expected,
        "the ideal caller got {got} of {expected} replies"
    );
    Ok(())
}

/// A floor's lags (sorted, µs) as table rows, and jetcron's p99 over its.
fn print_floor(label: &str, short: &str, floor: &[i64], lags: &[i64]) {
    println!(
        "| {label}: lag p50 / p99 / max | {:.1} / {:.1} / {:.1} ms ({} messages) |",
        ms(percentile(floor, 50.0)),
        ms(percentile(floor, 99.0)),
        ms(floor.last().copied().unwrap_or(0)),
        floor.len()
    );
    println!(
        "| target-call p99 ÷ {short} p99 | {:.2} |",
        percentile(lags, 99.0) as f64 / percentile(floor, 99.0).max(1) as f64
    );
}

/// What one `run` measured, beside the table it prints.
pub struct RunFigures {
    /// Calls the target received per second of the window.
    pub runs_per_second: f64,
    /// CPU of jetcron, nats-server and clickhouse-server per run.
    pub cpu_per_run_us: f64,
    /// nats-server's part of it.
    pub nats_cpu_per_run_us: f64,
    /// Target-call lags of the window's fires, µs, sorted.
    pub lags: Vec<i64>,
    /// The ideal sender's lags of the same burst on the same server, µs,
    /// sorted.
    pub ideal_lags: Vec<i64>,
    /// Due events stored and not consumed when the window began, and when
    /// it ended: a backlog that grows is a load not kept up with.
    pub due_backlog_at_start: u64,
    pub due_backlog_at_end: u64,
}

/// `jetcron all` with `args.jobs` jobs: prints its table and returns its
/// figures.
async fn run(servers: &Servers, args: &RunArgs) -> anyhow::Result<RunFigures> {
    let jetcron = args.jetcron()?;
    let (jobs, seconds, warmup) = (args.jobs, args.seconds, args.warmup);
    let Servers {
        nats,
        monitor,
        clickhouse,
    } = servers;
    let client = nats.client().await;
    let js = jetstream::new(client.clone());

    // The floor: an ideal sender's burst, same server, same subscriber kind,
    // as many seconds as the window (its p99 is that of its worst seconds).
    let ideal = ideal_sender(nats, jobs, seconds).await?;
    let ideal_calls = ideal_caller(nats, jobs, seconds, CallShape::JETCRON).await?;

    topology::ensure_jobs_bucket(&js, &TopologyOptions::default()).await?;
    let loading = Instant::now();
    load_jobs(&js, jobs).await?;
    let loaded_in = loading.elapsed();
    let traced = stages::traced_jobs(args.trace_jobs.min(jobs), job_name);
    let (arrivals, traced_calls) =
        serve_tracing(nats.client().await, TARGET_SUBJECT, traced.clone()).await?;
    let http_addr = format!("127.0.0.1:{}", jetcron_testkit::free_port());
    let mut command: Vec<&str> = vec!["all", "--http-addr", &http_addr];
    command.extend(args.jetcron_args.iter().map(String::as_str));
    let (nats_url, clickhouse_url) = (nats.url(), clickhouse.url());
    let mut env = vec![
        ("JETCRON_NATS_URL", nats_url.as_str()),
        ("JETCRON_CLICKHOUSE_URL", clickhouse_url.as_str()),
    ];
    let log_filter = match (&args.log_filter, traced.is_empty()) {
        (filter, true) => filter.clone(),
        (filter, false) => Some(format!(
            "{},{}",
            filter.as_deref().unwrap_or("info,async_nats=warn"),
            stages::log_directives(&traced)
        )),
    };
    if let Some(filter) = &log_filter {
        env.push(("RUST_LOG", filter.as_str()));
    }
    let process = JetcronProcess::start(&jetcron, &command, &env);
    let pids = [
        ("jetcron all", process.pid()),
        ("nats-server", nats.pid()),
        ("clickhouse-server", clickhouse.pid()),
    ];

    tokio::time::sleep(Duration::from_secs(warmup)).await;
    let from = next_second();
    sleep_until(from).await;
    let cpu_before: Vec<f64> = pids
        .iter()
        .map(|(_, pid)| pid.map_or(0.0, cpu_seconds))
        .collect();
    let nats_before = monitor.counts().await?;
    let due_backlog_at_start = due_backlog(&js).await?;
    let to = from + chrono::Duration::seconds(seconds as i64);
    sleep_until(to).await;
    let cpu_after: Vec<f64> = pids
        .iter()
        .map(|(_, pid)| pid.map_or(0.0, cpu_seconds))
        .collect();
    let nats_after = monitor.counts().await?;
    let due_backlog_at_end = due_backlog(&js).await?;
    // Late calls of the window still count: wait for them a little.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let lags = lags_between(&arrivals, from, to);
    let expected = jobs as u64 * seconds;
    let called = lags.len() as u64;
    // Throughput: calls the target received while the window lasted,
    // whenever they were scheduled.
    let received = received_between(&arrivals, from, to);

    // Queryable: every measured run in ClickHouse.
    let ch = jetcron_io::clickhouse_schema::ClickHouseOptions::new(clickhouse.url()).client();
    let waiting = Instant::now();
    let mut stored = 0u64;
    while waiting.elapsed() < Duration::from_secs(120) {
        stored = ch
            .query(
                "SELECT count() FROM (SELECT DISTINCT run_id FROM jetcron.run_events \
                 WHERE kind = 'succeeded' AND scheduled_ms >= ? AND scheduled_ms < ?)",
            )
            .bind(from.timestamp_millis())
            .bind(to.timestamp_millis())
            .fetch_one::<u64>()
            .await
            .unwrap_or(0);
        if stored >= called {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let queryable_after = waiting.elapsed();
    // Where the time goes: the executor's start (the `started` event's time,
    // before it is stored and the target called) minus the scheduled time.
    let started_lag: Vec<f64> = ch
        .query(
            "SELECT quantiles(0.5, 0.99)(at_ms - scheduled_ms) FROM jetcron.run_events \
             WHERE kind = 'started' AND scheduled_ms >= ? AND scheduled_ms < ?",
        )
        .bind(from.timestamp_millis())
        .bind(to.timestamp_millis())
        .fetch_one::<Vec<f64>>()
        .await
        .unwrap_or_default();
    let backlog = due_backlog(&js).await?;

    println!("| measure | value |");
    println!("|---|---|");
    println!("| jobs firing every second | {jobs} |");
    println!("| bucket loaded in | {:.1} s |", loaded_in.as_secs_f64());
    println!("| measured | {seconds} s after {warmup} s warm-up |");
    println!("| fires in the window | {expected} |");
    println!(
        "| fires of the window called (by 5 s after it) | {called} ({:.1} %) |",
        called as f64 * 100.0 / expected.max(1) as f64
    );
    println!(
        "| runs/s at the target (calls received in the window) | {:.0} |",
        received as f64 / seconds as f64
    );
    println!(
        "| target-call lag p50 / p99 / max | {:.1} / {:.1} / {:.1} ms |",
        ms(percentile(&lags, 50.0)),
        ms(percentile(&lags, 99.0)),
        ms(lags.last().copied().unwrap_or(0))
    );
    let (first, last) = burst_edges(&arrivals, from, to, args.per_second);
    println!(
        "| per second: first call's lag p50 / max, last call's lag p50 / max | {:.1} / {:.1}, {:.1} / {:.1} ms |",
        ms(percentile(&first, 50.0)),
        ms(first.last().copied().unwrap_or(0)),
        ms(percentile(&last, 50.0)),
        ms(last.last().copied().unwrap_or(0)),
    );
    if let [p50, p99] = started_lag[..] {
        println!("| of which to the executor's start (`started` time − scheduled) p50 / p99 | {p50:.0} / {p99:.0} ms |");
    }
    println!(
        "| calls more than 1 ms early | {} |",
        lags.iter().filter(|l| **l < -1000).count()
    );
    print_floor("ideal sender, same burst", "ideal", &ideal, &lags);
    print_floor(
        "ideal caller, jetcron's calls (headers, body, replies) built ahead",
        "ideal caller",
        &ideal_calls,
        &lags,
    );
    let mut total = 0.0;
    let mut nats_used = 0.0;
    for ((name, _), (before, after)) in pids.iter().zip(cpu_before.iter().zip(&cpu_after)) {
        let used = after - before;
        total += used;
        if *name == "nats-server" {
            nats_used = used;
        }
        println!(
            "| CPU {name} | {:.1} s ({:.0} % of a core), {:.0} µs per run |",
            used,
            used * 100.0 / seconds as f64,
            used * 1e6 / received.max(1) as f64
        );
    }
    println!(
        "| CPU per run, all three | {:.0} µs |",
        total * 1e6 / received.max(1) as f64
    );
    println!(
        "| runs of the window in ClickHouse | {stored} of {called}, after {:.1} s |",
        queryable_after.as_secs_f64()
    );
    println!("| due events still queued at the end | {backlog} |");
    let per_run = |n: u64| n as f64 / received.max(1) as f64;
    let delta = nats_after.since(&nats_before);
    println!(
        "| nats-server per run: messages in / out | {:.1} / {:.1} |",
        per_run(delta.in_msgs),
        per_run(delta.out_msgs)
    );
    for (stream, (messages, mean_size)) in &delta.streams {
        if *messages > 0 {
            let bytes = mean_size.map_or("?".to_string(), |size| {
                format!("{:.0}", per_run(*messages) * size as f64)
            });
            println!(
                "| stored per run in {stream}: messages / bytes | {:.2} / {bytes} |",
                per_run(*messages)
            );
        }
    }
    if !traced.is_empty() {
        let log = jetcron_testkit::without_colour_codes(&process.log());
        stages::print_trace(&log, &traced_calls, from, to);
    }
    keep_log(&process, args.keep_log.as_deref())?;
    drop(process);
    Ok(RunFigures {
        runs_per_second: received as f64 / seconds as f64,
        cpu_per_run_us: total * 1e6 / received.max(1) as f64,
        nats_cpu_per_run_us: nats_used * 1e6 / received.max(1) as f64,
        lags,
        ideal_lags: ideal,
        due_backlog_at_start,
        due_backlog_at_end,
    })
}
