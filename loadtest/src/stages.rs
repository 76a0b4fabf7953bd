//! Where a fire's time goes between its instant and its call
//! (`e2e-bench run --trace-jobs N`): the executor marks the stages of the
//! traced jobs' attempts in its log (`jetcron_executor::stages`), and the
//! dispatcher of booked calls logs each instant's hand-over
//! (`jetcron_executor::instant_calls`); the target records when each of
//! their calls arrived. Read together, each stage is printed as its time
//! from the fire's scheduled instant (p50 / p99 / max over the window's
//! traced fires), then the whole way of the latest traced call.
//!
//! Only a few jobs are traced so that the log the trace needs does not
//! slow what it measures (at 5,000 fires/s every attempt's six lines
//! would be 30,000 a second).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use jetcron_executor::stages::Stage;
use jetcron_loadtest::percentile;

/// The job ids of the first `count` bench jobs (named as `load_jobs`
/// names them).
pub fn traced_jobs(count: usize, name: impl Fn(usize) -> String) -> HashSet<String> {
    (0..count).map(name).collect()
}

/// The `RUST_LOG` directives that log the stages of `jobs` and the
/// dispatcher's instants. A span's directive names the span's own target
/// (`jetcron_executor`), not the events' (`jetcron_executor::stages`):
/// tracing-subscriber matches a span filter's target against the span.
pub fn log_directives(jobs: &HashSet<String>) -> String {
    let mut names: Vec<String> = jobs.iter().map(|j| regex_escape(j)).collect();
    names.sort();
    format!(
        "jetcron_executor[run{{job_id=({})}}]=debug,jetcron_executor::instant_calls=debug",
        names.join("|")
    )
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(
            |c| match c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                true => vec![c],
                false => vec!['\\', c],
            },
        )
        .collect()
}

/// A traced job's call as its target saw it.
#[derive(Debug, Clone, Copy)]
pub struct TracedCall {
    pub scheduled: DateTime<Utc>,
    pub arrived: DateTime<Utc>,
}

/// Traced calls by run id.
pub type TracedCalls = Arc<Mutex<HashMap<String, TracedCall>>>;

/// One stage mark of the executor's log.
#[derive(Debug, Clone, PartialEq)]
struct Mark {
    at: DateTime<Utc>,
    run_id: String,
    stage: String,
}

/// A stage mark of a text log line
/// (`<time> DEBUG run{job_id=… run_id=… attempt=1}: stage stage="pulled"`).
fn mark_of(line: &str) -> Option<Mark> {
    let (_, stage) = line.split_once(": stage stage=\"")?;
    let stage = stage.strip_suffix('"')?;
    let at = line.split_whitespace().next()?.parse().ok()?;
    let run_id = line.split_once("run_id=")?.1.split([' ', '}']).next()?;
    Some(Mark {
        at,
        run_id: run_id.to_string(),
        stage: stage.to_string(),
    })
}

/// One instant's hand-over by the dispatcher, in microseconds: how late it
/// woke, how long handing the calls to the client took, and until they
/// were flushed to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HandOver {
    calls: u64,
    woke_late_us: i64,
    handed_us: i64,
    flushed_us: i64,
}

fn hand_over_of(line: &str) -> Option<HandOver> {
    let (_, fields) = line.split_once("an instant's calls sent ")?;
    let field = |name: &str| -> Option<i64> {
        fields
            .split_whitespace()
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))?
            .parse()
            .ok()
    };
    Some(HandOver {
        calls: field("calls")? as u64,
        woke_late_us: field("woke_late_us")?,
        handed_us: field("handed_us")?,
        flushed_us: field("flushed_us")?,
    })
}

/// The stages in the order an attempt meets them (the executor's names),
/// with what the target saw put in its place.
const ORDER: [&str; 8] = [
    Stage::Pulled.name(),
    Stage::Woke.name(),
    Stage::SlotTaken.name(),
    Stage::StartRecorded.name(),
    Stage::CallSent.name(),
    TARGET_CALLED,
    Stage::Answered.name(),
    Stage::Settled.name(),
];

/// The target's arrival, among the executor's stages.
const TARGET_CALLED: &str = "target called";

/// Where the target's arrival stands in [`ORDER`].
const TARGET_CALLED_PLACE: usize = 5;

