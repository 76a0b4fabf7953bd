//! Projector benchmarks against a real nats-server and clickhouse-server
//! (started here on free ports with temporary data, like the tests).
//!
//! Scenarios (each prints a markdown table for `docs/benchmarks.md`):
//! - `throughput`: N run events (started/succeeded pairs, realistic payloads)
//!   published into `JETCRON_RUNS` first, then one projector started: rows/s
//!   from its start until ClickHouse counts them all. The raw publish rate of
//!   the same events on the same server is printed beside it.
//! - `latency`: events published at a fixed rate while the projector runs;
//!   the delay from publish to queryable, p50/p99/max, from a poller that asks
//!   ClickHouse every few milliseconds how far the stored events reach.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream;
use chrono::{DateTime, TimeZone as _, Utc};
use clap::{Parser, Subcommand};
use jetcron_core::events::{RunEvent, RunEventKind, RunId};
use jetcron_core::subjects;
use jetcron_io::clickhouse_schema::{self, ClickHouseOptions};
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_testkit::{ClickHouseServer, NatsServer};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(about = "jetcron projector benchmarks on real nats-server and clickhouse-server")]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// A backlog of N events, then rows/s into ClickHouse.
    Throughput {
        #[arg(long, default_value_t = 1_000_000)]
        events: usize,
        #[arg(long, default_value_t = 20_000)]
        batch_size: usize,
    },
    /// Publish-to-queryable delay at a fixed rate.
    Latency {
        #[arg(long, default_value_t = 5_000)]
        rate: usize,
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        #[arg(long, default_value_t = 5_000)]
        batch_size: usize,
        #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
        batch_wait: Duration,
    },
}

/// Unacknowledged publishes at most (async-nats deadlocks beyond ~5000).
const IN_FLIGHT: usize = 4096;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let nats = NatsServer::start();
    let clickhouse = ClickHouseServer::start();
    let client = nats.client().await;
    let js = jetstream::new(client.clone());
    let options = TopologyOptions::default();
    topology::ensure_runs_stream(&js, &options).await?;
    let ch = ClickHouseOptions::new(clickhouse.url());
    clickhouse_schema::apply(&ch.client())
        .await
        .context("apply schema")?;
    match cli.scenario {
        Scenario::Throughput { events, batch_size } => {
            throughput(&nats, &js, &ch, events, batch_size).await
        }
        Scenario::Latency {
            rate,
            seconds,
            batch_size,
            batch_wait,
        } => latency(&nats, &js, &ch, rate, seconds, batch_size, batch_wait).await,
    }
}

/// Event `i` of a run history: even numbers start a run, odd ones end it.
fn event(i: usize, at: DateTime<Utc>, job: &str) -> RunEvent {
    let run = i / 2;
    let scheduled_at = Utc
        .timestamp_opt(1_795_000_000 + run as i64, 0)
        .single()
        .unwrap_or(at);
    let run_id = RunId::for_fire(job, scheduled_at);
    let kind = if i.is_multiple_of(2) {
        RunEventKind::Started
    } else {
        RunEventKind::Succeeded
    };
    RunEvent {
        max_attempts: 3,
        executor_id: "bench-executor".into(),
        target_type: "http".into(),
        pool: subjects::DEFAULT_POOL.into(),
        started_at: Some(at),
        finished_at: (i % 2 == 1).then_some(at),
        duration_ms: (i % 2 == 1).then_some(42),
        status_code: (i % 2 == 1).then_some(200),
        output: (i % 2 == 1).then(|| "{\"status\":\"ok\"}".to_string()),
        ..RunEvent::step(run_id, job.to_string(), kind, 1, scheduled_at, at)
    }
}

/// Publish `events` with pipelined acks; returns publishes per second.
async fn publish_all(
    js: &jetstream::Context,
    events: impl Iterator<Item = RunEvent>,
) -> anyhow::Result<(usize, f64)> {
    let started = Instant::now();
    let mut pending = std::collections::VecDeque::with_capacity(IN_FLIGHT);
    let mut count = 0;
    for e in events {
        let subject = format!("jetcron.runs.{}.{}", e.job_id, e.kind.as_str());
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, e.event_id.as_str());
        let payload = serde_json::to_vec(&e)?;
        pending.push_back(
            js.publish_with_headers(subject, headers, payload.into())
                .await?,
        );
        count += 1;
        if pending.len() >= IN_FLIGHT {
            if let Some(ack) = pending.pop_front() {
                ack.await.context("publish ack")?;
            }
        }
    }
    for ack in pending {
        ack.await.context("publish ack")?;
    }
    Ok((count, count as f64 / started.elapsed().as_secs_f64()))
}

async fn stored_rows(ch: &ClickHouseOptions) -> anyhow::Result<u64> {
    ch.client()
        .query("SELECT count() FROM jetcron.run_events")
        .fetch_one::<u64>()
        .await
        .context("count rows")
}

fn start_projector(
    nats: &NatsServer,
    ch: &ClickHouseOptions,
    batch_size: usize,
    batch_wait: Duration,
    stop: &CancellationToken,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    let mut config = jetcron_projector::ProjectorConfig::new(ch.clone());
    config.batch_size = batch_size;
    config.batch_wait = batch_wait;
    let url = nats.url();
    let stop = stop.clone();
    tokio::spawn(async move {
        let client = async_nats::connect(url).await?;
        jetcron_projector::run(config, client, stop).await
    })
}

