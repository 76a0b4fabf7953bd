//! A cron line in English, for the schedule preview ("At 02:30, Monday
//! through Friday").
//!
//! Written from the fields as the user wrote them (after macro expansion),
//! so the words follow the line's own shape: a range stays a range, a step
//! a step. Only lines that already parsed reach here; a field this module
//! does not recognise is quoted rather than guessed at.

const DAYS: [&str; 8] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const ORDINALS: [&str; 6] = ["", "first", "second", "third", "fourth", "fifth"];

/// The line (5, 6 or 7 fields) in English, without its time zone.
pub fn describe(fields: &[&str]) -> String {
    let (sec, min, hour, dom, mon, dow, year) = match fields {
        [min, hour, dom, mon, dow] => ("0", *min, *hour, *dom, *mon, *dow, None),
        [sec, min, hour, dom, mon, dow] => (*sec, *min, *hour, *dom, *mon, *dow, None),
        [sec, min, hour, dom, mon, dow, year] => (*sec, *min, *hour, *dom, *mon, *dow, Some(*year)),
        _ => return format!("{:?}", fields.join(" ")),
    };
    let mut parts = vec![time_words(sec, min, hour)];
    parts.extend(day_words(dom, dow));
    if let Some(m) = month_words(mon) {
        parts.push(m);
    }
    if let Some(y) = year.and_then(year_words) {
        parts.push(y);
    }
    parts.join(", ")
}

/// A field item: `*`, `*/n`, `a`, `a-b`, `a-b/n`, `a/n`.
#[derive(Debug, PartialEq)]
enum Item {
    Every(u32),
    One(u32),
    Range(u32, u32, u32),
    From(u32, u32),
}

fn is_all(field: &str) -> bool {
    field == "*" || field == "?"
}

/// The items of a list field with names mapped to numbers; `None` when an
/// item is not of that plain shape (`L`, `W`, `#`).
fn items(field: &str, names: &[&str], first_name: u32) -> Option<Vec<Item>> {
    let number = |text: &str| -> Option<u32> {
        text.parse().ok().or_else(|| {
            names
                .iter()
                .position(|n| n.eq_ignore_ascii_case(text))
                .and_then(|i| u32::try_from(i).ok())
                .map(|i| i + first_name)
        })
    };
    field
        .split(',')
        .map(|item| {
            let (base, step) = match item.split_once('/') {
                Some((b, s)) => (b, Some(s.parse::<u32>().ok()?)),
                None => (item, None),
            };
            Some(match (base, step) {
                ("*" | "?", None) => Item::Every(1),
                ("*" | "?", Some(n)) => Item::Every(n),
                (b, step) => match b.split_once('-') {
                    Some((a, z)) => Item::Range(number(a)?, number(z)?, step.unwrap_or(1)),
                    None => match step {
                        Some(n) => Item::From(number(b)?, n),
                        None => Item::One(number(b)?),
                    },
                },
            })
        })
        .collect()
}

fn single(field: &str) -> Option<u32> {
    match items(field, &[], 0)?.as_slice() {
        [Item::One(v)] => Some(*v),
        _ => None,
    }
}

