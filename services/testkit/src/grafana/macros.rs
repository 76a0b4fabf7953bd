//! Grafana's interpolation of a panel's SQL: the browser replaces template
//! variables (`$job`, `${job}`, `${job:singlequote}`, `[[job]]`), then the
//! plugin's backend expands its macros (`pkg/macros/macros.go` in
//! grafana/clickhouse-datasource: names matched longest first, arguments in
//! balanced parentheses split on top-level commas).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// What the plugin receives with a query: the dashboard's time range and
/// the panel's interval.
pub struct QueryContext {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub interval: Duration,
}

fn is_name_char(c: u8) -> bool {
    c == b'_' || c.is_ascii_alphanumeric()
}

/// How Grafana formats a single value: the plugin's own format keeps it
/// raw; `:singlequote` and the others are Grafana's formatRegistry.
fn format_value(value: &str, format: Option<&str>) -> Result<String, String> {
    match format {
        None | Some("raw") => Ok(value.to_string()),
        Some("singlequote") => Ok(format!("'{}'", value.replace('\'', "\\'"))),
        Some("doublequote") => Ok(format!("\"{}\"", value.replace('"', "\\\""))),
        Some("sqlstring") => Ok(format!("'{}'", value.replace('\'', "''"))),
        Some(other) => Err(format!("variable format {other:?} is not implemented here")),
    }
}

/// Grafana's `templateSrv.replace`: `$name` (the longest word), `${name}`,
/// `${name:format}`, `[[name]]`, `[[name:format]]`. Names that are not
/// variables (the plugin's `$__` macros, `${__data…}`) stay as they are.
pub fn interpolate_variables<'a>(
    text: &'a str,
    vars: &BTreeMap<String, String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        // (length of the reference, name, format)
        let split = |body: &'a str, len: usize| match body.split_once(':') {
            Some((name, format)) => (len, name, Some(format)),
            None => (len, body, None),
        };
        let reference = if let Some(inner) = rest.strip_prefix("${") {
            inner.find('}').map(|end| split(&inner[..end], end + 3))
        } else if let Some(inner) = rest.strip_prefix("[[") {
            inner.find("]]").map(|end| split(&inner[..end], end + 4))
        } else if let Some(inner) = rest.strip_prefix('$') {
            let len = inner.bytes().take_while(|c| is_name_char(*c)).count();
            (len > 0).then(|| (len + 1, &inner[..len], None))
        } else {
            None
        };
        match reference {
            Some((len, name, format)) if vars.contains_key(name) => {
                out.push_str(&format_value(&vars[name], format)?);
                i += len;
            }
            Some((len, _, _)) => {
                out.push_str(&rest[..len]);
                i += len;
            }
            None => {
                let c = rest.chars().next().unwrap_or_default();
                out.push(c);
                i += c.len_utf8().max(1);
            }
        }
    }
    Ok(out)
}

fn date_time(t: DateTime<Utc>) -> String {
    format!("toDateTime({})", t.timestamp())
}

fn date_time64(t: DateTime<Utc>) -> String {
    format!("fromUnixTimestamp64Milli({})", t.timestamp_millis())
}

/// The plugin formats the instant in its own zone; the tests' is UTC.
fn date(t: DateTime<Utc>) -> String {
    format!("toDate('{}')", t.format("%Y-%m-%d"))
}

/// `max(interval, 1s)` in whole seconds, as the plugin truncates it.
fn interval_seconds(ctx: &QueryContext) -> u64 {
    ctx.interval.as_secs_f64().max(1.0) as u64
}

fn one_arg<'a>(name: &str, args: &'a [String]) -> Result<&'a str, String> {
    match args {
        [arg] => Ok(arg),
        _ => Err(format!(
            "$__{name} expected 1 argument(s), received {}",
            args.len()
        )),
    }
}

fn expand_one(name: &str, args: &[String], ctx: &QueryContext) -> Result<String, String> {
    let (from, to) = (ctx.from, ctx.to);
    Ok(match name {
        "fromTime" => date_time(from),
        "toTime" => date_time(to),
        "fromTime_ms" => date_time64(from),
        "toTime_ms" => date_time64(to),
        "timeFilter" => {
            let col = one_arg(name, args)?;
            format!(
                "{col} >= {} AND {col} <= {}",
                date_time(from),
                date_time(to)
            )
        }
        "timeFilter_ms" => {
            let col = one_arg(name, args)?;
            format!(
                "{col} >= {} AND {col} <= {}",
                date_time64(from),
                date_time64(to)
            )
        }
        "dateFilter" => {
            let col = one_arg(name, args)?;
            format!("{col} >= {} AND {col} <= {}", date(from), date(to))
        }
        "timeInterval" => format!(
            "toStartOfInterval(toDateTime({}), INTERVAL {} second)",
            one_arg(name, args)?,
            interval_seconds(ctx)
        ),
        "timeInterval_ms" => format!(
            "toStartOfInterval(toDateTime64({}, 3), INTERVAL {} millisecond)",
            one_arg(name, args)?,
            (ctx.interval.as_millis() as u64).max(1)
        ),
        "interval_s" => interval_seconds(ctx).to_string(),
        _ => unreachable!("not a macro: {name}"),
    })
}

