//! What a schedule line will do, shown before it is saved: its next fires
//! with their wall times, what the DST rule did to each, the matches it
//! dropped, and the line in English.
//!
//! One pure function serves the preview request (`GET
//! /v1/schedules/preview`, `jetcron.api.schedules.preview`) and the
//! `preview` of `GET /v1/jobs/{id}`, so both say the same. Invalid input is
//! refused with the same field errors as a job put.

use chrono::{DateTime, NaiveDateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use super::fire_times::never_fires_problem;
use super::wall_clock::{DroppedMatch, DstEffect};
use super::{parse_timezone, Schedule};
use crate::job::FieldError;
use crate::time_format::rfc3339_millis;

/// Fires shown when the request names no count.
pub const DEFAULT_COUNT: usize = 10;
/// Most fires one preview shows.
pub const MAX_COUNT: usize = 1000;

/// A preview request (the NATS body; the HTTP query has the same fields).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewRequest {
    /// The schedule line, as in a job definition.
    pub schedule: String,
    /// IANA time zone; UTC when absent.
    #[serde(default)]
    pub timezone: Option<String>,
    /// How many fires, 1 to 1000 (default 10).
    #[serde(default)]
    pub count: Option<usize>,
    /// Fires strictly after this RFC 3339 instant (default: now).
    #[serde(default)]
    pub from: Option<String>,
}

/// The answer.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Preview {
    pub schedule: String,
    pub timezone: String,
    /// The line in English, with its zone.
    pub description: String,
    /// `fixed-time` or `wildcard` (cron lines: how DST treats them),
    /// `interval` (`@every`) or `one-shot` (`@at`).
    pub kind: &'static str,
    pub fires: Vec<PreviewFire>,
    /// Matches between the first and the last fire shown that do not fire.
    pub dropped: Vec<Dropped>,
}

/// One fire.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PreviewFire {
    /// The instant, UTC.
    pub at: String,
    /// The zone's wall time then, with its offset.
    pub local: String,
    /// What the DST rule did: `moved_after_gap`, `first_occurrence_only`,
    /// `repeated_first` or `repeated_second`; absent when nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<&'static str>,
    /// The same in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A wall time the line matches that does not fire.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Dropped {
    /// The wall time, without offset.
    pub wall_time: String,
    /// `in_gap` (a wildcard line's match in a spring-forward gap) or
    /// `second_occurrence` (a fixed-time line's match repeated by a fall-back).
    pub reason: &'static str,
    /// For `second_occurrence`: the instant that did not fire.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

/// A parsed, checked request.
pub struct Checked {
    pub schedule: Schedule,
    pub timezone: Tz,
    pub count: usize,
    pub from: DateTime<Utc>,
}

impl PreviewRequest {
    /// Every problem of the request at once, named by field.
    pub fn check(&self, now: DateTime<Utc>) -> Result<Checked, Vec<FieldError>> {
        let mut problems = Vec::new();
        let schedule = Schedule::parse(&self.schedule)
            .map_err(|e| problems.push(FieldError::new("schedule", "invalid_schedule", e.0)))
            .ok();
        let timezone = match &self.timezone {
            None => Some(chrono_tz::UTC),
            Some(name) => parse_timezone(name)
                .map_err(|e| problems.push(FieldError::new("timezone", "invalid_timezone", e.0)))
                .ok(),
        };
        let count = self.count.unwrap_or(DEFAULT_COUNT);
        if !(1..=MAX_COUNT).contains(&count) {
            problems.push(FieldError::new(
                "count",
                "out_of_range",
                format!("must be 1 to {MAX_COUNT}, got {count}"),
            ));
        }
        let from = match &self.from {
            None => Some(now),
            Some(text) => DateTime::parse_from_rfc3339(text)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| {
                    problems.push(FieldError::new(
                        "from",
                        "invalid_time",
                        format!("expected an RFC 3339 instant, got {text:?}: {e}"),
                    ))
                })
                .ok(),
        };
        match (schedule, timezone, from) {
            (Some(schedule), Some(timezone), Some(from)) if problems.is_empty() => {
                if schedule.next_fire(from, timezone).is_none() {
                    return Err(vec![never_fires_problem(
                        &self.schedule,
                        &schedule,
                        timezone,
                        false,
                        from,
                    )]);
                }
                Ok(Checked {
                    schedule,
                    timezone,
                    count,
                    from,
                })
            }
            _ => Err(problems),
        }
    }
}

