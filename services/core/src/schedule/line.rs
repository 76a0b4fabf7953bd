//! The schedule language and its pure next-fire maths: a parsed line
//! ([`Schedule`]) and the instants it fires at (`parse` reads the
//! text).
//!
//! Forms (see `docs/schedules.md`):
//! - cron with 5 fields (`min hour dom mon dow`, as in crontab), 6 fields with
//!   seconds first (the form NATS message schedules use) or 7 fields with a
//!   trailing year; Vixie semantics (day-of-week 0-7, names, `L`, `W`, `#`, and
//!   "either matches" when both day fields are restricted), parsed by `croner`;
//! - macros `@yearly @annually @monthly @weekly @daily @midnight @hourly`;
//! - `@every <duration>` (minimum 1s), anchored on the Unix epoch so every
//!   replica computes the same fire instants without coordination;
//! - `@at <RFC 3339 instant>`, a one-shot job.
//!
//! Nothing here reads a clock: callers pass the instant to search after.

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;

use super::wall_clock::CronLine;

/// Shortest `@every` period accepted.
pub const MIN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A parsed schedule.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// A cron line (already normalized from macros), read on the job zone's
    /// wall clock ([`CronLine`]). Shared: a parsed line holds several KiB
    /// (croner keeps a byte per possible value, years included), so holders
    /// of many jobs intern equal lines.
    Cron(Arc<CronLine>),
    /// A fixed period in milliseconds, fire instants at every multiple since the epoch.
    Every { period_ms: i64 },
    /// A single instant.
    At(DateTime<Utc>),
    /// No time of its own: a job without a schedule line runs only when a
    /// parent it names in `after` ends (its `schedule` is left out).
    AfterOnly,
}

/// Why a schedule line was refused; the message is meant for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScheduleError(pub String);

impl Schedule {
    /// The first fire instant strictly after `after`, evaluated in `tz`.
    /// `None` when the schedule never fires again.
    pub fn next_fire(&self, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Cron(line) => line.next_fire(after, tz),
            Schedule::Every { period_ms } => {
                let after_ms = after.timestamp_millis();
                let next_ms = after_ms.div_euclid(*period_ms) * period_ms + period_ms;
                Utc.timestamp_millis_opt(next_ms).single()
            }
            Schedule::At(at) => (*at > after).then_some(*at),
            Schedule::AfterOnly => None,
        }
    }

    /// The last fire instant at or before `at`, evaluated in `tz`.
    /// `None` when the schedule never fired by then.
    pub fn previous_fire(&self, at: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Cron(line) => line.previous_fire(at, tz),
            Schedule::Every { period_ms } => {
                let ms = at.timestamp_millis().div_euclid(*period_ms) * period_ms;
                Utc.timestamp_millis_opt(ms).single()
            }
            Schedule::At(t) => (*t <= at).then_some(*t),
            Schedule::AfterOnly => None,
        }
    }

    /// Whether this is a cron line (read in wall-clock time of a zone).
    pub fn is_cron(&self) -> bool {
        matches!(self, Schedule::Cron(_))
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Cron(line) => write!(f, "{}", line.pattern()),
            Schedule::Every { period_ms } => write!(f, "@every {period_ms}ms"),
            Schedule::At(at) => write!(f, "@at {}", crate::time_format::rfc3339_millis(*at)),
            Schedule::AfterOnly => Ok(()),
        }
    }
}
