//! The console's job table with many jobs in the bucket, against a real
//! nats-server and clickhouse-server (started here on free ports, like the
//! tests) and the gateway in-process.
//!
//! N jobs are written straight into `jetcron_jobs` (as `nats kv put` does,
//! pipelined); the gateway's catalog loads them from its watch. Then each
//! page is fetched `--rounds` times and timed end to end over HTTP (request
//! sent to last byte read): the first page, a page deep in the list, a label
//! filter, a text search, a sort by change time, a job's page, and the
//! gateway's `/healthz` on the same server as the floor. Prints a markdown
//! table for `docs/benchmarks.md`, and the bench process's resident memory
//! before and after the catalog loaded (the catalog's cost per job).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use jetcron_loadtest::percentile;
use jetcron_testkit::{Stack, StackOptions};

#[derive(Parser)]
#[command(about = "console job table with N jobs in the bucket")]
struct Cli {
    #[arg(long, default_value_t = 100_000)]
    jobs: usize,
    #[arg(long, default_value_t = 20)]
    rounds: usize,
}

/// Unacknowledged publishes at most.
const IN_FLIGHT: usize = 4096;

fn rss_bytes() -> u64 {
    jetcron_loadtest::status_bytes("self", "VmRSS:").unwrap_or(0)
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut options = StackOptions::api_only();
    options.limits.max_jobs = cli.jobs * 2;
    let stack = Stack::start(options).await;
    let rss_empty = rss_bytes();

    // Write the jobs into the bucket, as `nats kv put` does.
    let started = Instant::now();
    let mut acks = Vec::with_capacity(IN_FLIGHT);
    for i in 0..cli.jobs {
        let team = ["billing", "search", "ops", "data"][i % 4];
        let value = format!(
            r#"{{"id":"job-{i:06}","schedule":"{} */5 * * * *","timezone":"Europe/Berlin","description":"report {i} for {team}","labels":{{"team":"{team}","tier":"t{}"}},"target":{{"type":"nats","subject":"svc.report.{i}"}}}}"#,
            i % 60,
            i % 10
        );
        let ack = stack
            .js
            .publish(format!("$KV.jetcron_jobs.job-{i:06}"), value.into())
            .await
            .context("publish job")?;
        acks.push(ack);
        if acks.len() >= IN_FLIGHT {
            for ack in acks.drain(..) {
                ack.await.context("ack")?;
            }
        }
    }
    for ack in acks {
        ack.await.context("ack")?;
    }
    let written = started.elapsed();

    // Wait until the table lists them all.
    let wanted = format!("of {}.", cli.jobs);
    let loading = Instant::now();
    loop {
        let body = stack
            .http
            .get(format!("{}/ui/jobs", stack.http_base))
            .send()
            .await?
            .text()
            .await?;
        if body.contains(&wanted) {
            break;
        }
        anyhow::ensure!(
            loading.elapsed() < Duration::from_secs(600),
            "the table never listed {} jobs",
            cli.jobs
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let loaded = loading.elapsed();
    let rss_loaded = rss_bytes();

    let deep = cli.jobs / 50 / 2;
    let pages = [
        ("`/healthz` (floor)", "/healthz".to_string()),
        ("first page", "/ui/jobs".to_string()),
        (
            "page in the middle",
            format!("/ui/jobs?page={}", deep.max(1)),
        ),
        (
            "label filter",
            "/ui/jobs?labels=team%3Dsearch,tier%3Dt3".to_string(),
        ),
        ("text search", "/ui/jobs?q=report+4242".to_string()),
        (
            "sorted by change, newest first",
            "/ui/jobs?sort=updated&dir=desc".to_string(),
        ),
        ("one job's page", "/ui/jobs/job-004242".to_string()),
        ("overview", "/ui/".to_string()),
    ];
    println!(
        "{} jobs written in {:.1} s ({:.0}/s); the catalog listed them {:.1} s later",
        cli.jobs,
        written.as_secs_f64(),
        cli.jobs as f64 / written.as_secs_f64(),
        loaded.as_secs_f64()
    );
    println!(
        "bench process RSS: {:.0} MiB before, {:.0} MiB after the catalog loaded ({:.0} B/job; includes the gateway's other caches)",
        rss_empty as f64 / 1048576.0,
        rss_loaded as f64 / 1048576.0,
        (rss_loaded.saturating_sub(rss_empty)) as f64 / cli.jobs as f64
    );
    println!();
    println!("| page | p50 ms | p95 ms | max ms | bytes |");
    println!("|---|---|---|---|---|");
    for (name, path) in pages {
        let mut times = Vec::with_capacity(cli.rounds);
        let mut bytes = 0;
        for _ in 0..cli.rounds {
            let start = Instant::now();
            let response = stack
                .http
                .get(format!("{}{path}", stack.http_base))
                .send()
                .await?;
            anyhow::ensure!(
                response.status().is_success(),
                "{path}: {}",
                response.status()
            );
            bytes = response.bytes().await?.len();
            times.push(start.elapsed());
        }
        times.sort();
        println!(
            "| {name} | {} | {} | {} | {bytes} |",
            ms(percentile(&times, 50.0)),
            ms(percentile(&times, 95.0)),
            ms(*times.last().unwrap_or(&Duration::ZERO))
        );
    }
    stack.stop().await;
    Ok(())
}