/// The preview of a checked request.
pub fn preview(text: &str, checked: &Checked) -> Preview {
    let mut fires = Vec::new();
    let mut cursor = checked.from;
    while fires.len() < checked.count {
        match checked.schedule.next_fire(cursor, checked.timezone) {
            Some(t) => {
                fires.push(t);
                cursor = t;
            }
            None => break,
        }
    }
    describe(text, &checked.schedule, checked.timezone, &fires)
}

/// The preview of `fires` (consecutive fires of `schedule` in `tz`).
pub fn describe(text: &str, schedule: &Schedule, tz: Tz, fires: &[DateTime<Utc>]) -> Preview {
    let (kind, description) = match schedule {
        Schedule::Cron(line) => (
            if line.is_fixed_time() {
                "fixed-time"
            } else {
                "wildcard"
            },
            format!("{}, in {}", line.describe(), tz.name()),
        ),
        Schedule::Every { period_ms } => (
            "interval",
            format!(
                "Every {}, counted from 1970-01-01T00:00:00Z (the time zone does not apply)",
                crate::time_format::duration_text(std::time::Duration::from_millis(
                    u64::try_from(*period_ms).unwrap_or(0)
                ))
            ),
        ),
        Schedule::At(at) => ("one-shot", format!("Once, at {}", rfc3339_millis(*at))),
        Schedule::AfterOnly => (
            "after",
            "No time of its own: runs when a parent job in after ends".to_string(),
        ),
    };
    let fires_shown = fires
        .iter()
        .map(|at| {
            let effect = match schedule {
                Schedule::Cron(line) => line.dst_effect(*at, tz),
                _ => None,
            };
            PreviewFire {
                at: rfc3339_millis(*at),
                local: at
                    .with_timezone(&tz)
                    .format("%Y-%m-%dT%H:%M:%S%:z")
                    .to_string(),
                dst: effect.map(effect_code),
                note: effect.map(|e| effect_note(e, tz)),
            }
        })
        .collect();
    // Between the first fire shown and the last (a job's first fire may be
    // far past `from`, at its `start_at`).
    let dropped = match (schedule, fires.first(), fires.last()) {
        (Schedule::Cron(line), Some(first), Some(last)) => line
            .dropped_between(*first - chrono::Duration::seconds(1), *last, tz, MAX_COUNT)
            .into_iter()
            .map(|d| match d {
                DroppedMatch::InGap { wall_time } => Dropped {
                    wall_time: wall_text(wall_time),
                    reason: "in_gap",
                    at: None,
                },
                DroppedMatch::SecondOccurrence { wall_time, at } => Dropped {
                    wall_time: wall_text(wall_time),
                    reason: "second_occurrence",
                    at: Some(rfc3339_millis(at)),
                },
            })
            .collect(),
        _ => Vec::new(),
    };
    Preview {
        schedule: text.to_string(),
        timezone: tz.name().to_string(),
        description,
        kind,
        fires: fires_shown,
        dropped,
    }
}

fn wall_text(wall: NaiveDateTime) -> String {
    wall.format("%Y-%m-%dT%H:%M:%S").to_string()
}

fn effect_code(effect: DstEffect) -> &'static str {
    match effect {
        DstEffect::MovedAfterGap { .. } => "moved_after_gap",
        DstEffect::FirstOccurrenceOnly => "first_occurrence_only",
        DstEffect::RepeatedFirst => "repeated_first",
        DstEffect::RepeatedSecond => "repeated_second",
    }
}

