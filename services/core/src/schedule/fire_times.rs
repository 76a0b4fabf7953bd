//! From a valid job to the instants it fires at: bounds, DST, jitter and
//! misfire recovery. Pure functions of (job, instants): every replica that
//! asks gets the same answer.
//!
//! Rules (documented in `docs/schedules.md`):
//! - `start_at` / `end_at` bound the *scheduled* times, both inclusive.
//! - Cron lines are read in the job's zone under Vixie cron(8)'s DST rule
//!   ([`super::wall_clock`]): fixed-time lines fire each match once (after a
//!   gap, at the first occurrence), wildcard lines follow real time.
//! - Jitter delays the publish of a fire by an offset in `[0, jitter)` derived
//!   from the run id, so it is the same on every replica; the scheduled time
//!   (and so the run id) does not change.
//! - Misfires: on recovery after `last_done`, `skip` fires nothing missed,
//!   `fire_once` fires the latest missed time, `fire_all` fires every missed
//!   time within `catchup_window` (at most [`MAX_CATCHUP_FIRES`], the latest).

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::Schedule;
use crate::events::RunId;
use crate::job::{MisfirePolicy, ValidJob};

/// Most fires a `fire_all` recovery emits for one job.
pub const MAX_CATCHUP_FIRES: usize = 1000;

/// What decides when a job fires, and nothing else: the part of a
/// definition a holder of a million jobs keeps (the ticker fetches the rest
/// by revision when a fire is published). 32 bytes: the rarely set bounds,
/// jitter and catch-up window live behind one pointer.
#[derive(Debug, Clone)]
pub struct Timing {
    pub schedule: Schedule,
    pub timezone: Tz,
    pub misfire: MisfirePolicy,
    rare: Option<Box<RareTiming>>,
}

/// The parts of a [`Timing`] most jobs leave at their defaults
/// ([`RareTiming::default`]): the bounds of its scheduled times, the
/// jitter of its publishes and how far back `fire_all` recovers.
#[derive(Debug, Clone, PartialEq)]
pub struct RareTiming {
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub jitter: Duration,
    pub catchup_window: Duration,
}

impl Default for RareTiming {
    fn default() -> Self {
        Self {
            start_at: None,
            end_at: None,
            jitter: Duration::ZERO,
            catchup_window: crate::job::DEFAULT_CATCHUP_WINDOW,
        }
    }
}

impl Timing {
    /// A jitter over [`crate::job::MAX_JITTER`] (which validation refuses)
    /// counts as that bound: holders of many fires keep each one's jitter in
    /// 32 bits.
    pub fn new(schedule: Schedule, timezone: Tz, misfire: MisfirePolicy, rare: RareTiming) -> Self {
        let rare = RareTiming {
            jitter: rare.jitter.min(crate::job::MAX_JITTER),
            ..rare
        };
        Self {
            schedule,
            timezone,
            misfire,
            rare: (rare != RareTiming::default()).then(|| Box::new(rare)),
        }
    }

    pub fn start_at(&self) -> Option<DateTime<Utc>> {
        self.rare.as_ref().and_then(|r| r.start_at)
    }

    pub fn end_at(&self) -> Option<DateTime<Utc>> {
        self.rare.as_ref().and_then(|r| r.end_at)
    }

    pub fn jitter(&self) -> Duration {
        self.rare.as_ref().map_or(Duration::ZERO, |r| r.jitter)
    }

    pub fn catchup_window(&self) -> Duration {
        self.rare
            .as_ref()
            .map_or(crate::job::DEFAULT_CATCHUP_WINDOW, |r| r.catchup_window)
    }

    /// The first scheduled time strictly after `after`, within the job's bounds.
    pub fn next_scheduled(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut cursor = after;
        if let Some(start) = self.start_at() {
            let just_before = start - chrono::Duration::milliseconds(1);
            if cursor < just_before {
                cursor = just_before;
            }
        }
        let t = self.schedule.next_fire(cursor, self.timezone)?;
        if self.end_at().is_some_and(|end| t > end) {
            return None;
        }
        Some(t)
    }

    /// The last scheduled time at or before `at`, within the job's bounds.
    pub fn previous_scheduled(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let cursor = match self.end_at() {
            Some(end) if end < at => end,
            _ => at,
        };
        let t = self.schedule.previous_fire(cursor, self.timezone)?;
        if self.start_at().is_some_and(|start| t < start) {
            return None;
        }
        Some(t)
    }

    /// When the due event of `job_id`'s fire at `scheduled` is published:
    /// `scheduled` plus the job's deterministic jitter.
    pub fn fire_instant(&self, job_id: &str, scheduled: DateTime<Utc>) -> DateTime<Utc> {
        let offset = jitter_offset(job_id, scheduled, self.jitter());
        scheduled + chrono::Duration::from_std(offset).unwrap_or_default()
    }

    /// Scheduled times in `(last_done, now]` that recovery fires, oldest
    /// first, per the misfire policy (of a job that is not paused).
    pub fn missed(&self, last_done: DateTime<Utc>, now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        if now <= last_done {
            return Vec::new();
        }
        match self.misfire {
            MisfirePolicy::Skip => Vec::new(),
            MisfirePolicy::FireOnce => self
                .previous_scheduled(now)
                .filter(|t| *t > last_done)
                .into_iter()
                .collect(),
            MisfirePolicy::FireAll => {
                let window = chrono::Duration::from_std(self.catchup_window()).unwrap_or_default();
                self.latest_scheduled_in(last_done.max(now - window), now)
            }
        }
    }

