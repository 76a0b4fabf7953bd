//! `e2e-bench replicas`: what each ticker replica holds, and how fast a dead
//! one's shards are loaded again.
//!
//! N daily jobs (as in [`crate::memory`]) and one canary per shard due
//! every second, R `jetcron ticker` processes on one nats-server. It prints,
//! in one invocation:
//! - each replica's resident memory at peak (its start, when it still holds
//!   every shard) and at rest, once it holds only the shards it owns;
//! - after a SIGKILL of one replica: how long until every shard is planned
//!   again, and what the survivors' passes over the bucket took (the lease
//!   TTL, 5 s, is the bound the issue sets);
//! - then the survivors' memory again;
//! - the canaries' due events over the whole run, read back from
//!   `JETCRON_DUE`: every instant stored once, and how late the latest was
//!   stored against its instant (the tickers store `--lookahead` ahead, so
//!   on time is negative).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream;
use chrono::{DateTime, Utc};
use jetcron_core::events::DueEvent;
use jetcron_core::subjects;
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_loadtest::status_bytes;
use jetcron_testkit::{last_logged_number, without_colour_codes, JetcronProcess, NatsServer};
use jetcron_ticker::shards::{shard_of, SHARDS};

#[derive(clap::Args, Clone)]
pub struct ReplicasArgs {
    #[arg(long, default_value_t = 1_000_000)]
    jobs: usize,
    #[arg(long, default_value_t = 1_440)]
    distinct_lines: usize,
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// The jetcron binary (default: beside this one).
    #[arg(long)]
    jetcron: Option<std::path::PathBuf>,
    /// Write each replica's log here (`r<N>.log`).
    #[arg(long)]
    keep_logs: Option<std::path::PathBuf>,
}

const DROPPED: &str = "jobs of shards owned elsewhere dropped";
/// Logged once the dropped jobs are freed and the kept ones moved.
const LET_GO: &str = "dropped jobs let go";

/// One canary id per shard.
fn canaries() -> Vec<String> {
    (0..SHARDS)
        .map(|shard| {
            (0..)
                .map(|i| format!("canary-{i}"))
                .find(|id| shard_of(id) == shard)
                .expect("an id in every shard")
        })
        .collect()
}