fn effect_note(effect: DstEffect, tz: Tz) -> String {
    match effect {
        DstEffect::MovedAfterGap { wall_time } => format!(
            "{} does not exist in {} (clocks go forward): a fixed-time line fires right after the gap",
            wall_text(wall_time),
            tz.name()
        ),
        DstEffect::FirstOccurrenceOnly => {
            "this wall time happens twice (clocks go back): a fixed-time line fires at the first only"
                .to_string()
        }
        DstEffect::RepeatedFirst => {
            "this wall time happens twice (clocks go back): a wildcard line fires at both; this is the first"
                .to_string()
        }
        DstEffect::RepeatedSecond => {
            "this wall time happens twice (clocks go back): a wildcard line fires at both; this is the second"
                .to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request's "now": fires are shown after it when no `from` is given.
    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2027-01-01T12:00:00Z")
            .expect("instant")
            .with_timezone(&Utc)
    }

    fn request(schedule: &str, tz: Option<&str>, count: usize, from: &str) -> PreviewRequest {
        PreviewRequest {
            schedule: schedule.into(),
            timezone: tz.map(Into::into),
            count: Some(count),
            from: Some(from.into()),
        }
    }

    #[test]
    fn a_spring_forward_night_shows_the_moved_fire() {
        let r = request(
            "30 2 * * *",
            Some("America/New_York"),
            3,
            "2027-03-13T00:00:00Z",
        );
        let p = preview(&r.schedule, &r.check(now()).expect("valid"));
        assert_eq!(p.kind, "fixed-time");
        assert_eq!(p.fires[1].at, "2027-03-14T07:00:00.000Z");
        assert_eq!(p.fires[1].local, "2027-03-14T03:00:00-04:00");
        assert_eq!(p.fires[1].dst, Some("moved_after_gap"));
        assert!(p.fires[1]
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("2027-03-14T02:30:00"));
        assert_eq!(p.fires[0].dst, None);
        assert!(
            p.description.ends_with(", in America/New_York"),
            "{}",
            p.description
        );
    }

    #[test]
    fn a_fall_back_night_shows_repeats_and_drops() {
        let r = request(
            "0 * * * *",
            Some("America/New_York"),
            3,
            "2027-11-07T04:30:00Z",
        );
        let p = preview(&r.schedule, &r.check(now()).expect("valid"));
        let dst: Vec<_> = p.fires.iter().map(|f| f.dst).collect();
        assert_eq!(dst, [Some("repeated_first"), Some("repeated_second"), None]);
        let r = request(
            "30 1 * * *",
            Some("America/New_York"),
            2,
            "2027-11-06T12:00:00Z",
        );
        let p = preview(&r.schedule, &r.check(now()).expect("valid"));
        assert_eq!(p.fires[0].dst, Some("first_occurrence_only"));
        assert_eq!(p.dropped.len(), 1);
        assert_eq!(p.dropped[0].reason, "second_occurrence");
        assert_eq!(p.dropped[0].at.as_deref(), Some("2027-11-07T06:30:00.000Z"));
    }

    #[test]
    fn without_from_the_fires_come_after_now() {
        let r = PreviewRequest {
            from: None,
            ..request("0 12 * * *", None, 2, "unused")
        };
        let p = preview(&r.schedule, &r.check(now()).expect("valid"));
        let at: Vec<&str> = p.fires.iter().map(|f| f.at.as_str()).collect();
        assert_eq!(at, ["2027-01-02T12:00:00.000Z", "2027-01-03T12:00:00.000Z"]);
    }

    #[test]
    fn bad_requests_name_every_field() {
        let r = PreviewRequest {
            schedule: "* * *".into(),
            timezone: Some("Mars/Base".into()),
            count: Some(5000),
            from: Some("yesterday".into()),
        };
        let fields: Vec<_> = r
            .check(now())
            .err()
            .expect("refused")
            .into_iter()
            .map(|p| p.field)
            .collect();
        assert_eq!(fields, ["schedule", "timezone", "count", "from"]);
        let gap_only = request(
            "0 */15 2 14 3 * 2027",
            Some("America/New_York"),
            5,
            "2027-01-01T00:00:00Z",
        );
        let problems = gap_only.check(now()).err().expect("never fires");
        assert_eq!(problems[0].code, "never_fires");
        assert!(
            problems[0].message.contains("daylight-saving gap"),
            "{}",
            problems[0].message
        );
    }
}
