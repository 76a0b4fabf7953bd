//! `e2e-bench wire-floor`: what the wire operations of a run cost
//! nats-server when the leanest client does them, beside `jetcron all`
//! doing the same runs on the same server in the same invocation.
//!
//! Issue 16 asks for 10,000 runs a second at 150 µs of CPU per run summed
//! over jetcron, nats-server and ClickHouse. Part of that is the server's
//! own work for the messages a run needs (docs/architecture.md, "What one
//! run costs"): a due event stored with its `Nats-Msg-Id` and acked;
//! delivered to a pull consumer; a `started` run event stored and acked;
//! the target's request and reply; the outcome stored and acked; the due
//! event's ack; both run events delivered to the projector's consumer and
//! acked one by one. This scenario does exactly those with no scheduling,
//! no validation, no ledger and no ClickHouse, from one process:
//! - at each whole second it stores `--jobs` due events (pipelined
//!   publishes, awaited acks) on the streams jetcron itself makes
//!   ([`topology::ensure_due_stream`], [`topology::ensure_runs_stream`]);
//! - a worker pulls them (a durable pull consumer configured as an
//!   executor's), and for each, at most `--floor-in-flight` at once:
//!   publishes `started` and awaits its ack, sends the target a request
//!   with the `Jetcron-Scheduled-At` header and awaits the reply, publishes
//!   `succeeded` and awaits its ack, acks the due event;
//! - a projector pulls the run events and acks each one.
//!
//! It prints runs/s at the target, the target-call lag, and CPU per run of
//! nats-server and of this process, then deletes its streams and runs
//! [`crate::run`] on the same server: the server's CPU per run under the
//! leanest client against under jetcron. Bodies are the sizes jetcron
//! stores (a due event about 430 bytes, a run event about 560).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::pull, message::PublishMessage};
use async_nats::HeaderMap;
use bytes::Bytes;
use futures::StreamExt as _;
use jetcron_core::subjects;
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_loadtest::{percentile, CpuMark};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::{
    due_backlog, lags_between, ms, next_second, received_between, serve, sleep_until, RunArgs,
    Servers,
};

#[derive(clap::Args, Clone)]
pub struct WireFloorArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Runs the floor's worker has out at once (jetcron's executor: 2,048).
    #[arg(long, default_value_t = FLOOR_IN_FLIGHT)]
    floor_in_flight: usize,
    /// Only the floor, not `jetcron all` after it.
    #[arg(long)]
    floor_only: bool,
}

/// Runs the floor's worker has out at once unless told.
pub(crate) const FLOOR_IN_FLIGHT: usize = 2_048;

/// Bodies of the sizes jetcron stores.
const DUE_BODY_BYTES: usize = 430;
const RUN_EVENT_BYTES: usize = 560;
/// Due events published before their acks are awaited.
const PUBLISHES_IN_FLIGHT: usize = 1_024;
/// The floor's consumers, named as nothing of jetcron is.
const WORKER: &str = "wire-floor-worker";
/// The floor's target: its subscriber outlives the floor, so not the one
/// `jetcron all` calls after it.
const TARGET_SUBJECT: &str = "bench.floor-target";
const PROJECTOR: &str = "wire-floor-projector";

/// What the floor measured.
pub(crate) struct FloorFigures {
    pub(crate) runs_per_second: f64,
    pub(crate) nats_cpu_per_run_us: f64,
    pub(crate) client_cpu_per_run_us: f64,
    /// Target-call lags of the window's fires, µs, sorted.
    pub(crate) lags: Vec<i64>,
}

pub async fn measure(args: &WireFloorArgs) -> anyhow::Result<()> {
    let servers = Servers::start();
    println!("### The leanest client: a run's wire operations only\n");
    let floor = floor(&servers, &args.run, args.floor_in_flight).await?;
    if args.floor_only {
        return Ok(());
    }
    println!("\n### jetcron all, same server, after the floor's streams were deleted\n");
    let jetcron = crate::run(&servers, &args.run).await?;
    println!(
        "\n### Side by side, {} runs offered a second\n",
        args.run.jobs
    );
    println!("| | runs/s at the target | nats-server µs per run | client µs per run |");
    println!("|---|---|---|---|");
    println!(
        "| leanest client (this process) | {:.0} | {:.0} | {:.0} |",
        floor.runs_per_second, floor.nats_cpu_per_run_us, floor.client_cpu_per_run_us
    );
    println!(
        "| jetcron all | {:.0} | {:.0} | {:.0} (jetcron all and clickhouse-server) |",
        jetcron.runs_per_second,
        jetcron.nats_cpu_per_run_us,
        jetcron.cpu_per_run_us - jetcron.nats_cpu_per_run_us
    );
    println!(
        "\nnats-server's CPU per run, jetcron ÷ leanest client: {:.2}",
        jetcron.nats_cpu_per_run_us / floor.nats_cpu_per_run_us.max(1.0)
    );
    Ok(())
}

