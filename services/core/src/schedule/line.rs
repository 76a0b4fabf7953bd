//! The schedule language and its pure next-fire maths.
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
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, SubsecRound, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;

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
    /// Parse a schedule line.
    pub fn parse(line: &str) -> Result<Self, ScheduleError> {
        let line = line.trim();
        if line.is_empty() {
            return Err(ScheduleError("must not be empty".into()));
        }
        if let Some(rest) = strip_keyword(line, "@every") {
            return parse_every(rest);
        }
        if let Some(rest) = strip_keyword(line, "@at") {
            return parse_at(rest);
        }
        if line.starts_with('@') {
            let expanded = expand_macro(line).ok_or_else(|| {
                ScheduleError(format!(
                    "unknown macro {line:?}; expected one of @yearly @annually @monthly @weekly @daily @midnight @hourly, @every <duration> or @at <RFC3339>"
                ))
            })?;
            return parse_cron(expanded);
        }
        parse_cron(line)
    }

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
}

impl Schedule {
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

impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Schedule::parse(s)
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

/// Parse an IANA time zone name.
pub fn parse_timezone(name: &str) -> Result<Tz, ScheduleError> {
    Tz::from_str(name).map_err(|_| ScheduleError(format!("unknown IANA time zone {name:?}")))
}

fn strip_keyword<'a>(line: &'a str, keyword: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(keyword)?;
    if rest.is_empty() || rest.starts_with(char::is_whitespace) {
        Some(rest.trim())
    } else {
        None
    }
}

fn expand_macro(line: &str) -> Option<&'static str> {
    Some(match line.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        _ => return None,
    })
}

fn parse_every(rest: &str) -> Result<Schedule, ScheduleError> {
    if rest.is_empty() {
        return Err(ScheduleError(
            "@every needs a duration, e.g. \"@every 90s\"".into(),
        ));
    }
    let period = humantime::parse_duration(rest)
        .map_err(|e| ScheduleError(format!("@every: invalid duration {rest:?}: {e}")))?;
    if period < MIN_EVERY {
        return Err(ScheduleError(format!(
            "@every: period must be at least 1s, got {rest:?}"
        )));
    }
    let period_ms = i64::try_from(period.as_millis())
        .ok()
        .filter(|ms| *ms <= 100 * 365 * 86_400_000)
        .ok_or_else(|| {
            ScheduleError(format!("@every: period {rest:?} is longer than 100 years"))
        })?;
    Ok(Schedule::Every { period_ms })
}

/// An `@at` instant counts in whole milliseconds, like every scheduled time
/// (a run id and a due event carry it in them): a finer fraction is dropped.
fn parse_at(rest: &str) -> Result<Schedule, ScheduleError> {
    DateTime::parse_from_rfc3339(rest)
        .map(|at| Schedule::At(at.with_timezone(&Utc).trunc_subsecs(3)))
        .map_err(|e| {
            ScheduleError(format!(
                "@at: expected an RFC 3339 instant such as 2030-01-01T09:00:00Z, got {rest:?}: {e}"
            ))
        })
}

