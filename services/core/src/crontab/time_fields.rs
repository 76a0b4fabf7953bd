//! The five time fields as Vixie cron's `entry.c` reads them, into the
//! bitsets cron matches minutes against, and the jetcron schedule line that
//! fires at the same minutes.
//!
//! A field is a comma list of `*`, `N` or `N-M`, the `*` and the range
//! taking a `/step`; month and day-of-week also take three-letter names in
//! any case, in ranges and lists. Debian refuses a step after a single
//! number (`5/10`) and a step of 0. A backwards range (`fri-mon`) is taken
//! by cron and matches nothing; other crons wrap it around, and croner
//! refuses it, so it is refused here with the spelling that means it.
//!
//! The day rule: cron sets `DOM_STAR`/`DOW_STAR` when a day field's first
//! character is `*`, and then requires both day fields to match; otherwise
//! either may. jetcron (croner) treats only an exact `*` as a wildcard and
//! otherwise takes either, unless day-of-week starts with `+`. So
//! [`schedule_line`] writes the `+` where the two rules part.

use super::LineProblem;

/// A field's place and values.
struct FieldRule {
    name: &'static str,
    low: u32,
    high: u32,
    /// Three-letter names, the first for `low`.
    names: Option<&'static [&'static str]>,
}

const MONTH_NAMES: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAY_NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

const RULES: [FieldRule; 5] = [
    FieldRule {
        name: "minute",
        low: 0,
        high: 59,
        names: None,
    },
    FieldRule {
        name: "hour",
        low: 0,
        high: 23,
        names: None,
    },
    FieldRule {
        name: "day-of-month",
        low: 1,
        high: 31,
        names: None,
    },
    FieldRule {
        name: "month",
        low: 1,
        high: 12,
        names: Some(&MONTH_NAMES),
    },
    FieldRule {
        name: "day-of-week",
        low: 0,
        high: 7,
        names: Some(&DAY_NAMES),
    },
];

/// A line's times as cron holds them: bit `n` of a field is set when value
/// `n` matches (day-of-week 0 and 7 both Sunday, kept in step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VixieTimes {
    pub minute: u64,
    pub hour: u64,
    pub dom: u64,
    pub month: u64,
    pub dow: u64,
    /// Day-of-month starts with `*`.
    pub dom_star: bool,
    /// Day-of-week starts with `*`.
    pub dow_star: bool,
}

/// The reason `@reboot` is refused.
pub(crate) const REBOOT_REFUSAL: &str =
    "jetcron has no host boot; use a systemd unit or trigger the job after deploy";

/// The macros cron knows (case-sensitive) and the fields each stands for.
const MACROS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// A macro's times, or why it is refused.
pub(crate) fn read_macro(word: &str) -> Result<VixieTimes, LineProblem> {
    if word == "@reboot" {
        return Err(LineProblem::Unsupported(format!(
            "@reboot: {REBOOT_REFUSAL}"
        )));
    }
    let known = MACROS.iter().find(|(name, _)| *name == word);
    let Some((_, fields)) = known else {
        let lower = word.to_ascii_lowercase();
        let hint = if lower == "@reboot" || MACROS.iter().any(|(name, _)| *name == lower) {
            format!("; macros are case-sensitive: write {lower}")
        } else {
            String::new()
        };
        return Err(LineProblem::Syntax(format!(
            "unknown macro {word:?}: cron knows @reboot @yearly @annually @monthly @weekly @daily @midnight @hourly{hint}"
        )));
    };
    let fields: Vec<String> = fields.split(' ').map(str::to_string).collect();
    let fields: [String; 5] = fields
        .try_into()
        .map_err(|_| LineProblem::Syntax(format!("internal: macro {word} has no five fields")))?;
    read_fields(&fields)
}

/// The five fields' times, or the first field's problem.
pub(crate) fn read_fields(fields: &[String; 5]) -> Result<VixieTimes, LineProblem> {
    let mut bits = [0u64; 5];
    for ((rule, text), bits) in RULES.iter().zip(fields).zip(bits.iter_mut()) {
        *bits = read_field(rule, text)?;
    }
    let [minute, hour, dom, month, mut dow] = bits;
    if dow & 0b1000_0001 != 0 {
        dow |= 0b1000_0001;
    }
    Ok(VixieTimes {
        minute,
        hour,
        dom,
        month,
        dow,
        dom_star: fields[2].starts_with('*'),
        dow_star: fields[4].starts_with('*'),
    })
}

