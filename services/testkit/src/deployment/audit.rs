//! What a fault did to the fires of a window, measured at the target: every
//! fire called (or skipped by its overlap policy, and why), none called
//! twice but for recorded retries, no call of an older attempt after a
//! newer one, none early, how late the first call of each fire came, and
//! every run in ClickHouse once, succeeded.
//!
//! The figures are those of issue 39 ("a fire is on time when its target is
//! called on time"): the first call of a fire, whatever attempt made it.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use jetcron_core::events::RunId;

use super::target::Call;

/// A job's fire: (job, scheduled time).
pub type Fire = (String, DateTime<Utc>);

/// p50, p99 and max of some lags, seconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lags {
    pub count: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Lags {
    pub fn of(mut values: Vec<f64>) -> Self {
        values.sort_by(f64::total_cmp);
        let at = |p: f64| {
            if values.is_empty() {
                return 0.0;
            }
            let rank = ((p / 100.0) * (values.len() as f64 - 1.0)).round() as usize;
            values[rank.min(values.len() - 1)]
        };
        Self {
            count: values.len(),
            p50: at(50.0),
            p99: at(99.0),
            max: values.last().copied().unwrap_or(0.0),
        }
    }
}

impl std::fmt::Display for Lags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n={} p50={:.3}s p99={:.3}s max={:.3}s",
            self.count, self.p50, self.p99, self.max
        )
    }
}

/// How far before its scheduled time a call counts as early.
pub const EARLY_BY: chrono::Duration = chrono::Duration::milliseconds(1);

/// The calls of one fire, in the order the target saw them.
#[derive(Debug, Clone)]
pub struct FireCalls {
    pub fire: Fire,
    /// (attempt, when called, answered with a planned failure)
    pub calls: Vec<(u32, DateTime<Utc>, bool)>,
}

impl FireCalls {
    /// First call minus scheduled time, seconds.
    pub fn lag(&self) -> f64 {
        self.calls
            .first()
            .map(|(_, at, _)| (*at - self.fire.1).num_milliseconds() as f64 / 1000.0)
            .unwrap_or(f64::NAN)
    }

    /// Whether a call of an attempt came after a call of a later or the
    /// same attempt (a stalled process acting on what it held).
    pub fn stale(&self) -> bool {
        self.calls.windows(2).any(|w| w[1].0 <= w[0].0)
    }

    /// How early the earliest call came, if any came early (seconds).
    pub fn early_by(&self) -> Option<f64> {
        let first = self.calls.iter().map(|c| c.1).min()?;
        (first < self.fire.1 - EARLY_BY)
            .then(|| (self.fire.1 - first).num_milliseconds() as f64 / 1000.0)
    }
}

/// The kind of a job: its id's part before the dash (`steady-3` → `steady`).
pub fn kind_of(job: &str) -> &str {
    job.split('-').next().unwrap_or(job)
}

/// The calls of each fire in `expected`, from everything the target saw.
pub fn calls_per_fire(expected: &BTreeSet<Fire>, calls: &[Call]) -> BTreeMap<Fire, FireCalls> {
    let mut per_fire: BTreeMap<Fire, FireCalls> = BTreeMap::new();
    for call in calls {
        let fire = (call.job.clone(), call.scheduled_at);
        if !expected.contains(&fire) {
            continue;
        }
        per_fire
            .entry(fire.clone())
            .or_insert_with(|| FireCalls {
                fire,
                calls: Vec::new(),
            })
            .calls
            .push((call.attempt, call.at, call.failed));
    }
    for fire in per_fire.values_mut() {
        fire.calls.sort_by_key(|c| c.1);
    }
    per_fire
}

/// Calls that name another fire's run id (a call must carry its own).
pub fn foreign_run_ids(calls: &[Call]) -> Vec<Call> {
    calls
        .iter()
        .filter(|c| RunId::for_fire(&c.job, c.scheduled_at).as_str() != c.run_id)
        .cloned()
        .collect()
}

/// What an audit found; [`Findings::defects`] lists what breaks the rules.
#[derive(Debug, Clone, Default)]
pub struct Findings {
    pub scenario: String,
    pub expected: usize,
    /// Fires never called, and not skipped by their overlap policy.
    pub missing: Vec<Fire>,
    /// Fires `forbid` skipped while the previous run still called its target.
    pub skipped: usize,
    /// Fires recorded as skipped by `forbid` and called all the same.
    pub skipped_and_called: Vec<Fire>,
    /// Fires called more than once, beyond recorded retries.
    pub doubled: Vec<FireCalls>,
    /// Fires called again by a retry after a failed, timed-out or lost attempt.
    pub retried: usize,
    /// Fires with a call of an older attempt after a newer one.
    pub stale: Vec<FireCalls>,
    /// Fires called early: (fire, seconds early).
    pub early: Vec<(Fire, f64)>,
    /// First-call lag of every called fire.
    pub lag: Lags,
    /// First-call lag of the fires of each kind of job (`steady`, `flaky`,
    /// `forbid`: a job id's part before its dash).
    pub lag_by_kind: BTreeMap<String, Lags>,
    /// Fires first called more than 15 s late.
    pub later_than_15s: usize,
    /// Runs missing from ClickHouse (through the gateway), listed twice, or
    /// not succeeded.
    pub history: Vec<String>,
    /// Calls carrying another fire's run id.
    pub foreign: usize,
}