async fn throughput(
    nats: &NatsServer,
    js: &jetstream::Context,
    ch: &ClickHouseOptions,
    events: usize,
    batch_size: usize,
) -> anyhow::Result<()> {
    let now = Utc::now();
    let payload_bytes = serde_json::to_vec(&event(1, now, "bench-job-0001"))?.len();
    eprintln!("publishing {events} run events");
    let (published, publish_rate) = publish_all(
        js,
        (0..events).map(|i| event(i, now, &format!("bench-job-{:04}", (i / 2) % 1000))),
    )
    .await?;
    let stop = CancellationToken::new();
    let started = Instant::now();
    let projector = start_projector(nats, ch, batch_size, Duration::from_millis(200), &stop);
    let mut progress = Vec::new();
    loop {
        let rows = stored_rows(ch).await?;
        let elapsed = started.elapsed();
        if progress
            .last()
            .is_none_or(|(t, _): &(Duration, u64)| elapsed - *t >= Duration::from_secs(2))
        {
            progress.push((elapsed, rows));
            eprintln!("{:>6.1}s {rows} rows", elapsed.as_secs_f64());
        }
        if rows >= published as u64 {
            break;
        }
        anyhow::ensure!(
            elapsed < Duration::from_secs(900),
            "projector too slow: {rows} rows after {elapsed:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = started.elapsed();
    stop.cancel();
    projector.await??;
    let runs: u64 = ch
        .client()
        .query("SELECT count() FROM jetcron.runs")
        .fetch_one()
        .await
        .context("count runs")?;
    println!("| measure | value |");
    println!("|---|---|");
    println!("| run events in the backlog | {published} |");
    println!("| payload bytes per event (JSON) | {payload_bytes} |");
    println!(
        "| raw JetStream publishes/s of the same events (4096 in flight) | {publish_rate:.0} |"
    );
    println!("| projector batch size | {batch_size} |");
    println!(
        "| time to store all of them | {:.1} s |",
        took.as_secs_f64()
    );
    println!(
        "| **projector rows/s into ClickHouse** | **{:.0}** |",
        published as f64 / took.as_secs_f64()
    );
    println!(
        "| ratio rows/s ÷ raw publishes/s | {:.2} |",
        published as f64 / took.as_secs_f64() / publish_rate
    );
    println!("| runs in the `jetcron.runs` view afterwards | {runs} |");
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn latency(
    nats: &NatsServer,
    js: &jetstream::Context,
    ch: &ClickHouseOptions,
    rate: usize,
    seconds: u64,
    batch_size: usize,
    batch_wait: Duration,
) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let projector = start_projector(nats, ch, batch_size, batch_wait, &stop);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Poll how far stored events reach: (poll time, newest stored `at`).
    let poll_stop = CancellationToken::new();
    let poller = {
        let client = ch.client();
        let stop = poll_stop.clone();
        tokio::spawn(async move {
            let mut seen: Vec<(i64, i64)> = Vec::new();
            while !stop.is_cancelled() {
                let newest: i64 = client
                    .query("SELECT max(at_ms) FROM jetcron.run_events WHERE job_id = 'latency'")
                    .fetch_one()
                    .await
                    .unwrap_or(0);
                seen.push((Utc::now().timestamp_millis(), newest));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            seen
        })
    };
    // Publish `rate` events per second in 10 ms ticks; `at` = publish time.
    let mut published: Vec<i64> = Vec::new();
    let tick = Duration::from_millis(10);
    let per_tick = (rate / 100).max(1);
    let mut interval = tokio::time::interval(tick);
    let mut i = 0;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        interval.tick().await;
        let mut acks = Vec::with_capacity(per_tick);
        for _ in 0..per_tick {
            let at = Utc::now();
            let e = event(i, at, "latency");
            i += 1;
            let subject = format!("jetcron.runs.latency.{}", e.kind.as_str());
            acks.push(js.publish(subject, serde_json::to_vec(&e)?.into()).await?);
            published.push(at.timestamp_millis());
        }
        for ack in acks {
            ack.await.context("publish ack")?;
        }
    }
    // Wait until the last one is stored.
    let last = *published.last().context("nothing published")?;
    let wait_until = Instant::now() + Duration::from_secs(60);
    loop {
        let newest: i64 = ch
            .client()
            .query("SELECT max(at_ms) FROM jetcron.run_events WHERE job_id = 'latency'")
            .fetch_one()
            .await?;
        if newest >= last || Instant::now() > wait_until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    poll_stop.cancel();
    let seen = poller.await?;
    stop.cancel();
    projector.await??;
    // Each event became queryable at the first poll whose newest `at` reached it.
    let mut delays = Vec::with_capacity(published.len());
    let mut cursor = 0;
    for at in &published {
        while cursor < seen.len() && seen[cursor].1 < *at {
            cursor += 1;
        }
        if let Some((polled, _)) = seen.get(cursor) {
            delays.push(polled - at);
        }
    }
    delays.sort_unstable();
    let pick = |q: f64| delays[((delays.len() as f64 - 1.0) * q).round() as usize];
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| events published | {} at {rate}/s for {seconds} s |",
        published.len()
    );
    println!("| projector batch size / wait | {batch_size} / {batch_wait:?} |");
    println!("| events measured | {} |", delays.len());
    println!("| publish → queryable p50 | {} ms |", pick(0.5));
    println!("| publish → queryable p99 | {} ms |", pick(0.99));
    println!(
        "| publish → queryable max | {} ms |",
        delays.last().copied().unwrap_or_default()
    );
    println!(
        "| poll interval (adds up to this much) | ~{} ms |",
        seen.windows(2).map(|w| w[1].0 - w[0].0).sum::<i64>() / (seen.len().max(2) as i64 - 1)
    );
    Ok(())
}
