//! The ticker through real DST nights in America/New_York, driven by a
//! manual clock (in-process ticker on a real nats-server), under Vixie
//! cron(8)'s rule (docs/schedules.md): a fixed-time line fires a match in the
//! spring-forward gap once right after it and a repeated wall time once, at
//! its first occurrence; a wildcard line follows real time (nothing in the
//! gap, both copies of the repeated hour).

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use chrono::{DateTime, Utc};
use jetcron_core::clock::ManualClock;
use jetcron_core::events::DueEvent;
use jetcron_core::subjects;
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_testkit::{fast_leases, NatsServer};
use tokio_util::sync::CancellationToken;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("instant")
        .with_timezone(&Utc)
}

/// Run a ticker with a manual clock from `from` to `to` in `step` increments
/// and return the (job, scheduled time) of every stored due event.
async fn tick_through(
    jobs: &[(&str, &str)],
    from: &str,
    to: &str,
    step: chrono::Duration,
) -> Vec<(String, String)> {
    let nats = NatsServer::start();
    let js = jetstream::new(nats.client().await);
    let options = TopologyOptions::default();
    let bucket = topology::ensure_jobs_bucket(&js, &options)
        .await
        .expect("bucket");
    topology::ensure_due_stream(&js, &options)
        .await
        .expect("due");
    for (id, schedule) in jobs {
        let value = format!(
            r#"{{"schedule":"{schedule}","timezone":"America/New_York","target":{{"type":"nats","subject":"svc.a"}}}}"#
        );
        bucket.put(*id, value.into()).await.expect("put");
    }
    let clock = ManualClock::new(utc(from));
    let stop = CancellationToken::new();
    let ticker = tokio::spawn(jetcron_ticker::run(
        jetcron_ticker::TickerConfig {
            leases: fast_leases(),
            ..Default::default()
        },
        nats.client().await,
        Arc::new(clock.clone()),
        stop.clone(),
    ));
    // Let it load the bucket and take its shards before time moves.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let end = utc(to);
    while clock.now_utc() < end {
        clock.advance(step);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    ticker.await.expect("join").expect("ticker");

    let mut stream = js.get_stream(subjects::DUE_STREAM).await.expect("stream");
    let state = stream.info().await.expect("info").state.clone();
    let mut fires = Vec::new();
    if state.messages > 0 {
        for seq in state.first_sequence..=state.last_sequence {
            let message = stream.get_raw_message(seq).await.expect("message");
            let event: DueEvent = serde_json::from_slice(&message.payload).expect("due event");
            fires.push((
                event.job_id,
                jetcron_core::time_format::rfc3339_millis(event.scheduled_at),
            ));
        }
    }
    fires.sort();
    fires
}

trait NowUtc {
    fn now_utc(&self) -> DateTime<Utc>;
}

impl NowUtc for ManualClock {
    fn now_utc(&self) -> DateTime<Utc> {
        jetcron_core::clock::Clock::now(self)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn spring_forward_night() {
    // 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00Z).
    let fires = tick_through(
        &[("daily-0230", "30 2 * * *"), ("hourly", "0 * * * *")],
        "2026-03-08T04:10:00Z", // 23:10 EST on the 7th
        "2026-03-08T09:30:00Z", // 05:30 EDT
        chrono::Duration::minutes(15),
    )
    .await;
    let expected: Vec<(String, String)> = [
        ("daily-0230", "2026-03-08T07:00:00.000Z"), // 02:30 does not exist: 03:00 EDT
        ("hourly", "2026-03-08T05:00:00.000Z"),     // 00:00 EST
        ("hourly", "2026-03-08T06:00:00.000Z"),     // 01:00 EST
        ("hourly", "2026-03-08T07:00:00.000Z"),     // 03:00 EDT (02:00 never was)
        ("hourly", "2026-03-08T08:00:00.000Z"),
        ("hourly", "2026-03-08T09:00:00.000Z"),
    ]
    .iter()
    .map(|(j, t)| (j.to_string(), t.to_string()))
    .collect();
    let mut expected = expected;
    expected.sort();
    assert_eq!(fires, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn fall_back_night() {
    // 2026-11-01: 02:00 EDT falls back to 01:00 EST (06:00Z); 01:xx happens twice.
    let fires = tick_through(
        &[
            ("daily-0130", "30 1 * * *"),
            ("hourly", "0 * * * *"),
            ("half-hours-at-1", "*/30 1 * * *"),
        ],
        "2026-11-01T03:10:00Z", // 23:10 EDT on Oct 31
        "2026-11-01T08:30:00Z", // 03:30 EST
        chrono::Duration::minutes(15),
    )
    .await;
    let expected: Vec<(String, String)> = [
        ("daily-0130", "2026-11-01T05:30:00.000Z"), // 01:30 EDT, not again at 01:30 EST
        ("hourly", "2026-11-01T04:00:00.000Z"),     // 00:00 EDT
        ("hourly", "2026-11-01T05:00:00.000Z"),     // 01:00 EDT
        ("hourly", "2026-11-01T06:00:00.000Z"),     // 01:00 EST, again: real time
        ("hourly", "2026-11-01T07:00:00.000Z"),     // 02:00 EST
        ("hourly", "2026-11-01T08:00:00.000Z"),     // 03:00 EST
        ("half-hours-at-1", "2026-11-01T05:00:00.000Z"), // 01:00 EDT
        ("half-hours-at-1", "2026-11-01T05:30:00.000Z"), // 01:30 EDT
        ("half-hours-at-1", "2026-11-01T06:00:00.000Z"), // 01:00 EST
        ("half-hours-at-1", "2026-11-01T06:30:00.000Z"), // 01:30 EST
    ]
    .iter()
    .map(|(j, t)| (j.to_string(), t.to_string()))
    .collect();
    let mut expected = expected;
    expected.sort();
    assert_eq!(fires, expected);
}
