//! Which fires were missed: the times a job's current definition says it
//! should have fired, older than a grace period, with no run event at all.
//! Run ids of scheduled fires are derived from (job id, time), so "no run"
//! is an exact lookup, not a guess. Only the current definition is asked,
//! from when it was written: an edit or a pause starts the count afresh, so
//! a changed schedule never reports the old one's times. A fire still
//! waiting in a pool nobody serves counts as missed once past the grace:
//! from the user's side nothing ran.
//!
//! `/v1/stats` ([`crate::runs::stats`]) counts them over its range; the
//! periodic [`super::scan`] records them as `fire.missed` job events and
//! feeds the [`super::gauge`].

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use jetcron_core::events::RunId;

use crate::jobs::pass::CurrentJob;
use crate::sql::reads::{ClickHouseReads, HistoryUnavailable};
use crate::sql::run_events;

/// A fire is missed only once it is this much older than its (jittered) time
/// (the default of [`crate::limits::Limits::missed_grace`]).
pub const MISSED_GRACE: Duration = Duration::minutes(2);
/// Most expected fires enumerated per job and request.
pub const MAX_EXPECTED_PER_JOB: usize = 10_000;

/// What the missed-fire count found for one job.
#[derive(Debug, Clone, Default)]
pub struct Missed {
    pub times: Vec<DateTime<Utc>>,
    pub truncated: bool,
}

/// The expected scheduled fires of `job` in `[from, to]` that are due by `now`.
fn expected_fires(
    current: &CurrentJob,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
    grace: Duration,
) -> (Vec<DateTime<Utc>>, bool) {
    let job = &current.job;
    if job.spec.paused {
        return (Vec::new(), false);
    }
    let jitter = Duration::from_std(job.jitter).unwrap_or_default();
    let start = from.max(current.written_at);
    let end = to.min(now - grace - jitter);
    if end < start {
        return (Vec::new(), false);
    }
    match job.scheduled_between(start, end, MAX_EXPECTED_PER_JOB) {
        Ok(times) => (times, false),
        // Too many: check the newest ones only.
        Err(_) => {
            let timing = job.timing();
            let mut times = Vec::with_capacity(MAX_EXPECTED_PER_JOB);
            let mut at = end;
            while times.len() < MAX_EXPECTED_PER_JOB {
                match timing.previous_scheduled(at) {
                    Some(t) if t >= start => {
                        times.push(t);
                        at = t - Duration::milliseconds(1);
                    }
                    _ => break,
                }
            }
            times.reverse();
            (times, true)
        }
    }
}

/// The fires one job was expected to have had, before ClickHouse is asked
/// which of them ran: what a job costs while its batch is gathered.
pub struct Expected {
    id: String,
    times: Vec<DateTime<Utc>>,
    truncated: bool,
}

impl Expected {
    /// How many fires the job was expected to have had.
    pub fn fires(&self) -> usize {
        self.times.len()
    }
}

/// The expected fires in `[from, to]` due by `now` of those of `jobs` that
/// have any.
pub fn expected_of(
    jobs: &[CurrentJob],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
    grace: Duration,
) -> Vec<Expected> {
    jobs.iter()
        .filter_map(|current| {
            let (times, truncated) = expected_fires(current, from, to, now, grace);
            (!times.is_empty()).then(|| Expected {
                id: current.job.spec.id.clone(),
                times,
                truncated,
            })
        })
        .collect()
}

/// Scheduled fires in `[from, to]` of `jobs` that have no run event.
pub async fn missed_fires(
    reads: &ClickHouseReads,
    jobs: &[CurrentJob],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
    grace: Duration,
) -> Result<BTreeMap<String, Missed>, HistoryUnavailable> {
    missed_of(reads, expected_of(jobs, from, to, now, grace)).await
}

/// Which of the `expected` fires have no run event (one ClickHouse query).
pub async fn missed_of(
    reads: &ClickHouseReads,
    expected: Vec<Expected>,
) -> Result<BTreeMap<String, Missed>, HistoryUnavailable> {
    let earliest = expected.iter().filter_map(|e| e.times.first()).min();
    let latest = expected.iter().filter_map(|e| e.times.last()).max();
    let (Some(earliest), Some(latest)) = (earliest, latest) else {
        return Ok(BTreeMap::new());
    };
    let ids: Vec<&str> = expected.iter().map(|e| e.id.as_str()).collect();
    let present = run_events::present_run_ids(
        reads,
        &ids,
        earliest.timestamp_millis(),
        latest.timestamp_millis(),
    )
    .await?;
    let mut missed = BTreeMap::new();
    for Expected {
        id,
        times,
        truncated,
    } in expected
    {
        let times: Vec<_> = times
            .into_iter()
            .filter(|t| !present.contains(RunId::for_fire(&id, *t).as_str()))
            .collect();
        missed.insert(id, Missed { times, truncated });
    }
    Ok(missed)
}

/// Missed fires per job with any, as the gauge counts them (a job with
/// none is not shown, so not kept).
pub fn counts_of(missed: &BTreeMap<String, Missed>) -> BTreeMap<String, u64> {
    missed
        .iter()
        .filter(|(_, m)| !m.times.is_empty())
        .map(|(id, m)| (id.clone(), m.times.len() as u64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetcron_core::job::parse_job;

    fn current(definition: &str, written_at: DateTime<Utc>) -> CurrentJob {
        CurrentJob {
            job: parse_job(definition.as_bytes(), None).expect("valid"),
            written_at,
        }
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("instant")
            .with_timezone(&Utc)
    }

    #[test]
    fn expected_fires_start_at_the_definition_and_stop_before_the_grace() {
        let job = current(
            r#"{"id":"a","schedule":"0 * * * * *","target":{"type":"nats","subject":"s"}}"#,
            at("2026-01-01T10:00:30Z"),
        );
        let (times, truncated) = expected_fires(
            &job,
            at("2026-01-01T09:00:00Z"),
            at("2026-01-01T11:00:00Z"),
            at("2026-01-01T10:10:00Z"),
            MISSED_GRACE,
        );
        assert!(!truncated);
        // 10:01 .. 10:08 (10:09 and 10:10 are within the 2-minute grace).
        assert_eq!(times.first(), Some(&at("2026-01-01T10:01:00Z")));
        assert_eq!(times.last(), Some(&at("2026-01-01T10:08:00Z")));
        assert_eq!(times.len(), 8);
        let paused = current(
            r#"{"id":"a","schedule":"0 * * * * *","paused":true,"target":{"type":"nats","subject":"s"}}"#,
            at("2026-01-01T10:00:30Z"),
        );
        assert!(expected_fires(
            &paused,
            at("2026-01-01T09:00:00Z"),
            at("2026-01-01T11:00:00Z"),
            at("2026-01-01T10:10:00Z"),
            MISSED_GRACE
        )
        .0
        .is_empty());
    }

    #[test]
    fn too_many_expected_fires_keeps_the_newest() {
        let job = current(
            r#"{"id":"a","schedule":"* * * * * *","target":{"type":"nats","subject":"s"}}"#,
            at("2026-01-01T00:00:00Z"),
        );
        let (times, truncated) = expected_fires(
            &job,
            at("2026-01-01T00:00:00Z"),
            at("2026-01-02T00:00:00Z"),
            at("2026-01-02T00:00:00Z"),
            MISSED_GRACE,
        );
        assert!(truncated);
        assert_eq!(times.len(), MAX_EXPECTED_PER_JOB);
        assert_eq!(times.last(), Some(&at("2026-01-01T23:58:00Z")));
    }
}