/// Why a line never fires, if it never does: cron takes `0 0 31 2 *` and
/// never runs it. Only when both day fields must match can the days miss
/// every month; a day-of-week set is never empty.
pub(crate) fn never_fires(times: &VixieTimes, fields: &[String; 5]) -> Option<String> {
    if !(times.dom_star || times.dow_star) {
        return None;
    }
    const DAYS_IN_MONTH: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let fires = (1..=12u32).any(|month| {
        times.month & (1 << month) != 0
            && (1..=DAYS_IN_MONTH[month as usize - 1]).any(|day| times.dom & (1 << day) != 0)
    });
    (!fires).then(|| {
        format!(
            "the line never fires: no month in {:?} has a day in {:?} (cron takes it and never runs it)",
            fields[3], fields[2]
        )
    })
}

/// The jetcron line for five fields: as written, with `+` before
/// day-of-week when a day field starts with `*` without being `*` and the
/// other is not `*` (cron: both must match; croner: either).
pub(crate) fn schedule_line(fields: &[String; 5]) -> String {
    let (dom, dow) = (fields[2].as_str(), fields[4].as_str());
    let starred = |f: &str| f.starts_with('*') && f != "*";
    let both_must_match = (starred(dom) && dow != "*") || (starred(dow) && dom != "*");
    let mut line = fields[..4].join(" ");
    line.push(' ');
    if both_must_match {
        line.push('+');
    }
    line.push_str(dow);
    line
}

/// One field's bits.
fn read_field(rule: &FieldRule, text: &str) -> Result<u64, LineProblem> {
    let syntax = |why: String| LineProblem::Syntax(format!("{} field {text:?}: {why}", rule.name));
    if let Some(c) = text.chars().find(|c| matches!(c, '?' | '#' | '+')) {
        let what = match c {
            '?' => "? (\"no specific value\") is Quartz's, not cron's; write *",
            '#' => "# (the n-th weekday) is not cron syntax",
            _ => "+ (both day fields must match) is jetcron's, not cron's",
        };
        return Err(syntax(what.into()));
    }
    let mut bits = 0u64;
    for element in text.split(',') {
        if element.is_empty() {
            return Err(syntax("has an empty list element".into()));
        }
        let (start, end, step) = read_range(rule, element).map_err(|problem| match problem {
            LineProblem::Syntax(why) => syntax(why),
            LineProblem::Unsupported(why) => {
                LineProblem::Unsupported(format!("{} field {text:?}: {why}", rule.name))
            }
        })?;
        let mut value = start;
        while value <= end {
            bits |= 1 << value;
            value = value.saturating_add(step);
        }
    }
    Ok(bits)
}

/// One list element: its first and last value and its step.
fn read_range(rule: &FieldRule, element: &str) -> Result<(u32, u32, u32), LineProblem> {
    if let Some(rest) = element.strip_prefix('*') {
        return match rest.strip_prefix('/') {
            _ if rest.is_empty() => Ok((rule.low, rule.high, 1)),
            Some(step) => Ok((rule.low, rule.high, read_step(step)?)),
            None => Err(LineProblem::Unsupported(format!(
                "cron reads {element:?} as * and drops {rest:?}; write *"
            ))),
        };
    }
    let (start, rest) = read_value(rule, element)?;
    let (end, rest) = match rest.strip_prefix('-') {
        Some(after_dash) => read_value(rule, after_dash)?,
        None if rest.starts_with('/') => {
            return Err(LineProblem::Syntax(format!(
                "a step needs a range before it: cron refuses {element:?}; write {start}-{}{rest}",
                rule.high
            )))
        }
        None => (start, rest),
    };
    let step = match rest.strip_prefix('/') {
        Some(step) => read_step(step)?,
        None if rest.is_empty() => 1,
        None => return Err(junk_after_value(rest)),
    };
    for value in [start, end] {
        if value < rule.low || value > rule.high {
            return Err(LineProblem::Syntax(format!(
                "{value} is out of range {}-{}",
                rule.low, rule.high
            )));
        }
    }
    if start > end {
        return Err(LineProblem::Unsupported(backwards_range(
            rule, element, start, end,
        )));
    }
    Ok((start, end, step))
}

