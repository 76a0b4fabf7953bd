//! Whether this host's wall clock agrees with the NATS servers'.
//!
//! Schedules are wall-clock times: a ticker whose clock runs 30 s ahead
//! stores every fire of its shards 30 s early, and an executor whose clock
//! runs ahead calls held fires that much before their instant (issue 39:
//! 489 early calls, up to 30 s, from one ticker and one executor under
//! libfaketime). Leases are measured on monotonic clocks and never compare
//! hosts, so nothing else noticed.
//!
//! JetStream answers carry the server's time: a stream's info has `ts`,
//! the moment its leader answered. Every few seconds this asks for it,
//! takes the middle of the request's round trip as the moment the server
//! read its clock, and keeps the difference (within half the round trip).
//! A host off by more than `--max-clock-offset` (default 500 ms) is not
//! trusted: the ticker takes no shard and gives back those it has, the
//! executor pulls nothing and calls no held fire, `/readyz` names the
//! offset, the log says so once and `jetcron_clock_offset_seconds` shows it
//! — until the clock is back, while the other replicas fire on time.
//!
//! A clock stepped between two readings (an NTP step, a hand-set date) is
//! seen at once, without waiting for the next reading: the wall clock then
//! moves apart from the monotonic clock, and a check against the last
//! reading's pair says the offset is unknown until it is read again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use chrono::{DateTime, Utc};
use jetcron_core::clock::Clock;
use serde::Deserialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::readiness::Readiness;

/// The name `/readyz` reports the clock under.
pub const READINESS_NAME: &str = "clock";

/// How often the servers' time is read.
const READ_EVERY: Duration = Duration::from_secs(2);

/// A reading whose round trip took longer says little (an election, a
/// loaded server): kept out.
const MAX_ROUND_TRIP: Duration = Duration::from_millis(500);

/// One reading: this host's offset from the server, and the host's clocks
/// when it was taken.
#[derive(Debug, Clone, Copy)]
struct Reading {
    /// Server time minus this host's wall clock.
    offset: chrono::Duration,
    /// Half the round trip: how far off `offset` may be.
    uncertainty: chrono::Duration,
    wall: DateTime<Utc>,
    monotonic: Instant,
}

impl Reading {
    /// From a request sent at (`sent_wall`, `sent`) and answered at
    /// `answered` with the server's time `server`.
    fn taken(
        sent_wall: DateTime<Utc>,
        sent: Instant,
        answered: Instant,
        server: DateTime<Utc>,
    ) -> Self {
        let round_trip = chrono::Duration::from_std(answered - sent).unwrap_or_default();
        let middle = sent_wall + round_trip / 2;
        Self {
            offset: server - middle,
            uncertainty: round_trip / 2,
            wall: middle,
            monotonic: sent + (answered - sent) / 2,
        }
    }

    /// How far this host's wall clock moved apart from its monotonic clock
    /// since the reading (a step of the wall clock).
    fn stepped_by(&self, wall_now: DateTime<Utc>, now: Instant) -> chrono::Duration {
        let wall = wall_now - self.wall;
        let monotonic = chrono::Duration::from_std(now - self.monotonic).unwrap_or_default();
        wall - monotonic
    }
}

/// What a check says of the clock now.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Within the bound: the offset, server minus host.
    Trusted(chrono::Duration),
    /// Not read yet (no answer from the servers since the start).
    Unknown,
    /// Off by more than the bound: the offset.
    Off(chrono::Duration),
    /// The wall clock stepped since the last reading, by this much.
    Stepped(chrono::Duration),
}

impl Verdict {
    fn trusted(&self) -> bool {
        matches!(self, Verdict::Trusted(_))
    }

    /// What `/readyz` and the log say.
    fn describe(&self, bound: Duration) -> String {
        let bound = humantime::format_duration(bound);
        match self {
            Verdict::Trusted(offset) => format!("within {bound} of the NATS servers' ({})", signed(*offset)),
            Verdict::Unknown => "this host's clock not compared with the NATS servers' yet".into(),
            Verdict::Off(offset) => format!(
                "this host's clock is {} the NATS servers' (more than --max-clock-offset {bound}): taking no shard and calling no fire until it is back",
                ahead_or_behind(*offset)
            ),
            Verdict::Stepped(by) => format!(
                "this host's clock stepped by {} since it was last compared with the NATS servers': taking no shard and calling no fire until it is compared again",
                signed(*by)
            ),
        }
    }
}

fn signed(offset: chrono::Duration) -> String {
    format!("{:+.3} s", offset.num_milliseconds() as f64 / 1000.0)
}