/// The macros implemented here (the ones the plugin adds for ClickHouse).
const MACROS: &[&str] = &[
    "fromTime",
    "toTime",
    "fromTime_ms",
    "toTime_ms",
    "timeFilter",
    "timeFilter_ms",
    "dateFilter",
    "timeInterval",
    "timeInterval_ms",
    "interval_s",
];

/// Index just after the end of the quoted literal starting at `open`
/// ('' doubles a quote); the end of `s` if it never closes.
fn skip_literal(s: &[u8], open: usize) -> usize {
    let quote = s[open];
    let mut j = open + 1;
    while j < s.len() {
        if s[j] == quote {
            if s.get(j + 1) == Some(&quote) {
                j += 2;
                continue;
            }
            return j + 1;
        }
        j += 1;
    }
    j
}

/// The index of the `)` closing the `(` at 0.
fn closing_paren(s: &[u8]) -> Option<usize> {
    let mut depth = 0;
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'\'' | b'"' => {
                i = skip_literal(s, i);
                continue;
            }
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Split on commas outside parentheses and quotes, trimming each part.
fn split_args(raw: &str) -> Vec<String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Vec::new();
    }
    let s = raw.as_bytes();
    let (mut args, mut depth, mut start, mut i) = (Vec::new(), 0, 0, 0);
    while i < s.len() {
        match s[i] {
            b'\'' | b'"' => {
                i = skip_literal(s, i);
                continue;
            }
            b'(' => depth += 1,
            b')' => depth -= 1,
            b',' if depth == 0 => {
                args.push(raw[start..i].trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    args.push(raw[start..].trim().to_string());
    args
}

/// Expand every `$__<macro>` and `$__<macro>(args)`; unknown names stay.
pub fn expand_macros(sql: &str, ctx: &QueryContext) -> Result<String, String> {
    let mut names = MACROS.to_vec();
    names.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
    let mut result = sql.to_string();
    for name in names {
        let token = format!("$__{name}");
        let mut rest = result.as_str();
        let mut out = String::with_capacity(rest.len());
        while let Some(at) = rest.find(&token) {
            let after = at + token.len();
            if rest.as_bytes().get(after).is_some_and(|c| is_name_char(*c)) {
                out.push_str(&rest[..after]);
                rest = &rest[after..];
                continue;
            }
            out.push_str(&rest[..at]);
            rest = &rest[after..];
            let mut raw = "";
            if rest.starts_with('(') {
                if let Some(end) = closing_paren(rest.as_bytes()) {
                    raw = &rest[1..end];
                    rest = &rest[end + 1..];
                }
            }
            out.push_str(&expand_one(name, &split_args(raw), ctx)?);
        }
        out.push_str(rest);
        result = out;
    }
    Ok(result)
}

/// A Grafana interval such as `30s`, `1m`, `2h`, `500ms`.
pub fn parse_interval(text: &str) -> Option<Duration> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let n: u64 = text[..digits].parse().ok()?;
    match &text[digits..] {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n * 60)),
        "h" => Some(Duration::from_secs(n * 3600)),
        "d" => Some(Duration::from_secs(n * 86400)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The range and interval of the plugin's own tests (macros_test.go).
    fn ctx(interval: Duration) -> QueryContext {
        QueryContext {
            from: "2014-11-12T11:45:26.371Z".parse().expect("from"),
            to: "2015-11-12T11:45:26.371Z".parse().expect("to"),
            interval,
        }
    }

    fn expand(sql: &str) -> String {
        expand_macros(sql, &ctx(Duration::from_secs(20))).expect("expands")
    }

    #[test]
    fn time_range_macros_expand_as_the_plugin_documents() {
        assert_eq!(expand("$__fromTime"), "toDateTime(1415792726)");
        assert_eq!(expand("$__toTime"), "toDateTime(1447328726)");
        assert_eq!(
            expand("$__fromTime_ms"),
            "fromUnixTimestamp64Milli(1415792726371)"
        );
        assert_eq!(
            expand("$__toTime_ms"),
            "fromUnixTimestamp64Milli(1447328726371)"
        );
        assert_eq!(
            expand("$__timeFilter(col)"),
            "col >= toDateTime(1415792726) AND col <= toDateTime(1447328726)"
        );
        assert_eq!(
            expand("$__timeFilter_ms(col)"),
            "col >= fromUnixTimestamp64Milli(1415792726371) AND col <= fromUnixTimestamp64Milli(1447328726371)"
        );
        assert_eq!(
            expand("$__dateFilter(dateCol)"),
            "dateCol >= toDate('2014-11-12') AND dateCol <= toDate('2015-11-12')"
        );
    }

    #[test]
    fn interval_macros_use_at_least_one_second_or_millisecond() {
        assert_eq!(
            expand("$__timeInterval(col)"),
            "toStartOfInterval(toDateTime(col), INTERVAL 20 second)"
        );
        assert_eq!(
            expand("$__timeInterval_ms(col)"),
            "toStartOfInterval(toDateTime64(col, 3), INTERVAL 20000 millisecond)"
        );
        assert_eq!(expand("$__interval_s"), "20");
        let short = ctx(Duration::from_millis(200));
        assert_eq!(expand_macros("$__interval_s", &short).as_deref(), Ok("1"));
        let fraction = ctx(Duration::from_millis(1500));
        assert_eq!(
            expand_macros("$__timeInterval(t)", &fraction).as_deref(),
            Ok("toStartOfInterval(toDateTime(t), INTERVAL 1 second)")
        );
        assert_eq!(
            expand_macros("$__timeInterval_ms(t)", &ctx(Duration::ZERO)).as_deref(),
            Ok("toStartOfInterval(toDateTime64(t, 3), INTERVAL 1 millisecond)")
        );
    }

    #[test]
    fn arguments_keep_nested_calls_and_names_match_whole_words() {
        assert_eq!(
            expand("SELECT $__timeInterval(intDiv(at_ms, 1000)) AS t, x WHERE $__timeFilter( toDateTime(intDiv(at_ms, 1000)) )"),
            "SELECT toStartOfInterval(toDateTime(intDiv(at_ms, 1000)), INTERVAL 20 second) AS t, x \
             WHERE toDateTime(intDiv(at_ms, 1000)) >= toDateTime(1415792726) AND toDateTime(intDiv(at_ms, 1000)) <= toDateTime(1447328726)"
        );
        assert_eq!(
            expand("x < (toInt64(toUnixTimestamp($__toTime)) + 1) * 1000"),
            "x < (toInt64(toUnixTimestamp(toDateTime(1447328726))) + 1) * 1000"
        );
        // Unknown names (and longer words) are left alone.
        assert_eq!(expand("$__unknown $__fromTimes"), "$__unknown $__fromTimes");
        // A wrong argument count is an error, as in the plugin.
        let err = expand_macros("$__timeFilter(a, b)", &ctx(Duration::ZERO));
        assert_eq!(
            err,
            Err("$__timeFilter expected 1 argument(s), received 2".to_string())
        );
        assert!(expand_macros("$__timeFilter", &ctx(Duration::ZERO)).is_err());
    }

    #[test]
    fn template_variables_are_replaced_as_grafana_does() {
        let vars = BTreeMap::from([
            ("job".to_string(), "it's".to_string()),
            ("gateway_url".to_string(), "http://gw:8080".to_string()),
        ]);
        let replace = |s: &str| interpolate_variables(s, &vars).expect("replaces");
        assert_eq!(replace("job_id = '$job'"), "job_id = 'it's'");
        assert_eq!(replace("${job}-x"), "it's-x");
        assert_eq!(replace("job_id = ${job:singlequote}"), "job_id = 'it\\'s'");
        assert_eq!(replace("[[job]] [[job:sqlstring]]"), "it's 'it''s'");
        assert_eq!(replace("${job:doublequote}"), "\"it's\"");
        // Longest word: `$jobs` is another (unknown) variable.
        assert_eq!(
            replace("$jobs $__interval_s $__fromTime"),
            "$jobs $__interval_s $__fromTime"
        );
        assert_eq!(
            replace("${gateway_url}/v1/runs/${__data.fields.run_id}"),
            "http://gw:8080/v1/runs/${__data.fields.run_id}"
        );
        assert!(interpolate_variables("${job:lucene}", &vars).is_err());
    }

    #[test]
    fn intervals_parse_as_grafana_writes_them() {
        assert_eq!(parse_interval("1m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_interval("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_interval("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_interval("1y"), None);
    }
}
