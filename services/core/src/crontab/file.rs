//! A whole crontab, line by line, as Debian's cron reads it: blank lines
//! and lines whose first non-blank is `#` are skipped (there are no
//! trailing comments and no continuation lines); every other line is an
//! environment assignment if it reads as one, else a job line. A file
//! without a final newline is ignored whole by cron, and refused whole
//! here. A line cron refuses is refused here too, but the other lines are
//! still read: cron would ignore the whole file, which a warning says.

use std::collections::BTreeSet;

use super::command;
use super::entry_line;
use super::env_line::{self, EnvLine};
use super::{CrontabKind, Entry, EnvVar, LineProblem, Parsed, Refusal, Warning};

/// Most lines read from one file; a longer file is refused whole.
pub const MAX_LINES: usize = 10_000;

/// Read a crontab. Pure: the caller reads the file and says its kind.
pub fn parse(text: &str, kind: CrontabKind) -> Parsed {
    let mut lines: Vec<&str> = text.split('\n').collect();
    // The piece after the last newline: empty in a well-formed file.
    let unterminated = lines.pop().unwrap_or_default();
    if !unterminated.is_empty() {
        let line = lines.len() + 1;
        return refused_whole(
            line,
            format!("the file does not end with a newline after line {line}: cron ignores such a file whole, so nothing in it is imported; add a newline at the end"),
        );
    }
    if lines.len() > MAX_LINES {
        return refused_whole(
            MAX_LINES + 1,
            format!(
                "the file has {} lines, more than the {MAX_LINES} read from one crontab; nothing in it is imported",
                lines.len()
            ),
        );
    }
    let mut reader = FileReader::new(kind);
    for (index, line) in lines.iter().enumerate() {
        reader.read_line(index + 1, line);
    }
    reader.finish()
}

/// Whether cron reads a file of `/etc/cron.d` named `name`: it skips names
/// that are not all letters, digits, `_` and `-` (`backup.bak`, `x~`).
pub fn cron_reads_cron_d_file(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn refused_whole(line: usize, reason: String) -> Parsed {
    Parsed {
        refusals: vec![Refusal { line, reason }],
        ..Parsed::default()
    }
}

/// The state carried from line to line.
struct FileReader {
    kind: CrontabKind,
    env: Vec<EnvVar>,
    /// The comment lines since the last other line.
    comments: Vec<String>,
    users: BTreeSet<String>,
    first_syntax_error: Option<usize>,
    parsed: Parsed,
}

impl FileReader {
    fn new(kind: CrontabKind) -> Self {
        Self {
            kind,
            env: Vec::new(),
            comments: Vec::new(),
            users: BTreeSet::new(),
            first_syntax_error: None,
            parsed: Parsed::default(),
        }
    }

    fn read_line(&mut self, number: usize, raw: &str) {
        let line = raw.trim_start_matches([' ', '\t']);
        if let Some(comment) = line.strip_prefix('#') {
            let comment = comment.strip_prefix(' ').unwrap_or(comment);
            self.comments
                .push(comment.trim_end_matches('\r').to_string());
            return;
        }
        let comments = std::mem::take(&mut self.comments);
        if line.is_empty() {
            return;
        }
        if line.contains('\0') {
            return self.refuse(
                number,
                LineProblem::Syntax("the line holds a NUL byte".into()),
            );
        }
        match env_line::read(line) {
            EnvLine::Assignment { name, value } => self.assign(number, name, value),
            EnvLine::Broken(why) => self.refuse(number, LineProblem::Syntax(why)),
            EnvLine::NotAssignment => self.read_job_line(number, line, comments),
        }
    }

    fn read_job_line(&mut self, number: usize, line: &str, comments: Vec<String>) {
        if line.ends_with('\r') {
            const WHY: &str = "the line ends with a carriage return (a file with CRLF line ends?): cron keeps it in the line; convert the file to LF line ends";
            // A blank line with a CR is a bad minute field to cron.
            let problem = if line.trim_end_matches(['\r', ' ', '\t']).is_empty() {
                LineProblem::Syntax(WHY.into())
            } else {
                LineProblem::Unsupported(WHY.into())
            };
            return self.refuse(number, problem);
        }
        let job = match entry_line::read(line, self.kind) {
            Ok(job) => job,
            Err(problem) => return self.refuse(number, problem),
        };
        let split = command::split(&job.command_as_written);
        if split.command.trim().is_empty() {
            return self.refuse(
                number,
                LineProblem::Unsupported(
                    "the command before the first % is empty: cron runs nothing".into(),
                ),
            );
        }
        if let Some(user) = &job.user {
            if self.users.insert(user.clone()) {
                self.warn(number, format!("the jobs of user {user:?} run as {user:?} under cron, as the executor's user under jetcron"));
            }
        }
        self.parsed.entries.push(Entry {
            line: number,
            timing: job.timing,
            user: job.user,
            command_as_written: job.command_as_written,
            command: split.command,
            stdin: split.stdin,
            env: self.env.clone(),
            comments,
        });
    }

    /// An assignment applies to the later lines; a name set again keeps
    /// its place with the new value.
    fn assign(&mut self, number: usize, name: String, value: String) {
        if name == "CRON_TZ" {
            self.warn(number, format!("CRON_TZ is cronie's: Debian's cron only passes it to the commands; jetcron reads the schedules of later lines in {value:?}"));
        }
        match self.env.iter_mut().find(|var| var.name == name) {
            Some(var) => {
                var.value = value;
                var.line = number;
            }
            None => self.env.push(EnvVar {
                name,
                value,
                line: number,
            }),
        }
    }

    fn refuse(&mut self, line: usize, problem: LineProblem) {
        let reason = match problem {
            LineProblem::Syntax(why) => {
                self.first_syntax_error.get_or_insert(line);
                why
            }
            LineProblem::Unsupported(why) => why,
        };
        self.parsed.refusals.push(Refusal { line, reason });
    }

    fn warn(&mut self, line: usize, message: String) {
        self.parsed.warnings.push(Warning { line, message });
    }

    fn finish(mut self) -> Parsed {
        if let Some(line) = self.first_syntax_error {
            self.warn(line, format!("cron refuses this whole file for the syntax error on line {line} (\"Syntax error, this crontab file will be ignored\"), so none of its jobs runs under cron now; jetcron imports the other lines"));
        }
        self.parsed.warnings.sort_by_key(|w| w.line);
        self.parsed
    }
}