/// The floor alone at `run.jobs` runs a second, its worker holding at most
/// `in_flight` runs out: prints its table, returns its figures and leaves
/// the server without its streams.
pub(crate) async fn floor(
    servers: &Servers,
    run: &RunArgs,
    in_flight: usize,
) -> anyhow::Result<FloorFigures> {
    let (jobs, seconds, warmup) = (run.jobs, run.seconds, run.warmup);
    let nats = &servers.nats;
    let client = nats.client().await;
    let js = jetstream::new(client.clone());
    let options = TopologyOptions::default();
    let due = topology::ensure_due_stream(&js, &options).await?;
    let runs = topology::ensure_runs_stream(&js, &options).await?;
    let arrivals = serve(nats.client().await, TARGET_SUBJECT).await?;
    let stop = CancellationToken::new();

    let worker = due
        .create_consumer(pull::Config {
            durable_name: Some(WORKER.to_string()),
            filter_subject: subjects::due_pool_filter(subjects::DEFAULT_POOL),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(60),
            max_deliver: -1,
            max_ack_pending: 10_000,
            ..Default::default()
        })
        .await
        .context("create the floor's worker consumer")?;
    let projector = runs
        .create_consumer(pull::Config {
            durable_name: Some(PROJECTOR.to_string()),
            filter_subject: subjects::RUNS_SUBJECTS.to_string(),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            max_ack_pending: 40_000,
            ..Default::default()
        })
        .await
        .context("create the floor's projector consumer")?;
    let tasks = [
        tokio::spawn(work(
            worker,
            js.clone(),
            client.clone(),
            in_flight,
            stop.clone(),
        )),
        tokio::spawn(project(projector, stop.clone())),
        tokio::spawn(fire_every_second(js.clone(), jobs, stop.clone())),
    ];

    tokio::time::sleep(Duration::from_secs(warmup)).await;
    let from = next_second();
    sleep_until(from).await;
    let cpu = CpuMark::now(nats.pid());
    let counts_before = servers.monitor.counts().await?;
    let to = from + chrono::Duration::seconds(seconds as i64);
    sleep_until(to).await;
    let used = cpu.since(nats.pid());
    let counts_after = servers.monitor.counts().await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.cancel();
    for task in tasks {
        task.await.context("a floor task panicked")??;
    }

    let lags = lags_between(&arrivals, from, to);
    let received = received_between(&arrivals, from, to);
    let per_run = |x: f64| x / received.max(1) as f64;
    let figures = FloorFigures {
        runs_per_second: received as f64 / seconds as f64,
        nats_cpu_per_run_us: per_run(used.server * 1e6),
        client_cpu_per_run_us: per_run(used.own * 1e6),
        lags: lags.clone(),
    };
    let backlog = due_backlog(&js).await?;
    let delta = counts_after.since(&counts_before);
    println!("| measure | value |");
    println!("|---|---|");
    println!("| runs offered a second | {jobs} |");
    println!("| measured | {seconds} s after {warmup} s warm-up |");
    println!(
        "| runs/s at the target (calls received in the window) | {:.0} |",
        figures.runs_per_second
    );
    println!(
        "| fires of the window called (by 5 s after it) | {} of {} |",
        lags.len(),
        jobs as u64 * seconds
    );
    println!(
        "| target-call lag p50 / p99 / max | {:.1} / {:.1} / {:.1} ms |",
        ms(percentile(&lags, 50.0)),
        ms(percentile(&lags, 99.0)),
        ms(lags.last().copied().unwrap_or(0))
    );
    println!(
        "| CPU nats-server | {:.1} s ({:.0} % of a core), {:.0} µs per run |",
        used.server,
        used.server * 100.0 / seconds as f64,
        figures.nats_cpu_per_run_us
    );
    println!(
        "| CPU this process (ticker, worker, target, projector) | {:.1} s ({:.0} % of a core), {:.0} µs per run |",
        used.own,
        used.own * 100.0 / seconds as f64,
        figures.client_cpu_per_run_us
    );
    println!(
        "| nats-server per run: messages in / out | {:.1} / {:.1} |",
        per_run(delta.in_msgs as f64),
        per_run(delta.out_msgs as f64)
    );
    println!("| due events still queued at the end | {backlog} |");

    for stream in [subjects::DUE_STREAM, subjects::RUNS_STREAM] {
        js.delete_stream(stream)
            .await
            .with_context(|| format!("delete the floor's stream {stream}"))?;
    }
    Ok(figures)
}

