//! Parsed schedule lines by text, so that the jobs sharing a line share one
//! parse. A parsed cron line holds about 5 KB (croner keeps a byte per
//! possible value of each field, years 1 to 5000 included), and parsing is
//! a good part of reading a million definitions (perf: croner's parse was a
//! third of `jetcron all`'s CPU while it read a million jobs). Every holder
//! of many jobs (the ticker, the gateway's catalog and scans) reads lines
//! through one [`SharedLines`] per process: `jetcron all` parses each
//! distinct line once, not once per service.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::schedule::{Schedule, ScheduleError};

pub struct ParsedLines {
    parsed: HashMap<Box<str>, Schedule>,
    max: usize,
}

/// Lines kept by default: every distinct line a process holds jobs of is
/// kept parsed by those jobs anyway, so the bound matters only past it
/// (about 5 KB each).
pub const DEFAULT_MAX_LINES: usize = 100_000;

impl Default for ParsedLines {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_LINES)
    }
}

impl ParsedLines {
    /// Keeps at most `max` lines; lines seen past that are parsed each
    /// time (not swapped in: a reader going round more lines than the bound
    /// would then miss every time).
    pub fn new(max: usize) -> Self {
        Self {
            parsed: HashMap::new(),
            max: max.max(1),
        }
    }

    /// `line` parsed, shared with the earlier parses of the same text.
    /// Refused lines are not kept.
    pub fn parse(&mut self, line: &str) -> Result<Schedule, ScheduleError> {
        if let Some(shared) = self.parsed.get(line) {
            return Ok(shared.clone());
        }
        let parsed = Schedule::parse(line)?;
        self.keep(line, &parsed);
        Ok(parsed)
    }

    fn keep(&mut self, line: &str, parsed: &Schedule) {
        if self.parsed.len() < self.max {
            self.parsed.insert(line.into(), parsed.clone());
        }
    }

    pub fn len(&self) -> usize {
        self.parsed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parsed.is_empty()
    }
}

/// One [`ParsedLines`] shared by the services of a process.
#[derive(Clone, Default)]
pub struct SharedLines(Arc<Mutex<ParsedLines>>);

impl SharedLines {
    pub fn new(max: usize) -> Self {
        Self(Arc::new(Mutex::new(ParsedLines::new(max))))
    }

    /// `line` parsed, shared with every earlier parse of the same text in
    /// this process; the parse itself runs outside the lock.
    pub fn parse(&self, line: &str) -> Result<Schedule, ScheduleError> {
        if let Some(shared) = self.lock().parsed.get(line) {
            return Ok(shared.clone());
        }
        let parsed = Schedule::parse(line)?;
        self.lock().keep(line, &parsed);
        Ok(parsed)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
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
    fn equal_lines_share_one_parse_and_the_bound_starts_over() {
        let mut lines = ParsedLines::new(2);
        let (Schedule::Cron(a), Schedule::Cron(b)) = (
            lines.parse("0 0 0 * * *").expect("valid"),
            lines.parse("0 0 0 * * *").expect("valid"),
        ) else {
            panic!("cron lines");
        };
        assert!(std::sync::Arc::ptr_eq(&a, &b));
        assert!(lines.parse("0 0 61 * * *").is_err());
        assert_eq!(lines.len(), 1, "a refused line is not kept");
        lines.parse("1 0 0 * * *").expect("valid");
        assert_eq!(lines.len(), 2);
        lines.parse("2 0 0 * * *").expect("valid");
        assert_eq!(lines.len(), 2, "past the bound nothing more is kept");
        assert!(lines.parse("1 0 0 * * *").is_ok());
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
}
