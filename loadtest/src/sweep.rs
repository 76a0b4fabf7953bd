//! `e2e-bench sweep`: precision at every load below saturation (issue 44).
//!
//! One `run` at one rate says how late calls are at that rate only; whether
//! jetcron is precise *below* saturation, and where saturation is, takes
//! several rates measured the same way in the same invocation, each beside
//! the floors of this machine at that rate. So the sweep measures each rate
//! of `--rates` (jobs firing every second: fires a second), then searches
//! for the highest rate kept up with, and prints one table of them all.
//!
//! Each rate, a *point*, on fresh servers: the wire floor at that rate
//! ([`wire_floor::floor`]: the leanest client doing a run's wire
//! operations, which deletes its streams when done), then [`crate::run`],
//! which measures the ideal sender's burst of the same size first and
//! reads the due backlog at the start and at the end of its window, then
//! (at the rates of `--rates`) nats-server's own message schedules, as
//! many as jobs, on the same server ([`server_schedules`]).
//!
//! Fresh servers per point, because a point that fell behind leaves
//! thousands of due events queued, its jobs in the bucket and its runs in
//! ClickHouse: none of that may weigh on the next point. Starting them
//! costs a few seconds per point.
//!
//! A rate is *kept up with* when the target received at least 98 % of the
//! fires offered a second over the window, and the due backlog at the
//! window's end is at most one second's fires above its start (where the
//! ticker is in storing a second's fires ahead of their time moves a
//! whole-second reading by up to that much).
//!
//! The search goes from the highest rate kept up with to the lowest above
//! it that was not (or past `--max-rate`), halving the gap in `--step`s
//! until no untried step is left; it takes a rate above one not kept up with
//! as not kept up with either.
//!
//! `e2e-bench sweep --seconds 10 --warmup 5 --jetcron-args --max-in-flight 16384`

use std::path::PathBuf;

use anyhow::Context as _;
use jetcron_loadtest::percentile;

use async_nats::jetstream;

use crate::{ms, server_schedules, wire_floor, RunArgs, RunFigures, Servers};

/// The share of the fires offered a second the target must receive.
const KEPT_UP_SHARE: f64 = 0.98;

#[derive(clap::Args, Clone)]
pub struct SweepArgs {
    /// Fires a second measured first (jobs firing every second).
    #[arg(long, value_delimiter = ',', default_values_t = [1_000, 3_000, 5_000, 8_000])]
    rates: Vec<usize>,
    /// Seconds measured at each rate, after the warm-up.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    #[arg(long, default_value_t = 10)]
    warmup: u64,
    /// The highest rate the search for the rate kept up with tries.
    #[arg(long, default_value_t = 14_000)]
    max_rate: usize,
    /// The search's resolution, in fires a second.
    #[arg(long, default_value_t = 1_000)]
    step: usize,
    /// Runs the wire floor's worker has out at once.
    #[arg(long, default_value_t = wire_floor::FLOOR_IN_FLIGHT)]
    floor_in_flight: usize,
    /// The jetcron binary (default: beside this one).
    #[arg(long)]
    jetcron: Option<PathBuf>,
    /// Extra arguments of `jetcron all` at every rate (e.g.
    /// `--max-in-flight 16384`); last, as it takes the rest of the line.
    #[arg(long, allow_hyphen_values = true, num_args = 1..)]
    jetcron_args: Vec<String>,
}

impl SweepArgs {
    /// `run`'s arguments at `rate` fires a second.
    fn run_args(&self, rate: usize) -> RunArgs {
        RunArgs {
            jobs: rate,
            seconds: self.seconds,
            warmup: self.warmup,
            jetcron: self.jetcron.clone(),
            jetcron_args: self.jetcron_args.clone(),
            log_filter: None,
            keep_log: None,
            per_second: false,
            trace_jobs: 0,
        }
    }
}

/// Due events queued at the start and at the end of `run`'s window.
#[derive(Debug, Clone, Copy)]
struct WindowBacklog {
    at_start: u64,
    at_end: u64,
}

/// What one rate measured.
struct Point {
    rate: usize,
    jetcron: RunFigures,
    /// nats-server's own message schedules at the same rate on the same
    /// server, after `run` (the rates of `--rates` only).
    schedules: Option<server_schedules::StoredFires>,
    floor: wire_floor::FloorFigures,
    backlog: WindowBacklog,
}

