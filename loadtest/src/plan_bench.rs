//! What a shard's fire plan costs in memory per job over days of firing,
//! in this process alone (no server).
//!
//! `e2e-bench memory` measures the whole `jetcron all` within a minute or
//! so of its start, when the plan's queue is as it was built. A queue of
//! daily jobs changes completely every day: each job's fire is taken from
//! the front and its next one put at the end, and a B-tree churned that
//! way settles at a looser fill than it was built with. This bench plans
//! one shard's jobs ([`FirePlan::plan_all`], as a cold start does), then
//! fires them through simulated days and prints the heap the plan holds
//! per job at each point, beside a plain `BTreeSet` of the same 16-byte
//! keys churned the same way (the queue before it was packed again).
//!
//! ```text
//! cargo run --release -p jetcron-loadtest --bin plan-bench -- --jobs 62500 --days 2
//! ```

use std::alloc::System;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use clap::Parser;
use jetcron_ticker::compact_job::HeldJob;
use jetcron_ticker::plan::FirePlan;
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

/// The system allocator, counting the bytes held (`stats_alloc`: no
/// `unsafe` here).
#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[derive(Parser)]
#[command(about = "a shard's fire plan: heap per job over days of daily fires")]
struct Cli {
    /// Jobs in the shard (62,500: a shard of a million jobs).
    #[arg(long, default_value_t = 62_500)]
    jobs: usize,
    /// Distinct daily schedule lines (`0 M H * * *`).
    #[arg(long, default_value_t = 1440)]
    distinct_lines: usize,
    /// Days fired through.
    #[arg(long, default_value_t = 2)]
    days: i64,
}

/// Bytes allocated and not freed, process-wide.
fn held_bytes() -> isize {
    let stats = ALLOCATOR.stats();
    // A reallocation counts its growth as allocated, its shrinking as
    // freed.
    stats.bytes_allocated as isize - stats.bytes_deallocated as isize
}

/// Bytes per job at each point of the run: planned, then the least and
/// the most of each 6 hours (read every simulated minute: the queue is
/// packed again a quarter of the way through its keys, every 6 hours for
/// daily jobs, so a reading once per 6 hours would only see it packed).
type Points = Vec<(String, f64, f64)>;

/// The heap per job read through a run, from what was held before it.
struct Readings {
    before: isize,
    jobs: usize,
    points: Points,
    /// This window's (least, most) so far.
    window: Option<(f64, f64)>,
}

impl Readings {
    /// Readings of `jobs` jobs from what is held now.
    fn start(jobs: usize) -> Self {
        Self {
            before: held_bytes(),
            jobs,
            points: Vec::new(),
            window: None,
        }
    }

    fn per_job(&self) -> f64 {
        (held_bytes() - self.before) as f64 / self.jobs as f64
    }

    /// The jobs are planned: the first point.
    fn planned(&mut self) {
        let bytes = self.per_job();
        self.points
            .push(("planned (a cold start)".to_string(), bytes, bytes));
    }

    /// A reading at the end of simulated `minute`; every 6 hours closes a
    /// window.
    fn read(&mut self, minute: i64) {
        let bytes = self.per_job();
        let (least, most) = self.window.get_or_insert((bytes, bytes));
        *least = least.min(bytes);
        *most = most.max(bytes);
        if minute % 360 == 0 {
            let (least, most) = self.window.take().unwrap_or_default();
            let hours = format!("hours {}-{}", minute / 60 - 6, minute / 60);
            self.points.push((hours, least, most));
        }
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let start: DateTime<Utc> = Utc
        .with_ymd_and_hms(2026, 1, 5, 0, 0, 30)
        .single()
        .expect("an instant");
    // Jobs spread over the lines in no order, as ids spread over shards.
    let order: Vec<usize> = (0..cli.jobs)
        .map(|i| i.wrapping_mul(2_654_435_761) % cli.jobs)
        .collect();
    let (plan_points, fired, churn_time) = run_plan(&cli, &order, start)?;
    let reference_points = run_reference(&cli, &order);

    println!(
        "| point | the plan's heap per job (whole plan), least-most | a plain B-tree of its keys (queue alone), least-most |"
    );
    println!("|---|---|---|");
    for ((point, plan_least, plan_most), (_, ref_least, ref_most)) in
        plan_points.iter().zip(&reference_points)
    {
        println!("| {point} | {plan_least:.1}-{plan_most:.1} B | {ref_least:.1}-{ref_most:.1} B |");
    }
    println!();
    println!(
        "{fired} fires taken and stored in {:.2} s ({:.0} ns a fire)",
        churn_time.as_secs_f64(),
        churn_time.as_nanos() as f64 / fired.max(1) as f64
    );
    Ok(())
}

/// The minute of the day job `i` fires at.
fn minute_of(i: usize, distinct: usize) -> usize {
    (i % distinct) * 1440 / distinct
}

/// Plan the jobs as a cold start does, then take and store every fire
/// through the days.
fn run_plan(
    cli: &Cli,
    order: &[usize],
    start: DateTime<Utc>,
) -> anyhow::Result<(Points, u64, Duration)> {
    let jobs: Vec<_> = order
        .iter()
        .map(|&i| {
            let minute = minute_of(i, cli.distinct_lines);
            let json = format!(
                r#"{{"id":"job-{i:07}","schedule":"0 {} {} * * *","target":{{"type":"nats","subject":"svc"}}}}"#,
                minute % 60,
                minute / 60
            );
            jetcron_core::job::parse_job(json.as_bytes(), None)
                .map_err(|e| anyhow::anyhow!("job {i}: {e:?}"))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut readings = Readings::start(cli.jobs);
    let mut plan = FirePlan::default();
    for job in &jobs {
        plan.hold(HeldJob::of(job, 1, start));
    }
    plan.plan_all(start, start, chrono::Duration::seconds(60));
    readings.planned();
    let mut fired: u64 = 0;
    let mut churn_time = Duration::ZERO;
    for minute in 1..=cli.days * 1440 {
        let now = start + chrono::Duration::minutes(minute);
        let began = Instant::now();
        loop {
            let fires = plan.take_due(now, 4096);
            if fires.is_empty() {
                break;
            }
            for fire in &fires {
                plan.fired(fire);
            }
            fired += fires.len() as u64;
        }
        churn_time += began.elapsed();
        readings.read(minute);
    }
    Ok((readings.points, fired, churn_time))
}

/// The same keys (fire instant, offset, slot) in a plain B-tree filled one
/// at a time in the jobs' order, each taken from the front and put back a
/// day later, never packed.
fn run_reference(cli: &Cli, order: &[usize]) -> Points {
    let mut readings = Readings::start(cli.jobs);
    let mut keys: BTreeSet<(i64, i32, u32)> = BTreeSet::new();
    for (slot, &i) in order.iter().enumerate() {
        let minute = minute_of(i, cli.distinct_lines) as i64;
        keys.insert((minute * 60_000, 0, slot as u32));
    }
    readings.planned();
    for minute in 1..=cli.days * 1440 {
        let due = minute * 60_000;
        while let Some(&key) = keys.first() {
            if key.0 >= due {
                break;
            }
            keys.pop_first();
            keys.insert((key.0 + 86_400_000, key.1, key.2));
        }
        readings.read(minute);
    }
    readings.points
}