/// Print where the traced fires' time went: each stage's time from the
/// scheduled instant, the dispatcher's hand-overs, and the way of the
/// latest traced call.
pub fn print_trace(log: &str, calls: &TracedCalls, from: DateTime<Utc>, to: DateTime<Utc>) {
    let calls = calls.lock().expect("traced calls").clone();
    let in_window: HashMap<&str, TracedCall> = calls
        .iter()
        .filter(|(_, c)| c.scheduled >= from && c.scheduled < to)
        .map(|(run, c)| (run.as_str(), *c))
        .collect();
    let mut ways: HashMap<&str, BTreeMap<usize, i64>> = HashMap::new();
    for mark in log.lines().filter_map(mark_of) {
        let Some((run, call)) = in_window.get_key_value(mark.run_id.as_str()) else {
            continue;
        };
        let Some(place) = ORDER.iter().position(|s| *s == mark.stage) else {
            continue;
        };
        let since = (mark.at - call.scheduled).num_microseconds().unwrap_or(0);
        ways.entry(run).or_default().insert(place, since);
    }
    for (run, call) in &in_window {
        let arrived = (call.arrived - call.scheduled)
            .num_microseconds()
            .unwrap_or(0);
        ways.entry(run)
            .or_default()
            .insert(TARGET_CALLED_PLACE, arrived);
    }
    println!(
        "\n### Where the time goes: {} traced fires\n",
        in_window.len()
    );
    println!("| stage | from the scheduled instant: p50 / p99 / max ms | fires |");
    println!("|---|---|---|");
    for (place, stage) in ORDER.iter().enumerate() {
        let mut times: Vec<i64> = ways
            .values()
            .filter_map(|w| w.get(&place))
            .copied()
            .collect();
        if times.is_empty() {
            continue;
        }
        times.sort_unstable();
        println!(
            "| {stage} | {:.1} / {:.1} / {:.1} | {} |",
            ms(percentile(&times, 50.0)),
            ms(percentile(&times, 99.0)),
            ms(*times.last().unwrap_or(&0)),
            times.len()
        );
    }
    print_hand_overs(log);
    let latest = ways
        .iter()
        .max_by_key(|(_, w)| w.get(&TARGET_CALLED_PLACE).copied());
    if let Some((run, way)) = latest {
        println!("\nThe latest traced call (run {run}), ms from its instant:");
        let steps: Vec<String> = way
            .iter()
            .map(|(place, us)| format!("{} {:.1}", ORDER[*place], ms(*us)))
            .collect();
        println!("{}", steps.join(" → "));
    }
}

/// The dispatcher's hand-overs of booked calls, per instant.
fn print_hand_overs(log: &str) {
    let overs: Vec<HandOver> = log.lines().filter_map(hand_over_of).collect();
    if overs.is_empty() {
        println!("\nNo booked calls were handed over (no `an instant's calls sent` lines).");
        return;
    }
    let sorted = |f: fn(&HandOver) -> i64| {
        let mut v: Vec<i64> = overs.iter().map(f).collect();
        v.sort_unstable();
        v
    };
    let row = |name: &str, v: Vec<i64>| {
        println!(
            "| {name} | {:.2} / {:.2} / {:.2} |",
            ms(percentile(&v, 50.0)),
            ms(percentile(&v, 99.0)),
            ms(*v.last().unwrap_or(&0))
        );
    };
    println!(
        "\nBooked calls sent together, {} instants (the whole run, warm-up included), {} calls each at p50:\n",
        overs.len(),
        percentile(&sorted(|o| o.calls as i64), 50.0)
    );
    println!("| the dispatcher, per instant | p50 / p99 / max ms |");
    println!("|---|---|");
    row("woke after the instant", sorted(|o| o.woke_late_us));
    row("every call handed to the client", sorted(|o| o.handed_us));
    row("… and flushed to the server", sorted(|o| o.flushed_us));
}

fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_line_gives_its_mark() {
        let line = "2026-12-07T05:57:06.240747Z DEBUG run{job_id=e2e-0000014 run_id=98ab26d6-3b23 attempt=1}: stage stage=\"slot taken\"";
        let mark = mark_of(line).expect("a mark");
        assert_eq!(mark.run_id, "98ab26d6-3b23");
        assert_eq!(mark.stage, "slot taken");
        assert_eq!(mark.at.to_rfc3339(), "2026-12-07T05:57:06.240747+00:00");
        assert_eq!(mark_of("2026-12-07T05:57:06Z INFO jetcron started"), None);
    }

    #[test]
    fn the_target_call_stands_between_the_call_and_its_answer() {
        assert_eq!(ORDER[TARGET_CALLED_PLACE], TARGET_CALLED);
        assert_eq!(ORDER[TARGET_CALLED_PLACE - 1], "call sent");
    }

    #[test]
    fn a_hand_over_line_gives_its_times() {
        let line = "2026-12-07T05:53:52.007001Z DEBUG an instant's calls sent calls=1000 woke_late_us=6 handed_us=1478 flushed_us=6981";
        assert_eq!(
            hand_over_of(line),
            Some(HandOver {
                calls: 1000,
                woke_late_us: 6,
                handed_us: 1478,
                flushed_us: 6981
            })
        );
    }

    #[test]
    fn the_directive_names_each_job_and_escapes_dots() {
        let jobs = traced_jobs(2, |i| format!("team.e2e-{i}"));
        assert_eq!(
            log_directives(&jobs),
            "jetcron_executor[run{job_id=(team\\.e2e-0|team\\.e2e-1)}]=debug,jetcron_executor::instant_calls=debug"
        );
    }
}
