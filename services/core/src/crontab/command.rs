//! A job line's command and its standard input, as cron's `do_command.c`
//! splits them: the command ends at the first `%` not escaped by a
//! backslash, and `\%` in it becomes `%` and `\\` becomes `\` (any other
//! `\x` stays: checked against Debian's cron daemon, where
//! `touch 'a\\b'` makes a file `a\b`); the rest
//! is written to the command's standard input with each bare `%` a
//! newline and `\%` a `%`. cron then adds a final newline where the data
//! does not end with one. So mdadm's `date +\%d` runs as `date +%d`, and
//! crontab(5)'s `mail -s "It's 10pm" joe%Joe,%%Where are your kids?%`
//! mails three lines.

/// The command cron runs, and what it writes to the command's stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SplitCommand {
    pub command: String,
    /// `None` when there is no bare `%` or nothing after it (cron then
    /// writes nothing, and the command reads end-of-file as under jetcron).
    pub stdin: Option<String>,
}

/// Split a command as written.
pub(super) fn split(as_written: &str) -> SplitCommand {
    let mut command = String::with_capacity(as_written.len());
    let mut escaped = false;
    let mut rest = None;
    for (at, c) in as_written.char_indices() {
        if escaped {
            escaped = false;
            if c == '%' || c == '\\' {
                command.pop();
            }
            command.push(c);
            continue;
        }
        if c == '%' {
            rest = Some(&as_written[at + 1..]);
            break;
        }
        escaped = c == '\\';
        command.push(c);
    }
    SplitCommand {
        command,
        stdin: rest.filter(|data| !data.is_empty()).map(stdin_data),
    }
}

/// The text after the first bare `%`, as cron writes it to stdin.
fn stdin_data(rest: &str) -> String {
    let mut data = String::with_capacity(rest.len() + 1);
    let mut escaped = false;
    for c in rest.chars() {
        let c = match (escaped, c) {
            (true, '%') => '%',
            (true, c) => {
                data.push('\\');
                c
            }
            (false, '%') => '\n',
            (false, c) => c,
        };
        escaped = c == '\\';
        if !escaped {
            data.push(c);
        }
    }
    if escaped {
        data.push('\\');
    }
    if !data.ends_with('\n') {
        data.push('\n');
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(as_written: &str) -> (String, Option<String>) {
        let split = split(as_written);
        (split.command, split.stdin)
    }

    #[test]
    fn the_command_ends_at_the_first_bare_percent() {
        assert_eq!(
            parts("mail -s \"It's 10pm\" joe%Joe,%%Where are your kids?%"),
            (
                "mail -s \"It's 10pm\" joe".into(),
                Some("Joe,\n\nWhere are your kids?\n".into())
            )
        );
        assert_eq!(parts("cat%one"), ("cat".into(), Some("one\n".into())));
        assert_eq!(parts("true%"), ("true".into(), None));
        assert_eq!(parts("true"), ("true".into(), None));
    }

    #[test]
    fn an_escaped_percent_is_a_percent_and_other_escapes_stay() {
        assert_eq!(
            parts("[ $(date +\\%d) -le 7 ] && echo \\n"),
            ("[ $(date +%d) -le 7 ] && echo \\n".into(), None)
        );
        // `\\` is an escaped backslash, one backslash in the command, and
        // the `%` after it is bare.
        assert_eq!(parts("a\\\\%b"), ("a\\".into(), Some("b\n".into())));
        assert_eq!(parts("touch 'a\\\\b'"), ("touch 'a\\b'".into(), None));
    }

    #[test]
    fn stdin_turns_percent_into_newline_and_escaped_percent_into_percent() {
        assert_eq!(
            parts("cat%50\\% done%x\\y\\"),
            ("cat".into(), Some("50% done\nx\\y\\\n".into()))
        );
        assert_eq!(parts("cat%a%"), ("cat".into(), Some("a\n".into())));
    }
}
