//! Missed fires, event-sourced: every `--missed-scan-interval` (30 s) the
//! gateway computes the missed fires of the last hour ([`crate::runs::stats`]: a
//! scheduled time of a job's current definition, older than the grace, with
//! no run event at all) and publishes one `fire.missed` job event per fire
//! (`jetcron.jobs.missed` in `JETCRON_RUNS`, projected into
//! `jetcron.job_events`), so Grafana can count them from ClickHouse.
//!
//! Stored once per fire, however many gateways scan and however often: the
//! event id (`<run_id>:fire.missed`) is the same for every scan, and is
//!
//! - skipped when ClickHouse already holds it (one lookup per chunk of jobs),
//! - the `Nats-Msg-Id` of the publish, so JetStream drops a repeat inside
//!   `JETCRON_RUNS`' duplicate window (two gateways finding it at once, or a
//!   scan before the projector stored the last one),
//! - and, with `at_ms` = the scheduled time, the full sorting key of the
//!   `ReplacingMergeTree` table, which collapses anything left; queries dedup
//!   on `event_id`.
//!
//! A fire is recorded only while it is inside the window: fires older than an
//! hour when a gateway first looks (every gateway down for longer) are not
//! recorded afterwards; `/v1/stats` still computes them for any range. The
//! counts of each scan also feed the `jetcron_missed_fires` gauge.
//!
//! A scan streams the jobs ([`MissedInWindow`]): it parses a few
//! hundred current definitions at a time and keeps only the expected fires
//! of those that had any in the window, judges a batch of them against
//! ClickHouse, records their missed fires and drops them before it reads
//! on. Holding every job for the scan cost about 8 KB per job (a million
//! jobs: gigabytes every 30 s); now a scan holds one batch, and afterwards
//! only the gauge's counts of jobs with missed fires stay.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{StreamExt as _, TryStreamExt as _};
use jetcron_core::job_events::FireMissed;
use jetcron_io::job_events;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::missed_fires;
use crate::missed_fires::count::{self, Missed};
use crate::missed_fires::gauge::MissedInWindow;
use crate::sql::job_events::recorded_missed_event_ids;
use crate::GatewayState;

/// Default of `--missed-scan-interval`.
pub const DEFAULT_SCAN_INTERVAL: Duration = Duration::from_secs(30);
/// How far back each scan looks (the gauge's window).
pub const SCAN_WINDOW: chrono::Duration = missed_fires::gauge::GAUGE_WINDOW;
/// Publishes waiting for their ack at once.
const PUBLISHES_IN_FLIGHT: usize = 64;

/// What one scan found and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// Missed fires in the window.
    pub missed: usize,
    /// Of those, the ones not yet in ClickHouse, published now.
    pub published: usize,
    /// Of those, the ones JetStream stored (the rest were duplicates).
    pub stored: usize,
}

/// Scan every `interval` until `shutdown`; a zero interval turns scanning off.
/// A failed scan (ClickHouse or NATS away) is logged and tried again at the
/// next interval.
pub async fn run(state: Arc<GatewayState>, interval: Duration, shutdown: CancellationToken) {
    if interval.is_zero() {
        info!("missed fire scan off (--missed-scan-interval 0)");
        return;
    }
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        // Judge fires only up to where ClickHouse is complete: behind a
        // slow or stopped projector, a fire that ran looks missed.
        let until = match crate::runs::projection::projected_until(&state, state.clock.now()).await
        {
            Ok(Some(until)) => until,
            Ok(None) => {
                debug!("no projector consumer yet, missed fire scan skipped");
                continue;
            }
            Err(e) => {
                warn!(error = %format!("{e:#}"), "cannot tell how far the projector got, missed fire scan skipped");
                continue;
            }
        };
        let scan = scan(&state, until);
        let result = tokio::select! {
            _ = shutdown.cancelled() => return,
            result = scan => result,
        };
        match result {
            Ok(report) if report.published > 0 => info!(
                missed = report.missed,
                published = report.published,
                stored = report.stored,
                "recorded missed fires"
            ),
            Ok(report) => debug!(missed = report.missed, "missed fire scan"),
            Err(e) => {
                warn!(error = %format!("{e:#}"), "missed fire scan failed, retrying at the next interval")
            }
        }
    }
}