    /// Scheduled times in `(after, up_to]`, oldest first, at most
    /// [`MAX_CATCHUP_FIRES`] (the latest ones).
    pub fn latest_scheduled_in(
        &self,
        after: DateTime<Utc>,
        up_to: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        let mut times = std::collections::VecDeque::new();
        let mut cursor = after;
        while let Some(t) = self.next_scheduled(cursor) {
            if t > up_to {
                break;
            }
            times.push_back(t);
            if times.len() > MAX_CATCHUP_FIRES {
                times.pop_front();
            }
            cursor = t;
        }
        times.into()
    }
}

impl ValidJob {
    /// The part of the job that decides when it fires.
    pub fn timing(&self) -> Timing {
        Timing::new(
            self.schedule.clone(),
            self.timezone,
            self.misfire,
            RareTiming {
                start_at: self.start_at,
                end_at: self.end_at,
                jitter: self.jitter,
                catchup_window: self.catchup_window,
            },
        )
    }

    /// The first scheduled time strictly after `after`, within the job's bounds.
    pub fn next_scheduled(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.timing().next_scheduled(after)
    }

    /// The last scheduled time at or before `at`, within the job's bounds.
    pub fn previous_scheduled(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.timing().previous_scheduled(at)
    }

    /// The next `count` scheduled times after `after` (fewer when the
    /// schedule ends), oldest first.
    pub fn upcoming(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let timing = self.timing();
        std::iter::successors(timing.next_scheduled(after), |t| timing.next_scheduled(*t))
            .take(count)
            .collect()
    }

    /// When the due event of `scheduled` is published: `scheduled` plus the
    /// job's deterministic jitter.
    pub fn fire_instant(&self, scheduled: DateTime<Utc>) -> DateTime<Utc> {
        self.timing().fire_instant(&self.spec.id, scheduled)
    }

    /// Scheduled times in `(last_done, now]` that recovery fires, oldest first,
    /// per the job's misfire policy; none while it is paused.
    pub fn missed(&self, last_done: DateTime<Utc>, now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        if self.spec.paused {
            return Vec::new();
        }
        self.timing().missed(last_done, now)
    }

    /// Scheduled times in `(after, up_to]`, oldest first, at most
    /// [`MAX_CATCHUP_FIRES`] (the latest ones).
    pub fn latest_scheduled_in(
        &self,
        after: DateTime<Utc>,
        up_to: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        self.timing().latest_scheduled_in(after, up_to)
    }
}

impl ValidJob {
    /// The problem of a definition that, written at `written_at`, has no fire
    /// time after it (a past `@at`, a past year, `end_at` gone by): refused by
    /// the API and, from the bucket, rejected rather than silently idle. A
    /// one-shot written before its time and fired since is not this: it is done.
    pub(crate) fn never_fires_after(
        &self,
        written_at: DateTime<Utc>,
    ) -> Option<crate::job::FieldError> {
        let repeats = match &self.schedule {
            Schedule::Cron(line) => line.repeats_forever(),
            Schedule::Every { .. } | Schedule::AfterOnly => true,
            Schedule::At(_) => false,
        };
        if (repeats && self.end_at.is_none() && self.start_at.is_none())
            || matches!(self.schedule, Schedule::AfterOnly)
            || self.next_scheduled(written_at).is_some()
        {
            return None;
        }
        Some(never_fires_problem(
            self.spec.schedule_line(),
            &self.schedule,
            self.timezone,
            self.end_at.is_some(),
            written_at,
        ))
    }

    /// Scheduled times in `[from, to]`, oldest first; `Err(limit)` when there
    /// are more than `limit` of them.
    pub fn scheduled_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<DateTime<Utc>>, usize> {
        let timing = self.timing();
        let mut times = Vec::new();
        let mut cursor = from - chrono::Duration::milliseconds(1);
        while let Some(t) = timing.next_scheduled(cursor) {
            if t > to {
                break;
            }
            if times.len() == limit {
                return Err(limit);
            }
            times.push(t);
            cursor = t;
        }
        Ok(times)
    }
}

/// Why `schedule` (written as `text`, read in `tz`) has no fire after
/// `after`: said the same way by a job put and a schedule preview. `bounded`:
/// the job has an `end_at`.
pub fn never_fires_problem(
    text: &str,
    schedule: &Schedule,
    tz: Tz,
    bounded: bool,
    after: DateTime<Utc>,
) -> crate::job::FieldError {
    let only_in_gaps = match schedule {
        Schedule::Cron(line) => !bounded && !line.is_fixed_time() && line.matches_after(after, tz),
        _ => false,
    };
    let why = if only_in_gaps {
        format!(
            ": every wall time it matches from then on falls in a daylight-saving gap of {}, \
             and a line whose minute or hour field starts with * follows real time, so those \
             times do not fire (give the minute and hour as numbers to fire right after the gap)",
            tz.name()
        )
    } else if bounded {
        " (check end_at)".to_string()
    } else {
        String::new()
    };
    crate::job::FieldError::new(
        "schedule",
        "never_fires",
        format!(
            "{text:?} has no fire time after {}{why}",
            crate::time_format::rfc3339_millis(after),
        ),
    )
}

/// Offset in `[0, max)` for the fire of `job_id` at `scheduled`, derived from
/// its run id so that every replica computes the same one.
pub fn jitter_offset(job_id: &str, scheduled: DateTime<Utc>, max: Duration) -> Duration {
    let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if max_ms == 0 {
        return Duration::ZERO;
    }
    let uuid = RunId::fire_uuid(job_id, scheduled);
    let bytes = uuid.as_bytes();
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[8..16]);
    Duration::from_millis(u64::from_be_bytes(word) % max_ms)
}

#[cfg(test)]
mod tests;