/// "30.012 s ahead of" or "29.9 s behind" (offset is server minus host).
fn ahead_or_behind(offset: chrono::Duration) -> String {
    let secs = offset.num_milliseconds() as f64 / 1000.0;
    if secs < 0.0 {
        format!("{:.3} s ahead of", -secs)
    } else {
        format!("{secs:.3} s behind")
    }
}

/// The verdict on `reading` (the last one) now, under `bound`.
fn judge(
    reading: Option<Reading>,
    bound: Duration,
    wall_now: DateTime<Utc>,
    now: Instant,
) -> Verdict {
    let Some(reading) = reading else {
        return Verdict::Unknown;
    };
    let bound = chrono::Duration::from_std(bound).unwrap_or(chrono::Duration::MAX);
    let stepped = reading.stepped_by(wall_now, now);
    if stepped.abs() > bound / 2 {
        return Verdict::Stepped(stepped);
    }
    // Within the bound whatever the reading's own error.
    if reading.offset.abs() + reading.uncertainty > bound {
        return Verdict::Off(reading.offset);
    }
    Verdict::Trusted(reading.offset)
}

#[derive(Debug, Default)]
struct State {
    reading: Option<Reading>,
    /// The verdict last reported (log, readiness).
    reported: Option<bool>,
}

/// This host's clock against the NATS servers', shared by the services of a
/// process. Cheap to clone.
#[derive(Clone)]
pub struct ClockCheck {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    bound: Duration,
    clock: Arc<dyn Clock>,
    readiness: Readiness,
    state: Mutex<State>,
    following: AtomicBool,
}

impl std::fmt::Debug for ClockCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            None => f.write_str("ClockCheck(off)"),
            Some(inner) => write!(f, "ClockCheck(bound {:?})", inner.bound),
        }
    }
}

impl Default for ClockCheck {
    /// Off: every clock is trusted (tests that drive time by hand).
    fn default() -> Self {
        Self::off()
    }
}

impl ClockCheck {
    /// A check of `clock` (the services' one clock) against the servers',
    /// refusing offsets over `bound`, reported in `readiness`. Not trusted
    /// until [`ClockCheck::follow`] has read the servers' time once.
    pub fn new(bound: Duration, clock: Arc<dyn Clock>, readiness: Readiness) -> Self {
        readiness.waiting(READINESS_NAME, Verdict::Unknown.describe(bound));
        Self {
            inner: Some(Arc::new(Inner {
                bound,
                clock,
                readiness,
                state: Mutex::default(),
                following: AtomicBool::new(false),
            })),
        }
    }

    /// No check: always trusted.
    pub fn off() -> Self {
        Self { inner: None }
    }

    /// What the check says now.
    pub fn verdict(&self) -> Verdict {
        let Some(inner) = &self.inner else {
            return Verdict::Trusted(chrono::Duration::zero());
        };
        let reading = inner.lock().reading;
        judge(reading, inner.bound, inner.clock.now(), Instant::now())
    }

    /// Whether this host's clock may be acted on now.
    pub fn trusted(&self) -> bool {
        self.verdict().trusted()
    }

