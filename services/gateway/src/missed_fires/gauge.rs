//! Missed fires of the last hour, for the `jetcron_missed_fires` gauge and
//! the periodic scan that records them ([`crate::missed_fires::scan`]): every
//! valid job is read from the bucket a few at a time and judged against
//! ClickHouse a batch at a time ([`MissedInWindow`]), so neither holds
//! every job.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};

use crate::jobs::pass::JobPass;
use crate::missed_fires::count::{counts_of, expected_of, missed_of, Expected, Missed};
use crate::runs::stats::MAX_STATS_JOBS;

/// Missed fires of the last hour per job for `/metrics`. The periodic scan
/// ([`crate::missed_fires::scan`]) records its counts here; a scrape
/// recomputes only when the last counts are older than `fresh_for`, so
/// frequent scrapes do not enumerate schedules each time.
pub struct MissedGauge {
    fresh_for: std::time::Duration,
    latest: tokio::sync::Mutex<Option<(std::time::Instant, BTreeMap<String, u64>)>>,
}

/// How far back the gauge looks.
pub const GAUGE_WINDOW: Duration = Duration::hours(1);
/// How long one computation serves scrapes, at least.
pub const GAUGE_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(15);

impl Default for MissedGauge {
    fn default() -> Self {
        Self::new(GAUGE_MAX_AGE)
    }
}

impl MissedGauge {
    /// A gauge whose counts serve scrapes for `fresh_for` (at least [`GAUGE_MAX_AGE`]).
    pub fn new(fresh_for: std::time::Duration) -> Self {
        Self {
            fresh_for: fresh_for.max(GAUGE_MAX_AGE),
            latest: tokio::sync::Mutex::new(None),
        }
    }

    /// Counts just computed elsewhere (by the scan).
    pub async fn record(&self, counts: BTreeMap<String, u64>) {
        *self.latest.lock().await = Some((std::time::Instant::now(), counts));
    }

    /// Prometheus text of the gauge, recomputed if stale.
    pub async fn render(&self, state: &crate::GatewayState) -> anyhow::Result<String> {
        let mut latest = self.latest.lock().await;
        let fresh = latest
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < self.fresh_for);
        if !fresh {
            let counts = missed_counts(state, state.clock.now()).await?;
            *latest = Some((std::time::Instant::now(), counts));
        }
        let counts = latest.as_ref().map(|(_, c)| c.clone()).unwrap_or_default();
        let mut out = String::from(
            "# HELP jetcron_missed_fires Scheduled fires of the last hour with no run (past the grace period), per job with any.\n\
             # TYPE jetcron_missed_fires gauge\n",
        );
        let mut total = 0;
        for (job, n) in counts.iter().filter(|(_, n)| **n > 0) {
            total += n;
            out.push_str(&format!("jetcron_missed_fires{{job=\"{job}\"}} {n}\n"));
        }
        out.push_str(&format!(
            "# HELP jetcron_missed_fires_total Scheduled fires of the last hour with no run, all jobs.\n\
             # TYPE jetcron_missed_fires_total gauge\njetcron_missed_fires_total {total}\n"
        ));
        Ok(out)
    }
}

/// Jobs a pass over the bucket parses at a time to find their expected
/// fires. Few: a parsed definition is a few hundred bytes and more, and
/// with 2 MB pages a working set of 2,000 of them kept about 40 MB more
/// resident during each scan of a million jobs (docs/benchmarks.md).
const PARSED_AT_ONCE: usize = 250;

/// A batch takes no more chunks once it holds this many expected fires
/// (a job due every second has 3,600 in the window, and ClickHouse answers
/// with the run ids of those that ran). A soft bound: the chunk that
/// crosses it is judged whole, up to 250 such jobs, 900,000 fires.
const MAX_BATCH_FIRES: usize = 100_000;

/// The missed fires of every valid job in the last [`GAUGE_WINDOW`]
/// before `now`, a batch at a time: jobs are read and parsed
/// `PARSED_AT_ONCE` at a time and only those with expected fires are
/// kept, at most [`MAX_STATS_JOBS`] of them to a batch (one ClickHouse
/// query), and no more chunks once it holds `MAX_BATCH_FIRES` fires.
pub struct MissedInWindow {
    jobs: JobPass,
    now: DateTime<Utc>,
    grace: Duration,
}

impl MissedInWindow {
    pub async fn open(state: &crate::GatewayState, now: DateTime<Utc>) -> anyhow::Result<Self> {
        Ok(Self {
            jobs: state.jobs.pass(&state.js).await?,
            now,
            grace: state.limits.missed_grace,
        })
    }

    /// The missed fires of the next batch of jobs with expected fires;
    /// `None` once the pass is over.
    pub async fn next_batch(
        &mut self,
        state: &crate::GatewayState,
    ) -> anyhow::Result<Option<BTreeMap<String, Missed>>> {
        let mut expected: Vec<Expected> = Vec::new();
        let mut fires = 0;
        while expected.len() < MAX_STATS_JOBS && fires < MAX_BATCH_FIRES {
            let wanted = PARSED_AT_ONCE.min(MAX_STATS_JOBS - expected.len());
            let Some(chunk) = self.jobs.next_chunk(wanted).await? else {
                break;
            };
            let found = expected_of(
                &chunk,
                self.now - GAUGE_WINDOW,
                self.now,
                self.now,
                self.grace,
            );
            fires += found.iter().map(Expected::fires).sum::<usize>();
            expected.extend(found);
        }
        if expected.is_empty() {
            return Ok(None);
        }
        Ok(Some(missed_of(state.runs.reads(), expected).await?))
    }
}

/// [`counts_of`] every valid job in the last [`GAUGE_WINDOW`] before `now`
/// ([`MissedInWindow`]): only the counts stay.
pub async fn missed_counts(
    state: &crate::GatewayState,
    now: DateTime<Utc>,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut batches = MissedInWindow::open(state, now).await?;
    let mut counts = BTreeMap::new();
    while let Some(missed) = batches.next_batch(state).await? {
        counts.extend(counts_of(&missed));
    }
    Ok(counts)
}