pub async fn measure(args: &ReplicasArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.replicas >= 2, "--replicas must be at least 2");
    let jetcron = crate::jetcron_binary(args.jetcron.as_deref())?;
    let nats = NatsServer::start();
    let client = nats.client().await;
    let js = jetstream::new(client.clone());
    topology::ensure_jobs_bucket(&js, &TopologyOptions::default()).await?;
    let distinct = args.distinct_lines;
    jetcron_loadtest::put_jobs(
        &js,
        0..args.jobs,
        |i| format!("rep-{i:07}"),
        |i| {
            format!(
                r#"{{"schedule":"{}","target":{{"type":"nats","subject":"bench.none"}}}}"#,
                crate::memory::daily_line(i, distinct)
            )
        },
    )
    .await?;
    let canaries = canaries();
    jetcron_loadtest::put_jobs(
        &js,
        0..canaries.len(),
        |i| canaries[i].clone(),
        |_| r#"{"schedule":"* * * * * *","target":{"type":"nats","subject":"bench.none"}}"#.into(),
    )
    .await?;
    let jobs = args.jobs + canaries.len();
    let started_at = Utc::now();
    let mut replicas: Vec<JetcronProcess> = (0..args.replicas)
        .map(|r| {
            JetcronProcess::start(
                &jetcron,
                &["ticker", "--replica-id", &format!("r{r}")],
                &[("JETCRON_NATS_URL", nats.url().as_str())],
            )
        })
        .collect();
    let settling = Instant::now();
    // Every replica has dropped what it does not own, and the owners cover
    // every shard.
    loop {
        if settling.elapsed() > Duration::from_secs(1_800) {
            keep_logs(&replicas, args.keep_logs.as_deref())?;
            anyhow::bail!("the replicas did not settle within 1,800 s");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let dropped = replicas.iter().all(|p| p.log().contains(LET_GO));
        let held: usize = replicas.iter().map(|p| count_held(&p.log())).sum();
        if dropped && held == jobs {
            break;
        }
    }
    let settled_in = settling.elapsed();
    // Freed memory goes back to the OS after a while (the allocator's purge delay).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let before: Vec<Memory> = replicas.iter().map(memory_of).collect::<Result<_, _>>()?;
    let held: Vec<usize> = replicas.iter().map(|p| count_held(&p.log())).collect();
    let let_go: Vec<Vec<String>> = replicas
        .iter()
        .map(|p| lines_with(&p.log(), LET_GO))
        .collect();
    // Leases lost before the kill: each one cost its next owner a pass.
    let churn: Vec<(usize, usize)> = replicas
        .iter()
        .map(|p| {
            let log = p.log();
            (
                count(&log, "shard lost"),
                count(&log, "ownership round failed"),
            )
        })
        .collect();

    let killed = Instant::now();
    let killed_at = Utc::now();
    let scheduled_before: Vec<usize> = replicas
        .iter()
        .map(|p| count(&p.log(), "shard scheduling"))
        .collect();
    replicas[0].kill_9();
    let survivors = &replicas[1..];
    let orphaned = owned_count(&replicas[0].log());
    let replanned_in = loop {
        anyhow::ensure!(
            killed.elapsed() < Duration::from_secs(1_800),
            "the dead replica's shards were not planned again within 1,800 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let again: usize = survivors
            .iter()
            .zip(&scheduled_before[1..])
            .map(|(p, before)| count(&p.log(), "shard scheduling") - before)
            .sum();
        if again >= orphaned {
            break killed.elapsed();
        }
    };
    // Shards may still move between the survivors (one took the dead
    // one's beyond its share and hands some on): wait until every canary
    // fires again, each shard planned by someone.
    let every_shard_firing_in = loop {
        anyhow::ensure!(
            killed.elapsed() < Duration::from_secs(1_800),
            "not every shard fired again within 1,800 s of the kill"
        );
        if every_canary_fired_since(&js, &canaries, Utc::now() - chrono::Duration::seconds(3)).await
        {
            break killed.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    tokio::time::sleep(Duration::from_secs(15)).await;
    // Every pass since the kill, those of shards handed on included.
    let passes: Vec<String> = survivors
        .iter()
        .flat_map(|p| lines_with(&p.log(), "shards loaded"))
        .collect();
    let after: Vec<Memory> = survivors.iter().map(memory_of).collect::<Result<_, _>>()?;
    let held_after: Vec<usize> = survivors.iter().map(|p| count_held(&p.log())).collect();
    let ended_at = Utc::now();
    keep_logs(&replicas, args.keep_logs.as_deref())?;
    drop(replicas);
    let arrivals = stored_canary_fires(&js).await?;

    let mib = |bytes: u64| bytes as f64 / 1_048_576.0;
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| jobs | {jobs} ({} daily, {distinct} distinct lines; {} canaries every second, one per shard) |",
        args.jobs,
        canaries.len()
    );
    println!(
        "| {} `jetcron ticker` replicas: start → each holds only its own shards | {:.1} s |",
        args.replicas,
        settled_in.as_secs_f64()
    );
    for (r, (memory, held)) in before.iter().zip(&held).enumerate() {
        println!(
            "| r{r}: jobs held; peak (VmHWM); at rest (VmRSS) | {held}; {:.0} MiB ({:.0} B per job of the bucket); {:.0} MiB ({:.0} B per job held) |",
            mib(memory.peak),
            memory.peak as f64 / jobs as f64,
            mib(memory.resident),
            memory.resident as f64 / (*held).max(1) as f64,
        );
    }
    for (r, (lines, (lost, failed))) in let_go.iter().zip(&churn).enumerate() {
        println!(
            "| r{r}: letting go of dropped jobs; shards lost, ownership rounds failed (logged) before the kill | {}; {lost}, {failed} |",
            lines.join("; ")
        );
    }
    println!(
        "| SIGKILL of r0 → its {orphaned} shards planned again by the others | {:.2} s |",
        replanned_in.as_secs_f64()
    );
    println!(
        "| SIGKILL of r0 → every shard's canary stored again | {:.2} s |",
        every_shard_firing_in.as_secs_f64()
    );
    for pass in &passes {
        println!("| pass (survivor's log) | {pass} |");
    }
    for (r, (memory, held)) in after.iter().zip(&held_after).enumerate() {
        println!(
            "| r{}: after the takeover, jobs held; at rest (VmRSS) | {held}; {:.0} MiB ({:.0} B per job held) |",
            r + 1,
            mib(memory.resident),
            memory.resident as f64 / (*held).max(1) as f64,
        );
    }
    print_canaries(&arrivals, started_at, killed_at, ended_at);
    Ok(())
}

/// Every canary instant from the first stored to the end: stored once,
/// and the latest arrival against its instant, before and after the kill.
fn print_canaries(
    arrivals: &[(String, DateTime<Utc>, DateTime<Utc>)],
    started_at: DateTime<Utc>,
    killed_at: DateTime<Utc>,
    ended_at: DateTime<Utc>,
) {
    let mut by_instant: BTreeMap<(String, i64), Vec<DateTime<Utc>>> = BTreeMap::new();
    for (job, scheduled, arrived) in arrivals {
        by_instant
            .entry((job.clone(), scheduled.timestamp()))
            .or_default()
            .push(*arrived);
    }
    // Each canary from its own first fire: the shards are created one by
    // one at the start, and a second may begin in between (nothing is
    // owed before a new shard's creation).
    let first_of = |job: &String| {
        by_instant
            .keys()
            .filter(|(j, _)| j == job)
            .map(|(_, t)| *t)
            .min()
            .unwrap_or(started_at.timestamp())
    };
    // Instants until 3 s before the end (the last ones may still be on their way).
    let last = ended_at.timestamp() - 3;
    let canaries: std::collections::BTreeSet<&String> = by_instant.keys().map(|(j, _)| j).collect();
    let mut missing = 0;
    let mut twice = 0;
    let mut latest_before = i64::MIN;
    let mut latest_after = i64::MIN;
    let mut instants = 0;
    for job in &canaries {
        let first = first_of(job);
        instants += (last - first + 1).max(0);
        for t in first..=last {
            match by_instant.get(&((*job).clone(), t)) {
                None => {
                    missing += 1;
                    eprintln!(
                        "missing: {job} (shard {}) at {t}, {:+.1} s from the kill",
                        shard_of(job),
                        t as f64 - killed_at.timestamp_millis() as f64 / 1000.0
                    );
                }
                Some(arrived) => {
                    twice += usize::from(arrived.len() > 1);
                    let late = (arrived[0].timestamp_millis()) - t * 1000;
                    if t * 1000 < killed_at.timestamp_millis() {
                        latest_before = latest_before.max(late);
                    } else {
                        latest_after = latest_after.max(late);
                    }
                }
            }
        }
    }
    println!(
        "| canaries: instants from each one's first to the end | {} canaries, {instants} instants; missing {missing}, stored twice {twice} |",
        canaries.len(),
    );
    println!(
        "| canaries: latest due event against its instant (negative: ahead) | before the kill {latest_before} ms, after it {latest_after} ms |"
    );
}

/// Whether each canary's last due event is scheduled at or after `since`.
async fn every_canary_fired_since(
    js: &jetstream::Context,
    canaries: &[String],
    since: DateTime<Utc>,
) -> bool {
    let Ok(stream) = js.get_stream(subjects::DUE_STREAM).await else {
        return false;
    };
    for canary in canaries {
        let Ok(message) = stream
            .get_last_raw_message_by_subject(&subjects::due_subject("default", canary))
            .await
        else {
            return false;
        };
        match serde_json::from_slice::<DueEvent>(&message.payload) {
            Ok(event) if event.scheduled_at >= since => {}
            _ => return false,
        }
    }
    true
}

/// Every canary fire in `JETCRON_DUE`: (job, scheduled time, store time),
/// each copy stored (a copy JetStream dropped as a duplicate is not). The
/// stream is a work queue nobody consumes here: read by sequence.
async fn stored_canary_fires(
    js: &jetstream::Context,
) -> anyhow::Result<Vec<(String, DateTime<Utc>, DateTime<Utc>)>> {
    let mut stream = js.get_stream(subjects::DUE_STREAM).await?;
    let state = stream.info().await?.state.clone();
    let mut fires = Vec::new();
    if state.messages == 0 {
        return Ok(fires);
    }
    for sequence in state.first_sequence..=state.last_sequence {
        let Ok(message) = stream.get_raw_message(sequence).await else {
            continue;
        };
        if let Ok(event) = serde_json::from_slice::<DueEvent>(&message.payload) {
            if event.job_id.starts_with("canary-") {
                fires.push((event.job_id, event.scheduled_at, message.time));
            }
        }
    }
    Ok(fires)
}

#[derive(Debug, Clone, Copy)]
struct Memory {
    resident: u64,
    peak: u64,
}

fn memory_of(process: &JetcronProcess) -> anyhow::Result<Memory> {
    let pid = process.pid().context("replica not running")?.to_string();
    Ok(Memory {
        resident: status_bytes(&pid, "VmRSS:")?,
        peak: status_bytes(&pid, "VmHWM:")?,
    })
}

fn lines_with(log: &str, message: &str) -> Vec<String> {
    without_colour_codes(log)
        .lines()
        .filter(|line| line.contains(message))
        .map(|line| {
            line.split_once("INFO ")
                .map_or(line, |(_, l)| l)
                .to_string()
        })
        .collect()
}

/// Write each replica's log into `dir`, if given.
fn keep_logs(replicas: &[JetcronProcess], dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    let Some(dir) = dir else { return Ok(()) };
    std::fs::create_dir_all(dir)?;
    for (r, process) in replicas.iter().enumerate() {
        std::fs::write(
            dir.join(format!("r{r}.log")),
            without_colour_codes(&process.log()),
        )?;
    }
    Ok(())
}

fn count(log: &str, message: &str) -> usize {
    without_colour_codes(log).matches(message).count()
}

/// How many shards the dead replica owned: the shards it logged as
/// acquired, less those it released or lost, as its log tells.
fn owned_count(log: &str) -> usize {
    let log = without_colour_codes(log);
    let mut owned = std::collections::BTreeSet::new();
    for line in log.lines() {
        let shard = line
            .split_once(" shard=")
            .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|s| s.parse::<u32>().ok());
        let Some(shard) = shard else { continue };
        if line.contains("shard acquired") {
            owned.insert(shard);
        } else if line.contains("shard released") || line.contains("shard lost") {
            owned.remove(&shard);
        }
    }
    owned.len()
}

/// Jobs a replica holds now, as its log tells: what it held when it last
/// dropped shards, plus what its passes loaded since.
fn count_held(log: &str) -> usize {
    let log = without_colour_codes(log);
    let Some(at) = log.rfind(DROPPED) else {
        return 0;
    };
    let dropped_line_end = log[at..].find('\n').map_or(log.len(), |n| at + n);
    let held = last_logged_number(&log[..dropped_line_end], DROPPED, "held").unwrap_or(0);
    let loaded: usize = log[dropped_line_end..]
        .lines()
        .filter(|line| line.contains("shards loaded"))
        .filter_map(|line| last_logged_number(line, "shards loaded", "jobs"))
        .sum();
    held + loaded
}
