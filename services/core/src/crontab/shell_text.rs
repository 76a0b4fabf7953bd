//! Shell text a translated job runs under `/bin/sh -c`: a word quoted so
//! the shell reads it back unchanged, a command run by another shell, and
//! a command fed its standard input from a here-document (the executor's
//! stdin is `/dev/null`).

/// `text` as one shell word: unchanged when it holds only characters no
/// shell treats specially, otherwise in single quotes (`'` as `'\''`).
pub(super) fn word(text: &str) -> String {
    let plain = !text.is_empty()
        && text.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | ':' | ',' | '@')
        });
    if plain {
        text.to_string()
    } else {
        single_quoted(text)
    }
}

/// `text` in single quotes, each `'` closed, escaped and reopened.
pub(super) fn single_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// `command` run by `shell` as cron runs it (`execle(shell, shell, "-c",
/// command)`), from `/bin/sh -c`.
pub(super) fn run_by(shell: &str, command: &str) -> String {
    format!("exec {} -c {}", word(shell), single_quoted(command))
}

/// `command` in a subshell with `data` on its standard input, as a quoted
/// here-document (nothing in it is expanded). The delimiter is
/// `JETCRON_STDIN`, numbered until no line of `data` is it; the newlines
/// around the command end a trailing `# comment` in it.
pub(super) fn with_stdin(command: &str, data: &str) -> String {
    let lines: Vec<&str> = data.lines().collect();
    let delimiter = std::iter::once("JETCRON_STDIN".to_string())
        .chain((2..).map(|n| format!("JETCRON_STDIN_{n}")))
        .find(|d| !lines.contains(&d.as_str()))
        .unwrap_or_default();
    let newline = if data.ends_with('\n') { "" } else { "\n" };
    format!("(\n{command}\n) <<'{delimiter}'\n{data}{newline}{delimiter}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_only_when_needed() {
        assert_eq!(word("/bin/bash"), "/bin/bash");
        assert_eq!(word("/opt/my shell"), "'/opt/my shell'");
        assert_eq!(word("it's"), "'it'\\''s'");
        assert_eq!(word(""), "''");
    }

    #[test]
    fn another_shell_runs_the_command_unchanged() {
        assert_eq!(
            run_by("/bin/bash", "echo 'a b' \"$HOME\""),
            "exec /bin/bash -c 'echo '\\''a b'\\'' \"$HOME\"'"
        );
    }

    #[test]
    fn the_delimiter_is_not_a_line_of_the_data() {
        assert_eq!(
            with_stdin("cat # c", "a\n"),
            "(\ncat # c\n) <<'JETCRON_STDIN'\na\nJETCRON_STDIN\n"
        );
        let text = with_stdin("cat", "JETCRON_STDIN\nJETCRON_STDIN_2\n");
        assert!(text.contains("<<'JETCRON_STDIN_3'\n"), "{text}");
        assert!(text.ends_with("\nJETCRON_STDIN_3\n"), "{text}");
    }
}