impl Findings {
    /// One line per figure, for the test output and docs/benchmarks.md.
    pub fn report(&self) -> String {
        let s = &self.scenario;
        format!(
            "{s}: fires {} | missing {} | skipped by forbid {} (then called {}) | doubled {} | retried {} | stale calls {} | early calls {} | history problems {}\n\
             {s}: first-call lag {} | over 15 s: {}{}",
            self.expected,
            self.missing.len(),
            self.skipped,
            self.skipped_and_called.len(),
            self.doubled.len(),
            self.retried,
            self.stale.len(),
            self.early.len(),
            self.history.len(),
            self.lag,
            self.later_than_15s,
            self.lag_by_kind
                .iter()
                .map(|(kind, lags)| format!("\n{s}: first-call lag of {kind} jobs {lags}"))
                .collect::<String>(),
        )
    }

    /// What breaks the rules of issue 39, in words (empty: none).
    pub fn defects(&self) -> Vec<String> {
        let mut defects = Vec::new();
        let mut say = |what: String| defects.push(what);
        if !self.missing.is_empty() {
            say(format!(
                "{} fires never called: {:?}",
                self.missing.len(),
                first(&self.missing)
            ));
        }
        if !self.skipped_and_called.is_empty() {
            say(format!(
                "{} fires recorded as skipped and called: {:?}",
                self.skipped_and_called.len(),
                first(&self.skipped_and_called)
            ));
        }
        if !self.doubled.is_empty() {
            say(format!(
                "{} fires called twice: {:?}",
                self.doubled.len(),
                first(&self.doubled)
            ));
        }
        if !self.stale.is_empty() {
            say(format!(
                "{} fires with a stale call: {:?}",
                self.stale.len(),
                first(&self.stale)
            ));
        }
        if !self.early.is_empty() {
            say(format!(
                "{} fires called early: {:?}",
                self.early.len(),
                first(&self.early)
            ));
        }
        if self.foreign > 0 {
            say(format!("{} calls with another fire's run id", self.foreign));
        }
        if !self.history.is_empty() {
            say(format!(
                "{} runs wrong in ClickHouse: {:?}",
                self.history.len(),
                first(&self.history)
            ));
        }
        defects
    }
}

/// The fires first called over 2 s late, by scheduled second: how many,
/// their lag range, and the attempts that made their first calls (where a
/// fault cost time), one line per second.
pub fn late_seconds(per_fire: &BTreeMap<Fire, FireCalls>) -> Vec<String> {
    let mut by_second: BTreeMap<DateTime<Utc>, Vec<(f64, u32)>> = BTreeMap::new();
    for fire in per_fire.values() {
        let lag = fire.lag();
        if lag > 2.0 {
            let attempt = fire.calls.first().map_or(0, |c| c.0);
            by_second
                .entry(fire.fire.1)
                .or_default()
                .push((lag, attempt));
        }
    }
    by_second
        .iter()
        .map(|(second, late)| {
            let low = late.iter().map(|l| l.0).fold(f64::MAX, f64::min);
            let high = late.iter().map(|l| l.0).fold(0.0, f64::max);
            let attempts: BTreeSet<u32> = late.iter().map(|l| l.1).collect();
            format!(
                "late calls of {}: {} fires, lag {low:.1}-{high:.1} s, first attempts {attempts:?}",
                second.format("%H:%M:%S"),
                late.len()
            )
        })
        .collect()
}

/// The fires called twice, by scheduled second: how many, the attempts
/// of their calls and when their second calls came (seconds after the
/// scheduled time), one line per second.
pub fn doubled_seconds(doubled: &[FireCalls]) -> Vec<String> {
    let mut by_second: BTreeMap<DateTime<Utc>, Vec<&FireCalls>> = BTreeMap::new();
    for fire in doubled {
        by_second.entry(fire.fire.1).or_default().push(fire);
    }
    by_second
        .iter()
        .map(|(second, fires)| {
            let attempts: BTreeSet<Vec<u32>> = fires
                .iter()
                .map(|f| f.calls.iter().map(|c| c.0).collect())
                .collect();
            let seconds_after = |at: DateTime<Utc>| (at - *second).num_milliseconds() as f64 / 1000.0;
            let second_calls: Vec<f64> = fires
                .iter()
                .filter_map(|f| f.calls.get(1).map(|c| seconds_after(c.1)))
                .collect();
            let low = second_calls.iter().copied().fold(f64::MAX, f64::min);
            let high = second_calls.iter().copied().fold(0.0, f64::max);
            format!(
                "doubled calls of {}: {} fires, attempts {attempts:?}, second calls {low:.1}-{high:.1} s after",
                second.format("%H:%M:%S"),
                fires.len()
            )
        })
        .collect()
}

fn first<T: std::fmt::Debug + Clone>(items: &[T]) -> Vec<T> {
    items.iter().take(3).cloned().collect()
}
