//! A job line taken apart as cron's `load_entry` does: a macro or five
//! time fields, the user column of a system crontab, then the command to
//! the end of the line. Fields are separated by spaces or tabs; the
//! command keeps its own blanks.

use super::time_fields::{never_fires, read_fields, read_macro, schedule_line};
use super::{CrontabKind, LineProblem, Timing};
use crate::schedule::Schedule;

/// A job line's parts, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct JobLine {
    pub timing: Timing,
    pub user: Option<String>,
    pub command_as_written: String,
}

/// Read a job line (without its newline, leading blanks skipped).
pub(super) fn read(line: &str, kind: CrontabKind) -> Result<JobLine, LineProblem> {
    let (timing, rest) = if line.starts_with('@') {
        let (word, rest) = next_word(line);
        read_macro(word)?;
        (Timing::Macro(word.to_string()), rest)
    } else {
        let (fields, rest) = time_fields(line, kind)?;
        let times = read_fields(&fields)?;
        if let Some(why) = never_fires(&times, &fields) {
            return Err(LineProblem::Unsupported(why));
        }
        let schedule = schedule_line(&fields);
        if let Err(e) = Schedule::parse(&schedule) {
            return Err(LineProblem::Unsupported(format!(
                "jetcron cannot read the schedule {schedule:?}: {e}"
            )));
        }
        (Timing::Fields(fields), rest)
    };
    let (user, command) = match kind {
        CrontabKind::User => (None, rest),
        CrontabKind::System => {
            let (user, rest) = next_word(rest);
            if user.is_empty() {
                return Err(LineProblem::Syntax(format!(
                    "no user after {:?}: lines of /etc/crontab and /etc/cron.d name one (m h dom mon dow user command)",
                    timing.as_written()
                )));
            }
            (Some(user.to_string()), rest)
        }
    };
    // Debian's cron takes such a line (and runs nothing); there is no
    // job to make of it.
    if command.is_empty() {
        return Err(LineProblem::Unsupported(format!(
            "no command after {:?}",
            timing.as_written()
        )));
    }
    Ok(JobLine {
        timing,
        user,
        command_as_written: command.to_string(),
    })
}

/// The five time fields, and the text after them and their blanks.
fn time_fields(line: &str, kind: CrontabKind) -> Result<([String; 5], &str), LineProblem> {
    let mut fields: [String; 5] = Default::default();
    let mut rest = line;
    for (count, field) in fields.iter_mut().enumerate() {
        let (word, after) = next_word(rest);
        if word.is_empty() {
            let then = match kind {
                CrontabKind::User => "the command",
                CrontabKind::System => "the user and the command",
            };
            return Err(LineProblem::Syntax(format!(
                "the line ends after {count} time fields: a job line has five (minute hour day-of-month month day-of-week), then {then}"
            )));
        }
        *field = word.to_string();
        rest = after;
    }
    Ok((fields, rest))
}

/// The text up to the first blank, and the text after the blanks that follow.
fn next_word(text: &str) -> (&str, &str) {
    let end = text.find([' ', '\t']).unwrap_or(text.len());
    let (word, rest) = text.split_at(end);
    (word, rest.trim_start_matches([' ', '\t']))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_line_is_fields_then_the_command_with_its_blanks() {
        let line = read("5 0\t* * *   echo  a\tb ", CrontabKind::User).expect("a job line");
        assert_eq!(
            line.timing,
            Timing::Fields(["5", "0", "*", "*", "*"].map(String::from))
        );
        assert_eq!(line.user, None);
        assert_eq!(line.command_as_written, "echo  a\tb ");
    }

    #[test]
    fn a_system_line_names_its_user() {
        let line = read("@daily root run-parts /x", CrontabKind::System).expect("a job line");
        assert_eq!(line.timing, Timing::Macro("@daily".into()));
        assert_eq!(line.user.as_deref(), Some("root"));
        assert_eq!(line.command_as_written, "run-parts /x");
        let missing = read("* * * * * root", CrontabKind::System).expect_err("no command");
        assert!(matches!(missing, LineProblem::Unsupported(why) if why.contains("no command")));
        let missing = read("* * * * *", CrontabKind::System).expect_err("no user");
        assert!(matches!(missing, LineProblem::Syntax(why) if why.contains("no user")));
    }

    #[test]
    fn a_short_line_says_how_many_fields_it_has() {
        let short = read("* * *", CrontabKind::User).expect_err("three fields");
        assert!(matches!(short, LineProblem::Syntax(why) if why.contains("after 3 time fields")));
    }
}