/// One scan judging fires up to `until` (see [`crate::runs::projection::projected_until`]):
/// record every missed fire not yet stored, and give the gauge the counts.
/// Jobs are judged and recorded a batch at a time
/// ([`MissedInWindow`]); only the counts of jobs with missed fires
/// outlive their batch.
pub async fn scan(state: &GatewayState, until: DateTime<Utc>) -> anyhow::Result<ScanReport> {
    let mut batches = MissedInWindow::open(state, until).await?;
    let mut counts = BTreeMap::new();
    let mut report = ScanReport::default();
    while let Some(missed) = batches.next_batch(state).await? {
        counts.extend(count::counts_of(&missed));
        record(state, &missed, &mut report).await?;
    }
    state.missed.record(counts).await;
    Ok(report)
}

/// Record the missed fires of one chunk of jobs that ClickHouse does not
/// hold yet, and alert on the ones JetStream stored.
async fn record(
    state: &GatewayState,
    missed: &BTreeMap<String, Missed>,
    report: &mut ScanReport,
) -> anyhow::Result<()> {
    let detected_at = state.clock.now();
    let grace = state.limits.missed_grace;
    let chunk: Vec<(&str, &Missed)> = missed
        .iter()
        .filter(|(_, m)| !m.times.is_empty())
        .map(|(id, m)| (id.as_str(), m))
        .collect();
    if chunk.is_empty() {
        return Ok(());
    }
    let recorded = recorded(state, &chunk).await?;
    let events: Vec<FireMissed> = chunk
        .iter()
        .flat_map(|(id, m)| {
            m.times
                .iter()
                .map(move |t| FireMissed::new(id, *t, detected_at, grace))
        })
        .filter(|e| !recorded.contains(&e.event_id))
        .collect();
    report.missed += chunk.iter().map(|(_, m)| m.times.len()).sum::<usize>();
    report.published += events.len();
    let stored: Vec<Option<FireMissed>> = futures::stream::iter(events)
        .map(|event| async move {
            let new = job_events::publish_fire_missed(&state.js, &event).await?;
            anyhow::Ok(new.then_some(event))
        })
        .buffer_unordered(PUBLISHES_IN_FLIGHT)
        .try_collect()
        .await?;
    let stored: Vec<FireMissed> = stored.into_iter().flatten().collect();
    report.stored += stored.len();
    metrics::counter!("jetcron_missed_fires_recorded_total").increment(stored.len() as u64);
    alert_missed(state, &stored, detected_at).await;
    Ok(())
}

/// Tell the alert channels of the jobs whose fires were just recorded as
/// missed (`notify.channels`): one notification per missed fire, which the
/// executors' notifier turns into the job's `missed` incident. A failure is
/// logged; the fire stays recorded either way.
async fn alert_missed(state: &GatewayState, missed: &[FireMissed], seen_at: DateTime<Utc>) {
    let mut jobs: std::collections::BTreeMap<&str, Option<jetcron_core::job::ValidJob>> =
        std::collections::BTreeMap::new();
    for event in missed {
        if !jobs.contains_key(event.job_id.as_str()) {
            let job = state
                .jobs
                .get(&event.job_id)
                .await
                .ok()
                .flatten()
                .and_then(|(_, v)| v);
            jobs.insert(&event.job_id, job);
        }
        let Some(Some(job)) = jobs.get(event.job_id.as_str()) else {
            continue;
        };
        let Some(notification) =
            jetcron_core::alert::Notification::missed_fire(job, event.scheduled_at, seen_at)
        else {
            continue;
        };
        if let Err(e) = jetcron_io::notify::enqueue(&state.js, &notification).await {
            warn!(job_id = %event.job_id, error = %format!("{e:#}"), "cannot queue the alert of a missed fire");
        }
    }
}

/// Event ids of the `fire.missed` events ClickHouse already holds for these jobs' times.
async fn recorded(
    state: &GatewayState,
    jobs: &[(&str, &Missed)],
) -> anyhow::Result<HashSet<String>> {
    let times = || jobs.iter().flat_map(|(_, m)| m.times.iter());
    let (Some(from), Some(to)) = (times().min(), times().max()) else {
        return Ok(HashSet::new());
    };
    let ids: Vec<&str> = jobs.iter().map(|(id, _)| *id).collect();
    let rows = recorded_missed_event_ids(
        state.runs.reads(),
        &ids,
        from.timestamp_millis(),
        to.timestamp_millis(),
    )
    .await?;
    Ok(rows.into_iter().collect())
}
