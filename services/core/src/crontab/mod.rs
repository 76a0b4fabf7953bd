//! Crontabs read as Debian's cron reads them, and turned into jobs.
//!
//! Users bring crontabs (`crontab -l`, `/etc/crontab`, `/etc/cron.d/*`)
//! and want the same commands to run at the same times under jetcron. A
//! line means what Debian's cron 3.0pl1 (Vixie cron with Debian's patches)
//! makes of it, not what crontab(5) says nor what jetcron's own schedule
//! language would make of the same text: the rules, and where the page and
//! the binary disagree, are in `docs/notes/jobs-as-code-next.md`, section
//! C. Two steps, both pure (no I/O, no clock, so the CLI, tests and a fuzz
//! target call them alike):
//!
//! - [`parse`]: the text to [`Entry`]s, with a [`Refusal`] for each line
//!   cron would refuse or jetcron cannot carry out (`@reboot`, `fri-mon`,
//!   a line that never fires) and [`Warning`]s for what changes meaning.
//!   Every refusal and warning names its 1-based line.
//! - [`translate`]: one entry to a job definition (JSON) that
//!   `job::parse_written` accepts, with notes for the reader of the plan;
//!   [`number_repeated_ids`] makes the ids of a file's jobs unique.
//!
//! The files, imports going one way:
//! - `env_line`: an environment assignment, by Debian's `load_env`;
//! - `time_fields`: the five time fields and the macros as Vixie's
//!   `entry.c` reads them (bitsets, `DOM_STAR`/`DOW_STAR`), and the
//!   jetcron schedule line that fires at the same minutes;
//! - `command`: the command and its standard input (`%`, `do_command.c`);
//! - `entry_line`: a job line taken apart (fields or macro, user, command);
//! - `file`: the whole file: comments, environment, entries, refusals;
//! - `shell_text`: shell quoting and here-documents;
//! - `job_id`: a job's id from its line, and numbering repeats;
//! - `translate`: an entry to a job definition.
//!
//! Labels: job label keys may contain dots (`[A-Za-z0-9][A-Za-z0-9_.-]{0,62}`),
//! so the labels are `crontab.file`, `crontab.line` and `crontab.user` as
//! planned; a user crontab has no user column, so its jobs have no
//! `crontab.user`.

mod command;
mod entry_line;
mod env_line;
mod file;
mod job_id;
mod shell_text;
mod time_fields;
mod translate;

pub use file::{cron_reads_cron_d_file, parse, MAX_LINES};
pub use job_id::number_repeated_ids;
pub use translate::{translate, TranslateOptions, Translated};

/// Which kind of crontab a text is: a user's (`crontab -e`) or a system
/// one (`/etc/crontab`, `/etc/cron.d/*`), whose lines name the user to
/// run as between the time fields and the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrontabKind {
    User,
    System,
}

/// What [`parse`] made of a crontab: the job lines it can carry over, the
/// lines it refuses, and what the reader should know.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub entries: Vec<Entry>,
    pub refusals: Vec<Refusal>,
    pub warnings: Vec<Warning>,
}

/// One job line of a crontab, as cron would run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// 1-based line number.
    pub line: usize,
    /// The five time fields or the macro, as written.
    pub timing: Timing,
    /// The user column of a system crontab.
    pub user: Option<String>,
    /// Everything after the time fields (and user) as written: `%` and all.
    pub command_as_written: String,
    /// The command cron runs (`SHELL -c`): up to the first bare `%`, with
    /// `\%` read as `%`.
    pub command: String,
    /// What cron writes to the command's standard input: the text after the
    /// first bare `%`, each `%` a newline, ending in a newline. `None` when
    /// there is no `%` or nothing after it.
    pub stdin: Option<String>,
    /// The assignments in force for this line, in the order first set (a
    /// later assignment of the same name replaces the value in place).
    pub env: Vec<EnvVar>,
    /// The comment lines directly above (no blank or other line between),
    /// without the `#` and one space after it.
    pub comments: Vec<String>,
}

/// When an entry runs, as written in the crontab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Timing {
    /// minute, hour, day-of-month, month, day-of-week.
    Fields([String; 5]),
    /// `@daily` and the like (never `@reboot`, which is refused).
    Macro(String),
}

impl Timing {
    /// The timing as written, fields joined by one space.
    pub fn as_written(&self) -> String {
        match self {
            Timing::Fields(fields) => fields.join(" "),
            Timing::Macro(name) => name.clone(),
        }
    }

    /// The jetcron schedule line that fires when cron would: the fields as
    /// written, with `+` before day-of-week where cron requires both day
    /// fields to match and jetcron would take either (see
    /// `time_fields::schedule_line`).
    pub fn schedule_line(&self) -> String {
        match self {
            Timing::Fields(fields) => time_fields::schedule_line(fields),
            Timing::Macro(name) => name.clone(),
        }
    }
}

/// One environment assignment (`NAME=value`) in force for an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
    /// The line that set it.
    pub line: usize,
}

/// A line that does not become a job, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 1-based line number.
    pub line: usize,
    pub reason: String,
}

/// Something a line does differently under jetcron, or a hazard of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// 1-based line number.
    pub line: usize,
    pub message: String,
}

/// Why a line is refused, and whether cron itself refuses it: Debian's
/// cron ignores a whole file for one syntax error (it logs "Syntax error,
/// this crontab file will be ignored"), which the reader should know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LineProblem {
    /// cron refuses the line too.
    Syntax(String),
    /// cron takes the line; jetcron cannot do what cron would.
    Unsupported(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

#[cfg(test)]
mod tests;