/// "a, b and c".
fn list(words: &[String]) -> String {
    match words {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// A list field as words, each value through `name`; `unit` names the
/// field in steps ("every 15 minutes").
fn field_words(
    field: &str,
    unit: &str,
    name: &dyn Fn(u32) -> String,
    names: &[&str],
    first: u32,
) -> String {
    let Some(parsed) = items(field, names, first) else {
        return format!("{unit} {field:?}");
    };
    let words: Vec<String> = parsed
        .iter()
        .map(|item| match item {
            Item::Every(1) => format!("every {unit}"),
            Item::Every(n) => format!("every {n} {unit}s"),
            Item::One(v) => name(*v),
            Item::Range(a, z, 1) => format!("{} through {}", name(*a), name(*z)),
            Item::Range(a, z, n) => {
                format!("every {n} {unit}s from {} through {}", name(*a), name(*z))
            }
            Item::From(a, n) => format!("every {n} {unit}s from {}", name(*a)),
        })
        .collect();
    list(&words)
}

fn time_words(sec: &str, min: &str, hour: &str) -> String {
    let (s, m, h) = (single(sec), single(min), single(hour));
    if let (Some(s), Some(m), Some(h)) = (s, m, h) {
        return match s {
            0 => format!("At {h:02}:{m:02}"),
            s => format!("At {h:02}:{m:02}:{s:02}"),
        };
    }
    // Each field says itself, the smallest first; a field given as values
    // (not a step or every value) is tied to the next by "of".
    let values = |f: &str| !is_all(f) && !f.contains('/');
    // Second 0 (always, in five fields) goes unsaid.
    let sec_values = s != Some(0) && values(sec);
    let seconds = match s {
        Some(0) => None,
        Some(v) => Some(format!("at second {v}")),
        None if is_all(sec) => Some("every second".to_string()),
        None => Some(field_words(
            sec,
            "second",
            &|v| format!("second {v}"),
            &[],
            0,
        )),
    };
    let minutes = if is_all(min) {
        match &seconds {
            None => Some("every minute".to_string()),
            Some(_) if sec_values => Some("of every minute".to_string()),
            Some(_) => None,
        }
    } else {
        let words = match m {
            Some(v) => format!("minute {v}"),
            None => field_words(min, "minute", &|v| format!("minute {v}"), &[], 0),
        };
        Some(match &seconds {
            None if values(min) => format!("at {words}"),
            None => words,
            Some(_) if sec_values => format!("of {words}"),
            Some(_) => format!("during {words}"),
        })
    };
    let hours = if is_all(hour) {
        values(min).then(|| "of every hour".to_string())
    } else {
        let words = match h {
            Some(v) => format!("hour {v:02}"),
            None => field_words(hour, "hour", &|v| format!("hour {v:02}"), &[], 0),
        };
        Some(if values(min) {
            format!("of {words}")
        } else {
            format!("during {words}")
        })
    };
    let text = [seconds, minutes, hours]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => text,
    }
}

fn day_of_month_words(dom: &str) -> String {
    let upper = dom.to_ascii_uppercase();
    if upper == "L" {
        return "on the last day of the month".into();
    }
    if upper == "LW" {
        return "on the last weekday of the month".into();
    }
    if let Some(day) = upper.strip_suffix('W').filter(|d| d.parse::<u32>().is_ok()) {
        return format!("on the weekday nearest day {day} of the month");
    }
    // A step names the days it means (`*/10`: 1, 11, 21, 31), not a period.
    let Some(parsed) = items(dom, &[], 0) else {
        return format!("on day-of-month {dom:?}");
    };
    let mut days = Vec::new();
    for item in parsed {
        match item {
            Item::Every(n) => {
                days.extend((1..=31).step_by(n.max(1) as usize).map(|d| d.to_string()))
            }
            Item::From(a, n) => {
                days.extend((a..=31).step_by(n.max(1) as usize).map(|d| d.to_string()))
            }
            Item::Range(a, z, n) if n > 1 => {
                days.extend((a..=z).step_by(n as usize).map(|d| d.to_string()))
            }
            Item::Range(a, z, _) => days.push(format!("{a} through {z}")),
            Item::One(v) => days.push(v.to_string()),
        }
    }
    let noun = if days.len() == 1 && !days[0].contains(' ') {
        "day"
    } else {
        "days"
    };
    format!("on {noun} {} of the month", list(&days))
}

fn day_of_week_words(dow: &str) -> String {
    let day = |v: u32| DAYS.get(v as usize).copied().unwrap_or("?").to_string();
    let upper = dow.to_ascii_uppercase();
    let named = |text: &str| -> Option<u32> {
        text.parse().ok().or_else(|| {
            DAY_NAMES
                .iter()
                .position(|n| *n == text)
                .and_then(|i| u32::try_from(i).ok())
        })
    };
    if let Some((d, n)) = upper.split_once('#') {
        if let Some(d) = named(d) {
            if n == "L" {
                return format!("on the last {} of the month", day(d));
            }
            if let Some(ordinal) = n.parse::<usize>().ok().and_then(|i| ORDINALS.get(i)) {
                return format!("on the {ordinal} {} of the month", day(d));
            }
        }
    }
    if let Some(d) = upper.strip_suffix('L').and_then(named) {
        return format!("on the last {} of the month", day(d));
    }
    field_words(dow, "day", &day, &DAY_NAMES, 0)
}

fn day_words(dom: &str, dow: &str) -> Option<String> {
    let (both, dow) = match dow.strip_prefix('+') {
        Some(rest) => (true, rest),
        None => (false, dow),
    };
    match (is_all(dom), is_all(dow)) {
        (true, true) => None,
        (false, true) => Some(day_of_month_words(dom)),
        (true, false) => Some(day_of_week_words(dow)),
        (false, false) if both => Some(format!(
            "{} when it is {}",
            day_of_month_words(dom),
            day_of_week_words(dow).trim_start_matches("on ")
        )),
        (false, false) => Some(format!(
            "{} or {}",
            day_of_month_words(dom),
            day_of_week_words(dow)
        )),
    }
}

fn month_words(mon: &str) -> Option<String> {
    if is_all(mon) {
        return None;
    }
    let month = |v: u32| {
        MONTHS
            .get((v as usize).wrapping_sub(1))
            .copied()
            .unwrap_or("?")
            .to_string()
    };
    Some(format!(
        "in {}",
        field_words(mon, "month", &month, &MONTH_NAMES, 1)
    ))
}

fn year_words(year: &str) -> Option<String> {
    if is_all(year) {
        return None;
    }
    Some(format!(
        "in {}",
        field_words(year, "year", &|v| v.to_string(), &[], 0)
    ))
}

#[cfg(test)]
mod tests {
    use super::describe;

    fn words(line: &str) -> String {
        describe(&line.split_whitespace().collect::<Vec<_>>())
    }

    #[test]
    fn lines_read_as_people_say_them() {
        let cases = [
            ("30 2 * * 1-5", "At 02:30, Monday through Friday"),
            ("30 2 * * MON-FRI", "At 02:30, Monday through Friday"),
            ("*/15 * * * *", "Every 15 minutes"),
            ("0 * * * *", "At minute 0 of every hour"),
            ("0,30 * * * *", "At minute 0 and minute 30 of every hour"),
            ("* * * * *", "Every minute"),
            ("*/10 * * * * *", "Every 10 seconds"),
            ("* * * * * *", "Every second"),
            ("30 * * * * *", "At second 30 of every minute"),
            ("15 0 * * * *", "At second 15 of minute 0 of every hour"),
            (
                "*/10 30 2 * * *",
                "Every 10 seconds during minute 30 of hour 02",
            ),
            (
                "0 */15 9-17 * * *",
                "Every 15 minutes during hour 09 through hour 17",
            ),
            (
                "0 */15 2 14 3 * 2027",
                "Every 15 minutes during hour 02, on day 14 of the month, in March, in 2027",
            ),
            ("0 0 L * *", "At 00:00, on the last day of the month"),
            ("0 9 LW * *", "At 09:00, on the last weekday of the month"),
            (
                "0 0 15W * *",
                "At 00:00, on the weekday nearest day 15 of the month",
            ),
            ("0 0 1,15W * *", "At 00:00, on day-of-month \"1,15W\""),
            (
                "0 0 */10 * *",
                "At 00:00, on days 1, 11, 21 and 31 of the month",
            ),
            (
                "0 0 * * MON#2",
                "At 00:00, on the second Monday of the month",
            ),
            ("0 0 * * 5L", "At 00:00, on the last Friday of the month"),
            ("0 0 1 * MON", "At 00:00, on day 1 of the month or Monday"),
            (
                "0 0 1 * +MON",
                "At 00:00, on day 1 of the month when it is Monday",
            ),
            ("5 4 * * sun", "At 04:05, Sunday"),
            ("0 0 1,15 * *", "At 00:00, on days 1 and 15 of the month"),
            ("0 0 1-7 * *", "At 00:00, on days 1 through 7 of the month"),
            ("0 0 * JAN,JUL *", "At 00:00, in January and July"),
            (
                "23 0-23/2 * * *",
                "At minute 23 of every 2 hours from hour 00 through hour 23",
            ),
            ("30 0 12 * * *", "At 12:00:30"),
            ("0 0 9-17 * * *", "At minute 0 of hour 09 through hour 17"),
        ];
        for (line, expected) in cases {
            assert_eq!(words(line), expected, "{line}");
        }
    }
}