fn parse_cron(line: &str) -> Result<Schedule, ScheduleError> {
    let fields = line.split_whitespace().count();
    if !(5..=7).contains(&fields) {
        return Err(ScheduleError(format!(
            "expected 5, 6 or 7 fields, got {fields}"
        )));
    }
    // croner takes an empty list element (`,5` or `1,,2`) as a field that
    // matches nothing, and then searches millennia to find no fire time
    // (seconds of CPU per request): refuse it by name first.
    let names: &[&str] = match fields {
        5 => &["minute", "hour", "day-of-month", "month", "day-of-week"],
        6 => &[
            "second",
            "minute",
            "hour",
            "day-of-month",
            "month",
            "day-of-week",
        ],
        _ => &[
            "second",
            "minute",
            "hour",
            "day-of-month",
            "month",
            "day-of-week",
            "year",
        ],
    };
    // Likewise a day-of-week that is only the `+` (both days must match)
    // modifier, or `+,1`: croner drops the `+` and is left with nothing.
    for (field, name) in line.split_whitespace().zip(names) {
        let list = match *name {
            "day-of-week" => field.strip_prefix('+').unwrap_or(field),
            _ => field,
        };
        if list.is_empty() {
            return Err(ScheduleError(format!(
                "{name} field {field:?} has no days after +"
            )));
        }
        if list.split(',').any(str::is_empty) {
            return Err(ScheduleError(format!(
                "{name} field {field:?} has an empty list element"
            )));
        }
    }
    // croner's default parser reads 5 fields as crontab (seconds = 0), 6 as
    // seconds-first and 7 as seconds-first with a trailing year: our forms.
    let cron =
        Cron::from_str(line).map_err(|e| ScheduleError(format!("invalid cron line: {e}")))?;
    // A line such as `0 0 30 2 *` parses but never matches: refuse it now
    // rather than letting the job sit silent forever.
    let probe = Utc
        .with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
        .single()
        .ok_or_else(|| ScheduleError("internal: bad probe instant".into()))?;
    if cron.find_next_occurrence(&probe, false).is_err() {
        return Err(ScheduleError(format!("cron line {line:?} never fires")));
    }
    let fields: Vec<&str> = line.split_whitespace().collect();
    Ok(Schedule::Cron(Arc::new(CronLine::new(cron, &fields))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("test instant")
            .with_timezone(&Utc)
    }

    fn next(line: &str, after: &str) -> String {
        let schedule = Schedule::parse(line).expect("parses");
        crate::time_format::rfc3339_millis(
            schedule
                .next_fire(utc(after), chrono_tz::UTC)
                .expect("fires"),
        )
    }

    #[test]
    fn six_fields_are_seconds_first() {
        assert_eq!(
            next("*/2 * * * * *", "2026-01-01T00:00:00.500Z"),
            "2026-01-01T00:00:02.000Z"
        );
        assert_eq!(
            next("30 0 12 * * *", "2026-01-01T00:00:00Z"),
            "2026-01-01T12:00:30.000Z"
        );
    }

    #[test]
    fn five_fields_are_crontab() {
        assert_eq!(
            next("30 4 * * *", "2026-01-01T05:00:00Z"),
            "2026-01-02T04:30:00.000Z"
        );
    }

    #[test]
    fn seven_fields_carry_a_year() {
        assert_eq!(
            next("0 0 0 1 1 * 2030", "2026-01-01T00:00:00Z"),
            "2030-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn next_fire_is_strictly_after() {
        assert_eq!(
            next("*/2 * * * * *", "2026-01-01T00:00:02Z"),
            "2026-01-01T00:00:04.000Z"
        );
        assert_eq!(
            next("@every 90s", "2026-01-01T00:00:00Z"),
            "2026-01-01T00:01:30.000Z"
        );
    }

    #[test]
    fn every_is_anchored_on_the_epoch() {
        // 1970-01-01T00:00:00Z + k * 90s: replicas agree whenever they start.
        assert_eq!(
            next("@every 90s", "2026-01-01T00:00:01Z"),
            "2026-01-01T00:01:30.000Z"
        );
        assert_eq!(
            next("@every 1h30m", "2026-01-01T00:10:00Z"),
            "2026-01-01T01:30:00.000Z"
        );
    }

    #[test]
    fn at_fires_once() {
        let at = Schedule::parse("@at 2030-05-01T10:00:00+02:00").expect("parses");
        assert_eq!(
            at.next_fire(utc("2026-01-01T00:00:00Z"), chrono_tz::UTC),
            Some(utc("2030-05-01T08:00:00Z"))
        );
        assert_eq!(
            at.next_fire(utc("2030-05-01T08:00:00Z"), chrono_tz::UTC),
            None
        );
    }

    #[test]
    fn an_at_instant_counts_in_whole_milliseconds() {
        let at = Schedule::parse("@at 2030-05-01T08:00:00.1239Z").expect("parses");
        assert_eq!(at.to_string(), "@at 2030-05-01T08:00:00.123Z");
        let fire = at.next_fire(utc("2026-01-01T00:00:00Z"), chrono_tz::UTC);
        assert_eq!(fire, Some(utc("2030-05-01T08:00:00.123Z")));
        // Asked again from its own whole millisecond, it has fired.
        assert_eq!(at.next_fire(fire.expect("fires"), chrono_tz::UTC), None);
    }

    #[test]
    fn macros_expand() {
        assert_eq!(
            next("@daily", "2026-01-01T05:00:00Z"),
            "2026-01-02T00:00:00.000Z"
        );
        assert_eq!(
            next("@midnight", "2026-01-01T05:00:00Z"),
            "2026-01-02T00:00:00.000Z"
        );
        assert_eq!(
            next("@hourly", "2026-01-01T05:10:00Z"),
            "2026-01-01T06:00:00.000Z"
        );
    }

    #[test]
    fn timezone_applies() {
        let s = Schedule::parse("0 9 * * *").expect("parses");
        let tz = parse_timezone("Europe/Berlin").expect("zone");
        assert_eq!(
            s.next_fire(utc("2026-01-01T00:00:00Z"), tz),
            Some(utc("2026-01-01T08:00:00Z"))
        );
    }

    /// The examples of crontab(5), with fire times worked out by hand
    /// (2026-01-01 is a Thursday).
    #[test]
    fn crontab_manual_examples() {
        let cases = [
            (
                "5 0 * * *",
                "2026-01-01T00:10:00Z",
                "2026-01-02T00:05:00.000Z",
            ),
            (
                "15 14 1 * *",
                "2026-01-01T15:00:00Z",
                "2026-02-01T14:15:00.000Z",
            ),
            (
                "0 22 * * 1-5",
                "2026-01-02T23:00:00Z",
                "2026-01-05T22:00:00.000Z",
            ),
            (
                "23 0-23/2 * * *",
                "2026-01-01T00:30:00Z",
                "2026-01-01T02:23:00.000Z",
            ),
            (
                "5 4 * * sun",
                "2026-01-01T00:00:00Z",
                "2026-01-04T04:05:00.000Z",
            ),
            // Vixie: day-of-month OR day-of-week when both are restricted.
            (
                "0 0 1,15 * 3",
                "2026-01-01T12:00:00Z",
                "2026-01-07T00:00:00.000Z",
            ),
            (
                "0 0 1,15 * 3",
                "2026-01-14T12:00:00Z",
                "2026-01-15T00:00:00.000Z",
            ),
            // 0 and 7 are both Sunday.
            (
                "0 12 * * 0",
                "2026-01-01T00:00:00Z",
                "2026-01-04T12:00:00.000Z",
            ),
            (
                "0 12 * * 7",
                "2026-01-01T00:00:00Z",
                "2026-01-04T12:00:00.000Z",
            ),
            // L, W and #.
            (
                "0 0 L * *",
                "2026-02-01T00:00:00Z",
                "2026-02-28T00:00:00.000Z",
            ),
            (
                "0 0 15W * *",
                "2026-08-01T00:00:00Z",
                "2026-08-14T00:00:00.000Z",
            ),
            (
                "0 0 * * MON#2",
                "2026-01-01T00:00:00Z",
                "2026-01-12T00:00:00.000Z",
            ),
            (
                "0 0 * JAN,JUL *",
                "2026-02-01T00:00:00Z",
                "2026-07-01T00:00:00.000Z",
            ),
        ];
        for (line, after, expected) in cases {
            assert_eq!(next(line, after), expected, "{line} after {after}");
        }
    }

    #[test]
    fn bad_lines_say_why() {
        let err = |l: &str| Schedule::parse(l).expect_err("must fail").0;
        assert_eq!(err("* * * *"), "expected 5, 6 or 7 fields, got 4");
        assert!(
            err("0 0 30 2 *").contains("never fires"),
            "{}",
            err("0 0 30 2 *")
        );
        assert!(err("@every 500ms").contains("at least 1s"));
        assert!(err("@every soon").contains("invalid duration"));
        assert!(err("@at tomorrow").contains("RFC 3339"));
        assert!(err("@fortnightly").contains("unknown macro"));
        assert!(err("61 * * * *").contains("invalid cron line"));
        // Found by the schedule_line fuzz target: croner searched for 2.5 s.
        assert_eq!(
            err(", 0 * 9 * 2"),
            "second field \",\" has an empty list element"
        );
        assert_eq!(
            err("0 1,,2 * * *"),
            "hour field \"1,,2\" has an empty list element"
        );
        // Found by the fuzzer too: a lone `+` day-of-week never matches and
        // cost tens of milliseconds to prove it.
        assert_eq!(
            err("0 0 9 * +"),
            "day-of-week field \"+\" has no days after +"
        );
        assert_eq!(
            err("0 0 9 * +,1"),
            "day-of-week field \"+,1\" has an empty list element"
        );
        assert!(err("0 1  007w0 * +").contains("has no days after +"));
        assert!(Schedule::parse("0 0 1 * +MON").is_ok());
        assert!(parse_timezone("Mars/Olympus").is_err());
    }
}