impl Point {
    fn kept_up(&self) -> bool {
        kept_up(self.rate, self.jetcron.runs_per_second, self.backlog)
    }
}

pub async fn measure(args: &SweepArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.step > 0, "--step 0: the search would not move");
    anyhow::ensure!(!args.rates.is_empty(), "no --rates to measure");
    let mut points = Vec::new();
    for &rate in &args.rates {
        points.push(measure_point(args, rate, BesideSchedules::Yes).await?);
    }
    while let Some(rate) = next_rate(&outcomes(&points), args.step, args.max_rate) {
        points.push(measure_point(args, rate, BesideSchedules::No).await?);
    }
    points.sort_by_key(|point| point.rate);
    print_summary(args, &points);
    Ok(())
}

/// Whether a point also measures nats-server's message schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BesideSchedules {
    Yes,
    No,
}

/// The wire floor, `run` (with its ideal sender) and, when asked, the
/// server's own schedules at `rate` fires a second, each printing its
/// table.
async fn measure_point(
    args: &SweepArgs,
    rate: usize,
    beside: BesideSchedules,
) -> anyhow::Result<Point> {
    let run_args = args.run_args(rate);
    println!("\n## {rate} fires a second\n");
    let servers = Servers::start();
    println!("\n### Wire floor\n");
    let floor = wire_floor::floor(&servers, &run_args, args.floor_in_flight)
        .await
        .with_context(|| format!("the wire floor at {rate} fires a second"))?;
    println!("\n### jetcron all\n");
    let jetcron = crate::run(&servers, &run_args)
        .await
        .with_context(|| format!("run at {rate} fires a second"))?;
    let schedules = match beside {
        BesideSchedules::Yes => {
            println!("\n### nats-server message schedules, same server\n");
            let js = jetstream::new(servers.nats.client().await);
            let stored = server_schedules::measure(&js, rate, args.warmup, args.seconds)
                .await
                .with_context(|| format!("the server's schedules at {rate} a second"))?;
            println!(
                "| stored − scheduled p50 / p99 / max | {:.1} / {:.1} / {:.1} ms ({} fires, {} early) |",
                ms(percentile(&stored.lags_us, 50.0)),
                ms(percentile(&stored.lags_us, 99.0)),
                ms(stored.lags_us.last().copied().unwrap_or(0)),
                stored.lags_us.len(),
                stored.early
            );
            Some(stored)
        }
        BesideSchedules::No => None,
    };
    let backlog = WindowBacklog {
        at_start: jetcron.due_backlog_at_start,
        at_end: jetcron.due_backlog_at_end,
    };
    let point = Point {
        rate,
        jetcron,
        schedules,
        floor,
        backlog,
    };
    println!(
        "\nkept up with {rate} fires a second: {} ({:.0} runs/s at the target, due backlog {} → {})",
        yes_no(point.kept_up()),
        point.jetcron.runs_per_second,
        backlog.at_start,
        backlog.at_end
    );
    Ok(point)
}

/// Whether `rate` fires a second were kept up with: the target received at
/// least [`KEPT_UP_SHARE`] of them a second, and the due backlog grew by at
/// most one second's fires over the window.
fn kept_up(rate: usize, runs_per_second: f64, backlog: WindowBacklog) -> bool {
    let received_enough = runs_per_second >= rate as f64 * KEPT_UP_SHARE;
    let backlog_held = backlog.at_end <= backlog.at_start + rate as u64;
    received_enough && backlog_held
}

/// Each point's rate and whether it was kept up with.
fn outcomes(points: &[Point]) -> Vec<(usize, bool)> {
    points.iter().map(|p| (p.rate, p.kept_up())).collect()
}

/// The highest rate kept up with, if any.
fn highest_kept_up(outcomes: &[(usize, bool)]) -> Option<usize> {
    outcomes
        .iter()
        .filter(|(_, kept_up)| *kept_up)
        .map(|(rate, _)| *rate)
        .max()
}

/// The next rate the search measures: the middle untried step between the
/// highest rate kept up with (or none) and the lowest above it that was
/// not (or past `max_rate`); none when no step is left between them.
fn next_rate(outcomes: &[(usize, bool)], step: usize, max_rate: usize) -> Option<usize> {
    let kept_up = highest_kept_up(outcomes).unwrap_or(0);
    let fell_behind = outcomes
        .iter()
        .filter(|(rate, kept)| !kept && *rate > kept_up)
        .map(|(rate, _)| *rate)
        .min()
        .unwrap_or(usize::MAX);
    let limit = fell_behind.min(max_rate.saturating_add(1));
    let untried_steps = limit.saturating_sub(kept_up).saturating_sub(1) / step;
    (untried_steps > 0).then(|| kept_up + untried_steps.div_ceil(2) * step)
}