    /// Read the servers' time from `stream`'s info every few seconds until
    /// `stop`, reporting changes of the verdict. A second call (another
    /// service of the same process) returns at once.
    pub async fn follow(&self, js: jetstream::Context, stream: String, stop: CancellationToken) {
        let Some(inner) = &self.inner else {
            return;
        };
        if inner.following.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut failures = crate::retry::LogLimiter::per_10s();
        loop {
            match read_server_time(&js, &stream, &*inner.clock).await {
                Ok(Some(reading)) => {
                    failures.reset();
                    inner.lock().reading = Some(reading);
                }
                Ok(None) => {}
                Err(e) => {
                    if let Some(failures) = failures.admit() {
                        warn!(stream, failures, error = %format!("{e:#}"), "cannot read the NATS servers' time");
                    }
                }
            }
            self.report();
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(READ_EVERY) => {}
            }
        }
    }

    /// Say a change of the verdict: log, metrics, readiness.
    fn report(&self) {
        let Some(inner) = &self.inner else {
            return;
        };
        let verdict = self.verdict();
        if let Verdict::Trusted(offset) | Verdict::Off(offset) = verdict {
            metrics::gauge!("jetcron_clock_offset_seconds")
                .set(-offset.num_milliseconds() as f64 / 1000.0);
        }
        let trusted = verdict.trusted();
        metrics::gauge!("jetcron_clock_trusted").set(if trusted { 1.0 } else { 0.0 });
        let changed = inner.lock().reported.replace(trusted) != Some(trusted);
        if trusted {
            inner.readiness.ready(READINESS_NAME);
        } else {
            inner
                .readiness
                .waiting(READINESS_NAME, verdict.describe(inner.bound));
        }
        if !changed {
            return;
        }
        match verdict {
            Verdict::Trusted(_) => {
                info!(clock = %verdict.describe(inner.bound), "this host's clock agrees with the NATS servers'")
            }
            Verdict::Unknown => {}
            _ => {
                error!(clock = %verdict.describe(inner.bound), "this host's clock cannot be trusted")
            }
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The part of a JetStream info answer that says when the server wrote it.
#[derive(Deserialize)]
struct Stamped {
    ts: Option<DateTime<Utc>>,
    error: Option<serde_json::Value>,
}

/// One reading against `stream`'s leader; `None` when its round trip was
/// too long to say much.
async fn read_server_time(
    js: &jetstream::Context,
    stream: &str,
    clock: &dyn Clock,
) -> anyhow::Result<Option<Reading>> {
    let sent_wall = clock.now();
    let sent = Instant::now();
    let answer: Stamped = tokio::time::timeout(
        Duration::from_secs(2),
        js.request(format!("STREAM.INFO.{stream}"), &serde_json::json!({})),
    )
    .await
    .map_err(|_| anyhow::anyhow!("stream {stream}'s info not answered within 2 s"))??;
    let answered = Instant::now();
    if let Some(error) = answer.error {
        anyhow::bail!("stream {stream}'s info: {error}");
    }
    let server = answer.ts.ok_or_else(|| {
        anyhow::anyhow!("stream {stream}'s info carries no time (nats-server before 2.10?)")
    })?;
    if answered - sent > MAX_ROUND_TRIP {
        return Ok(None);
    }
    Ok(Some(Reading::taken(sent_wall, sent, answered, server)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).expect("instant")
    }

    const BOUND: Duration = Duration::from_millis(500);

    #[test]
    fn the_offset_is_taken_at_the_middle_of_the_round_trip() {
        let sent = Instant::now();
        let reading = Reading::taken(
            at(0),
            sent,
            sent + Duration::from_millis(100),
            at(30) + chrono::Duration::milliseconds(50),
        );
        assert_eq!(reading.offset, chrono::Duration::seconds(30));
        assert_eq!(reading.uncertainty, chrono::Duration::milliseconds(50));
    }

    #[test]
    fn a_clock_ahead_or_behind_by_more_than_the_bound_is_not_trusted() {
        let now = Instant::now();
        let reading = |offset_ms| Reading {
            offset: chrono::Duration::milliseconds(offset_ms),
            uncertainty: chrono::Duration::zero(),
            wall: at(0),
            monotonic: now,
        };
        assert_eq!(
            judge(Some(reading(120)), BOUND, at(0), now),
            Verdict::Trusted(chrono::Duration::milliseconds(120))
        );
        assert!(matches!(
            judge(Some(reading(-30_000)), BOUND, at(0), now),
            Verdict::Off(_)
        ));
        assert!(matches!(
            judge(Some(reading(30_000)), BOUND, at(0), now),
            Verdict::Off(_)
        ));
        assert_eq!(judge(None, BOUND, at(0), now), Verdict::Unknown);
        let unsure = Reading {
            uncertainty: chrono::Duration::milliseconds(200),
            ..reading(400)
        };
        assert!(
            matches!(judge(Some(unsure), BOUND, at(0), now), Verdict::Off(_)),
            "400 ms give or take 200 may be over the bound"
        );
    }

    #[test]
    fn a_wall_clock_that_steps_after_a_reading_is_not_trusted_until_read_again() {
        let then = Instant::now();
        let reading = Reading {
            offset: chrono::Duration::zero(),
            uncertainty: chrono::Duration::zero(),
            wall: at(0),
            monotonic: then,
        };
        let later = then + Duration::from_secs(10);
        assert!(judge(Some(reading), BOUND, at(10), later).trusted());
        assert_eq!(
            judge(Some(reading), BOUND, at(40), later),
            Verdict::Stepped(chrono::Duration::seconds(30))
        );
    }

    #[test]
    fn the_verdict_names_the_offset_and_the_bound() {
        let off = Verdict::Off(chrono::Duration::seconds(-30)).describe(BOUND);
        assert!(off.contains("30.000 s ahead of"), "{off}");
        assert!(off.contains("500ms"), "{off}");
        let behind = Verdict::Off(chrono::Duration::seconds(30)).describe(BOUND);
        assert!(behind.contains("30.000 s behind"), "{behind}");
    }
}
