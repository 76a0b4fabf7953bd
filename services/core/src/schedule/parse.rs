//! A schedule line's text to a [`Schedule`]: the macros, `@every`, `@at`
//! and the cron forms (`line` says what each means), each
//! refused with a message meant for the user. croner parses the cron
//! fields; what it takes but should not (an empty list element, a line
//! that never fires) is refused here first.

use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, SubsecRound, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;

use super::wall_clock::CronLine;
use super::{Schedule, ScheduleError, MIN_EVERY};

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
}

impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Schedule::parse(s)
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
    refuse_empty_lists(line, field_names(fields))?;
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

/// The names of a cron line's fields, for a line of `count` (5 to 7) fields.
fn field_names(count: usize) -> &'static [&'static str] {
    match count {
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
    }
}

/// croner takes an empty list element (`,5` or `1,,2`) as a field that
/// matches nothing, and then searches millennia to find no fire time
/// (seconds of CPU per request): refuse it by name first. Likewise a
/// day-of-week that is only the `+` (both days must match) modifier, or
/// `+,1`: croner drops the `+` and is left with nothing.
fn refuse_empty_lists(line: &str, names: &[&str]) -> Result<(), ScheduleError> {
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
    Ok(())
}