fn print_summary(args: &SweepArgs, points: &[Point]) {
    println!(
        "\n## Sweep: {} s measured after {} s warm-up at each rate; jetcron all {}\n",
        args.seconds,
        args.warmup,
        args.jetcron_args.join(" ")
    );
    println!(
        "| fires/s offered | runs/s at the target | target-call p50 / p99 / max ms \
         | ideal sender p99 ms | p99 ÷ ideal p99 | NATS schedules stored p99 ms \
         | wire floor runs/s, p99 ms | calls > 1 ms early | due backlog start → end | kept up |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for point in points {
        println!("{}", summary_row(point));
    }
    let highest = highest_kept_up(&outcomes(points));
    println!(
        "\nhighest rate kept up with: {} (searched in steps of {} up to {})",
        highest.map_or("none measured".to_string(), |rate| format!(
            "{rate} fires a second"
        )),
        args.step,
        args.max_rate
    );
}

fn summary_row(point: &Point) -> String {
    let lags = &point.jetcron.lags;
    let ideal_p99 = percentile(&point.jetcron.ideal_lags, 99.0);
    format!(
        "| {} | {:.0} | {:.1} / {:.1} / {:.1} | {:.1} | {:.2} | {} | {:.0}, {:.1} | {} | {} → {} | {} |",
        point.rate,
        point.jetcron.runs_per_second,
        ms(percentile(lags, 50.0)),
        ms(percentile(lags, 99.0)),
        ms(lags.last().copied().unwrap_or(0)),
        ms(ideal_p99),
        percentile(lags, 99.0) as f64 / ideal_p99.max(1) as f64,
        point.schedules.as_ref().map_or("-".to_string(), |stored| format!(
            "{:.1}",
            ms(percentile(&stored.lags_us, 99.0))
        )),
        point.floor.runs_per_second,
        ms(percentile(&point.floor.lags, 99.0)),
        lags.iter().filter(|lag| **lag < -1000).count(),
        point.backlog.at_start,
        point.backlog.at_end,
        yes_no(point.kept_up()),
    )
}

fn yes_no(yes: bool) -> &'static str {
    if yes {
        "yes"
    } else {
        "no"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backlog(at_start: u64, at_end: u64) -> WindowBacklog {
        WindowBacklog { at_start, at_end }
    }

    #[test]
    fn kept_up_takes_enough_runs_and_a_backlog_that_held() {
        assert!(kept_up(5_000, 4_950.0, backlog(9_000, 13_900)));
        assert!(!kept_up(5_000, 4_850.0, backlog(9_000, 9_000)), "97 %");
        assert!(!kept_up(5_000, 5_000.0, backlog(9_000, 14_001)), "grew");
    }

    #[test]
    fn the_search_halves_the_gap_above_the_highest_rate_kept_up_with() {
        let mut outcomes = vec![(1_000, true), (3_000, true), (5_000, true), (8_000, false)];
        assert_eq!(next_rate(&outcomes, 1_000, 14_000), Some(6_000));
        outcomes.push((6_000, true));
        assert_eq!(next_rate(&outcomes, 1_000, 14_000), Some(7_000));
        outcomes.push((7_000, false));
        assert_eq!(next_rate(&outcomes, 1_000, 14_000), None);
        assert_eq!(highest_kept_up(&outcomes), Some(6_000));
    }

    #[test]
    fn the_search_stops_at_the_cap_and_below_the_first_rate() {
        let all_kept = [(1_000, true), (8_000, true)];
        assert_eq!(next_rate(&all_kept, 1_000, 14_000), Some(11_000));
        assert_eq!(next_rate(&[(14_000, true)], 1_000, 14_000), None);
        let none_kept = [(1_000, false), (3_000, false)];
        assert_eq!(next_rate(&none_kept, 1_000, 14_000), None);
        assert_eq!(highest_kept_up(&none_kept), None);
        assert_eq!(next_rate(&none_kept, 250, 14_000), Some(500));
    }
}