/// At each whole second, store a due event for each of `jobs` jobs
/// scheduled at it, as the ticker does (its run id as `Nats-Msg-Id`).
async fn fire_every_second(
    js: jetstream::Context,
    jobs: usize,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let body = Bytes::from(vec![b'd'; DUE_BODY_BYTES]);
    let subjects: Vec<String> = (0..jobs)
        .map(|i| subjects::due_subject(subjects::DEFAULT_POOL, &format!("floor-{i:07}")))
        .collect();
    loop {
        let at = next_second();
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = sleep_until(at) => {}
        }
        let scheduled = at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut acks = Vec::with_capacity(PUBLISHES_IN_FLIGHT);
        for (i, subject) in subjects.iter().enumerate() {
            let publish = PublishMessage::build()
                .payload(body.clone())
                .message_id(format!("floor-{i:07}@{scheduled}"))
                .header("Jetcron-Scheduled-At", scheduled.as_str());
            acks.push(js.send_publish(subject.clone(), publish).await?);
            // The context holds at most a few thousand acks out.
            if acks.len() == PUBLISHES_IN_FLIGHT {
                for ack in acks.drain(..) {
                    ack.await.context("due event ack")?;
                }
            }
        }
        for ack in acks {
            ack.await.context("due event ack")?;
        }
    }
}

/// Pull due events and run each: `started`, the call, `succeeded`, the ack.
async fn work(
    consumer: jetstream::consumer::PullConsumer,
    js: jetstream::Context,
    client: async_nats::Client,
    in_flight: usize,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let slots = Arc::new(Semaphore::new(in_flight));
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(in_flight.min(1_024))
        .messages()
        .await
        .context("pull due events")?;
    let event = Bytes::from(vec![b'r'; RUN_EVENT_BYTES]);
    while let Some(message) = next_or_stop(&mut messages, &stop, "a due event").await? {
        let slot = slots.clone().acquire_owned().await?;
        let (js, client, event) = (js.clone(), client.clone(), event.clone());
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = run_one(&message, &js, &client, event).await {
                eprintln!("floor run: {e:#}");
            }
        });
    }
    Ok(())
}

/// One run's wire operations, in jetcron's order.
async fn run_one(
    due: &jetstream::Message,
    js: &jetstream::Context,
    client: &async_nats::Client,
    event: Bytes,
) -> anyhow::Result<()> {
    let job = due
        .subject
        .rsplit('.')
        .next()
        .context("a due subject without a job")?
        .to_string();
    let headers = due.headers.clone().unwrap_or_default();
    let run = headers
        .get(async_nats::header::NATS_MESSAGE_ID)
        .map(|id| id.as_str().to_string())
        .context("a due event without its run id")?;
    let store = |kind: &'static str| {
        let publish = PublishMessage::build()
            .payload(event.clone())
            .message_id(format!("{run}:1:{kind}"));
        let subject = subjects::run_event_subject(&job, kind);
        async move {
            js.send_publish(subject, publish)
                .await?
                .await
                .with_context(|| format!("store {kind}"))?;
            anyhow::Ok(())
        }
    };
    store("started").await?;
    let mut call = HeaderMap::new();
    if let Some(at) = headers.get("Jetcron-Scheduled-At") {
        call.insert("Jetcron-Scheduled-At", at.as_str());
    }
    client
        .request_with_headers(TARGET_SUBJECT, call, Bytes::from_static(b"{}"))
        .await
        .context("the call")?;
    store("succeeded").await?;
    due.ack().await.map_err(|e| anyhow::anyhow!("ack: {e}"))?;
    Ok(())
}

/// Pull run events and ack each one, as the projector does once stored.
async fn project(
    consumer: jetstream::consumer::PullConsumer,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(4_096)
        .messages()
        .await
        .context("pull run events")?;
    while let Some(message) = next_or_stop(&mut messages, &stop, "a run event").await? {
        message
            .ack()
            .await
            .map_err(|e| anyhow::anyhow!("ack: {e}"))?;
    }
    Ok(())
}

/// The next message pulled, or `None` at `stop` or at the pull's end.
async fn next_or_stop(
    messages: &mut pull::Stream,
    stop: &CancellationToken,
    what: &'static str,
) -> anyhow::Result<Option<jetstream::Message>> {
    tokio::select! {
        _ = stop.cancelled() => Ok(None),
        message = messages.next() => message.transpose().context(what),
    }
}
