//! Parsed schedule lines by text, so that the jobs sharing a line share one
//! parse. A parsed cron line holds about 5 KB (croner keeps a byte per
//! possible value of each field, years 1 to 5000 included), and parsing is
//! a good part of reading a million definitions (perf: croner's parse was a
//! third of `jetcron all`'s CPU while it read a million jobs). Every holder
//! of many jobs (the ticker, the gateway's catalog and scans) and the
//! executor (which validates the definition every due event carries) read
//! lines through one [`SharedLines`] per process: `jetcron all` parses each
//! distinct line once, not once per service.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use super::wall_clock::CronLine;
use super::{Schedule, ScheduleError};

struct ParsedLines {
    /// Cron lines by text, as long as some job holds them.
    parsed: HashMap<Box<str>, Weak<CronLine>>,
    /// The lines parsed last, held here too: a reader that keeps only the
    /// text (the gateway's catalog) still parses each line once per round.
    recent: VecDeque<Arc<CronLine>>,
    /// Size of `parsed` after the last sweep of dead entries.
    swept_at: usize,
}

/// Lines [`SharedLines`] holds on its own (about 5 KB each).
pub const RECENT_LINES: usize = 4_096;

impl Default for ParsedLines {
    fn default() -> Self {
        Self {
            parsed: HashMap::new(),
            recent: VecDeque::with_capacity(RECENT_LINES),
            swept_at: 1_024,
        }
    }
}

impl ParsedLines {
    fn held(&self, line: &str) -> Option<Schedule> {
        self.parsed
            .get(line)
            .and_then(Weak::upgrade)
            .map(Schedule::Cron)
    }

    fn keep(&mut self, line: &str, parsed: &Schedule) {
        let Schedule::Cron(cron) = parsed else {
            return;
        };
        self.parsed.insert(line.into(), Arc::downgrade(cron));
        if self.recent.len() == RECENT_LINES {
            self.recent.pop_front();
        }
        self.recent.push_back(Arc::clone(cron));
        if self.parsed.len() >= self.swept_at * 2 {
            self.parsed.retain(|_, line| line.strong_count() > 0);
            self.swept_at = self.parsed.len().max(1_024);
        }
    }

    /// Lines known (held by some job or among the recent ones).
    fn len(&self) -> usize {
        self.parsed
            .values()
            .filter(|line| line.strong_count() > 0)
            .count()
    }
}

/// Parsed schedule lines, one set shared by the services of a process.
#[derive(Clone, Default)]
pub struct SharedLines(Arc<Mutex<ParsedLines>>);

impl SharedLines {
    /// `line` parsed, shared with every earlier parse of the same text in
    /// this process that is still held. Refused lines are not kept; `@every`
    /// and `@at` cost nothing to parse and are not kept either. The parse
    /// itself runs outside the lock.
    pub fn parse(&self, line: &str) -> Result<Schedule, ScheduleError> {
        if let Some(shared) = self.lock().held(line) {
            return Ok(shared);
        }
        let parsed = Schedule::parse(line)?;
        self.lock().keep(line, &parsed);
        Ok(parsed)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ParsedLines> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for SharedLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLines")
            .field("lines", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_lines_share_one_parse_while_held() {
        let lines = SharedLines::default();
        let (Schedule::Cron(a), Schedule::Cron(b)) = (
            lines.parse("0 0 0 * * *").expect("valid"),
            lines.parse("0 0 0 * * *").expect("valid"),
        ) else {
            panic!("cron lines");
        };
        assert!(std::sync::Arc::ptr_eq(&a, &b));
        assert!(lines.parse("0 0 61 * * *").is_err());
        assert!(lines.parse("@every 5s").is_ok());
        assert_eq!(lines.len(), 1, "refused and cheap lines are not kept");
    }

    #[test]
    fn lines_nobody_holds_are_let_go_past_the_recent_ones() {
        let lines = SharedLines::default();
        for k in 0..RECENT_LINES + 100 {
            let line = format!("{} {} {} * * *", k % 60, (k / 60) % 60, (k / 3600) % 24);
            lines.parse(&line).expect("valid");
        }
        assert!(lines.len() <= RECENT_LINES, "{} lines held", lines.len());
    }

    #[test]
    fn clones_of_shared_lines_share_their_parses() {
        let lines = SharedLines::default();
        let other = lines.clone();
        let (Schedule::Cron(a), Schedule::Cron(b)) = (
            lines.parse("0 30 9 * * *").expect("valid"),
            other.parse("0 30 9 * * *").expect("valid"),
        ) else {
            panic!("cron lines");
        };
        assert!(std::sync::Arc::ptr_eq(&a, &b));
        assert_eq!(other.len(), 1);
    }

    /// What the executor does with every due event's definition.
    #[test]
    fn a_job_validated_through_shared_lines_is_the_job_validated_alone() {
        let lines = SharedLines::default();
        let spec = |schedule: &str| {
            serde_json::from_value::<crate::job::JobSpec>(serde_json::json!({
                "id": "shared",
                "schedule": schedule,
                "timezone": "Europe/Berlin",
                "target": {"type": "nats", "subject": "a.b"}
            }))
            .expect("spec")
        };
        let from = chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("instant");
        let next = |job: crate::job::ValidJob| job.schedule.next_fire(from, job.timezone);
        for line in ["*/5 * * * * *", "*/5 * * * * *", "61 * * * *", "61 * * * *"] {
            let alone = crate::job::validate(spec(line)).map(next);
            let shared = crate::job::validate_with(spec(line), &mut |l| lines.parse(l)).map(next);
            assert_eq!(alone, shared, "{line}");
        }
        assert_eq!(lines.len(), 1, "the refused line is not kept");
    }
}