/// Why `start-end` (start after end) is refused, with what to write.
fn backwards_range(rule: &FieldRule, element: &str, start: u32, end: u32) -> String {
    let spelled = match (rule.name, end) {
        ("day-of-week", 0) => format!("{start}-7"),
        ("day-of-week", 1) => format!("{start}-7,1"),
        ("day-of-week", _) => format!("{start}-7,1-{end}"),
        _ if end == rule.low => format!("{start}-{},{end}", rule.high),
        _ => format!("{start}-{},{}-{end}", rule.high, rule.low),
    };
    format!(
        "the range {element:?} runs backwards: Debian's cron matches nothing for it and other crons wrap it around; write {spelled} if it means to wrap"
    )
}

/// A number or (in month and day-of-week) a name, and the text after it.
fn read_value<'a>(rule: &FieldRule, text: &'a str) -> Result<(u32, &'a str), LineProblem> {
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let letters = text.len()
        - text
            .trim_start_matches(|c: char| c.is_ascii_alphabetic())
            .len();
    let (value, rest) = if digits > 0 {
        let (number, rest) = text.split_at(digits);
        let value = number.parse::<u32>().map_err(|_| {
            LineProblem::Syntax(format!(
                "{number} is out of range {}-{}",
                rule.low, rule.high
            ))
        })?;
        if let Some(letter) = rest.chars().next().filter(char::is_ascii_alphabetic) {
            return Err(LineProblem::Syntax(letter_after_number(number, letter)));
        }
        (value, rest)
    } else if letters > 0 {
        let (word, rest) = text.split_at(letters);
        (read_name(rule, word)?, rest)
    } else {
        let expected = match rule.names {
            Some(_) => "a number, a name or *",
            None => "a number or *",
        };
        return Err(LineProblem::Syntax(format!(
            "expected {expected} at {text:?}"
        )));
    };
    match rest.chars().next() {
        None | Some('-' | '/') => Ok((value, rest)),
        Some(_) => Err(junk_after_value(rest)),
    }
}

/// Text after a value or range that is none of `-`, `/` or `,`: Debian's
/// cron skips it (to the next blank) and takes the line; jetcron does not
/// guess what was meant.
fn junk_after_value(rest: &str) -> LineProblem {
    LineProblem::Unsupported(format!(
        "unexpected {rest:?}: cron would skip it and read the rest of the line; write the field without it"
    ))
}

/// Why `5L` or `15W` is refused.
fn letter_after_number(number: &str, letter: char) -> String {
    match letter.to_ascii_uppercase() {
        'L' => format!("{number}{letter}: L (last) is not cron syntax"),
        'W' => format!("{number}{letter}: W (nearest weekday) is not cron syntax"),
        _ => format!("{number}{letter}: a number followed by letters"),
    }
}

/// The value of a name (`jan`, `Mon`), or why it is refused.
fn read_name(rule: &FieldRule, word: &str) -> Result<u32, LineProblem> {
    let upper = word.to_ascii_uppercase();
    if upper == "L" || upper == "LW" {
        return Err(LineProblem::Syntax(format!(
            "{word}: L (last) and LW are not cron syntax"
        )));
    }
    let Some(names) = rule.names else {
        return Err(LineProblem::Syntax(format!(
            "{word:?}: names are only for month (jan-dec) and day-of-week (sun-sat)"
        )));
    };
    let lower = word.to_ascii_lowercase();
    match names.iter().position(|name| *name == lower) {
        Some(index) => Ok(rule.low + index as u32),
        None => Err(LineProblem::Syntax(format!(
            "{word:?} is not a name cron knows: three letters, any case, {} to {}",
            names[0],
            names[names.len() - 1]
        ))),
    }
}

/// A step: digits only, not 0.
fn read_step(text: &str) -> Result<u32, LineProblem> {
    if text.is_empty() || !text.chars().all(|c| c.is_ascii_digit()) {
        return Err(LineProblem::Syntax(format!(
            "the step {text:?} is not a number"
        )));
    }
    match text.parse::<u32>() {
        Ok(0) => Err(LineProblem::Syntax("a step of 0 is refused".into())),
        Ok(step) => Ok(step),
        Err(_) => Err(LineProblem::Syntax(format!("the step {text} is too large"))),
    }
}
