//! An environment assignment (`NAME=value`), read by the state machine of
//! Debian's `load_env` (`env.c`), so that the odd cases come out as cron's:
//! the name may be quoted or end at a blank or `=`; a quoted value may be
//! followed only by blanks; an unquoted value runs to the end of the line,
//! `#` included, less trailing blanks; `NAME=` is not an assignment and so
//! a syntax error.
//!
//! cron tries every line as an assignment first and as a job line second.
//! A line that got as far as its `=` cannot be a job line, so its failure
//! is said here ([`EnvLine::Broken`]) rather than as a bad minute field.

/// What a line is, read as an environment assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum EnvLine {
    Assignment {
        name: String,
        value: String,
    },
    /// Not an assignment: read it as a job line.
    NotAssignment,
    /// Has an `=` but is no assignment; cron refuses the line.
    Broken(String),
}

/// The states of Debian's `load_env`, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    NameStart,
    Name,
    BeforeEquals,
    AfterEquals,
    ValueStart,
    Value,
    AfterValue,
    Error,
}

/// C's `isspace` in the C locale (Rust's ASCII whitespace lacks `\v`).
pub(super) fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// Read `line` (without its newline, leading blanks skipped).
pub(super) fn read(line: &str) -> EnvLine {
    let chars: Vec<char> = line.chars().collect();
    let mut state = State::NameStart;
    let mut quote: Option<char> = None;
    let (mut name, mut value) = (String::new(), String::new());
    let mut at = 0;
    while state != State::Error && at < chars.len() {
        let c = chars[at];
        match state {
            State::NameStart | State::ValueStart => {
                if c == '\'' || c == '"' {
                    quote = Some(c);
                    at += 1;
                }
                state = if state == State::NameStart {
                    State::Name
                } else {
                    State::Value
                };
            }
            State::Name | State::Value => {
                let in_name = state == State::Name;
                match quote {
                    Some(q) if c == q => {
                        state = if in_name {
                            State::BeforeEquals
                        } else {
                            State::AfterValue
                        };
                        at += 1;
                        continue;
                    }
                    Some(_) if in_name && c == '=' => {
                        state = State::Error;
                        continue;
                    }
                    None if in_name && is_c_space(c) => {
                        state = State::BeforeEquals;
                        at += 1;
                        continue;
                    }
                    None if in_name && c == '=' => {
                        state = State::BeforeEquals;
                        continue;
                    }
                    _ => {}
                }
                if in_name { &mut name } else { &mut value }.push(c);
                at += 1;
            }
            State::BeforeEquals => {
                if c == '=' {
                    state = State::AfterEquals;
                    quote = None;
                } else if !is_c_space(c) {
                    state = State::Error;
                }
                at += 1;
            }
            State::AfterEquals | State::AfterValue => {
                if is_c_space(c) {
                    at += 1;
                } else if state == State::AfterEquals {
                    state = State::ValueStart;
                } else {
                    return EnvLine::Broken(format!(
                        "only blanks may follow a quoted value, got {:?} (cron has no trailing comments)",
                        chars[at..].iter().collect::<String>()
                    ));
                }
            }
            State::Error => {}
        }
    }
    finish(state, quote, name, value)
}

/// The outcome once the line is read, in `state`.
fn finish(state: State, quote: Option<char>, name: String, mut value: String) -> EnvLine {
    match (state, quote) {
        (State::AfterValue, _) => EnvLine::Assignment { name, value },
        (State::Value, None) => {
            let kept = value.trim_end_matches(is_c_space).len();
            value.truncate(kept);
            EnvLine::Assignment { name, value }
        }
        (State::Value, Some(q)) => EnvLine::Broken(format!(
            "the value of {name:?} opens with {q} and never closes it"
        )),
        (State::AfterEquals, _) => EnvLine::Broken(format!(
            "{name}= without a value is a syntax error in cron; write {name}=\"\" for an empty value"
        )),
        _ => EnvLine::NotAssignment,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(name: &str, value: &str) -> EnvLine {
        EnvLine::Assignment {
            name: name.into(),
            value: value.into(),
        }
    }

    #[test]
    fn names_end_at_a_blank_or_equals_and_may_be_quoted() {
        assert_eq!(read("A=1"), assignment("A", "1"));
        assert_eq!(read("A = 1"), assignment("A", "1"));
        assert_eq!(read("A\t=\t1"), assignment("A", "1"));
        assert_eq!(read("\"A B\"=1"), assignment("A B", "1"));
        assert_eq!(read("'A'= x"), assignment("A", "x"));
        assert_eq!(read("A B=1"), EnvLine::NotAssignment);
        assert_eq!(read("\"A=B\"=1"), EnvLine::NotAssignment);
    }

    #[test]
    fn an_unquoted_value_runs_to_the_end_of_the_line_and_keeps_its_hash() {
        assert_eq!(read("A=1 # x"), assignment("A", "1 # x"));
        assert_eq!(read("PATH=/a:/b  \t"), assignment("PATH", "/a:/b"));
        assert_eq!(read("A=x\"y"), assignment("A", "x\"y"));
        assert_eq!(read("A=1\r"), assignment("A", "1"));
    }

    #[test]
    fn a_quoted_value_may_be_followed_only_by_blanks() {
        assert_eq!(read("A=\"x y\""), assignment("A", "x y"));
        assert_eq!(read("A = 'x # y'   "), assignment("A", "x # y"));
        assert_eq!(read("MAILTO=\"\""), assignment("MAILTO", ""));
        let EnvLine::Broken(why) = read("A = \"x y\" # c") else {
            panic!("a comment after a quoted value is refused");
        };
        assert!(why.contains("\"# c\""), "{why}");
        assert!(matches!(read("A=\"x"), EnvLine::Broken(_)));
    }

    #[test]
    fn name_equals_nothing_is_a_syntax_error() {
        let EnvLine::Broken(why) = read("NAME=") else {
            panic!("NAME= is refused");
        };
        assert!(why.contains("NAME=\"\""), "{why}");
        assert!(matches!(read("NAME =   "), EnvLine::Broken(_)));
    }

    #[test]
    fn job_lines_are_not_assignments() {
        for line in [
            "* * * * * echo a=b",
            "@daily x=1",
            "0 0 1 * * true",
            "*",
            "",
        ] {
            assert_eq!(read(line), EnvLine::NotAssignment, "{line}");
        }
    }
}
