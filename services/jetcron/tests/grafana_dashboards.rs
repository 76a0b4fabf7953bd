//! The Grafana dashboards (`infra/grafana/dashboards/*.json`) against real
//! history on both ClickHouse engines.
//!
//! Shell jobs that succeed, fail after a retry and time out, and a refused
//! definition, go through the whole stack into ClickHouse 18.16. Then every
//! panel's SQL is expanded the way Grafana and the ClickHouse plugin expand
//! it (template variables in the browser, then the plugin's `$__` macros:
//! [`grafana`]) and run on 18.16 over HTTP and on a current ClickHouse (chdb,
//! in a python3 subprocess, with the same DDL and the rows exported from
//! 18.16). Each panel's target declares the columns it produces in
//! `expectColumns`: both engines must answer with exactly those columns and
//! the same rows, value for value, and at least one row where the test's data
//! guarantees it; the key numbers (runs, failure rate, retries, rejections)
//! are what the history says. Data links must name columns the panel has, and
//! the run link must open the run in the gateway.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use jetcron_testkit::{Stack, StackOptions};
use serde_json::{json, Value};

/// Grafana's interpolation of a panel's SQL: the browser replaces template
/// variables (`$job`, `${job}`, `${job:singlequote}`, `[[job]]`), then the
/// plugin's backend expands its macros (`pkg/macros/macros.go` in
/// grafana/clickhouse-datasource: names matched longest first, arguments in
/// balanced parentheses split on top-level commas).
mod grafana {
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
}

fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

const DATASOURCE_UID: &str = "jetcron-clickhouse";
const DATASOURCE_TYPE: &str = "grafana-clickhouse-datasource";
/// The job whose history has every kind of row the dashboards show.
const FLAKY: &str = "grafana-flaky";

/// One panel query, expanded for one set of variable values.
struct PanelQuery {
    label: String,
    sql: String,
    columns: Vec<String>,
    rows_required: bool,
    time_series: bool,
    /// Data links that leave Grafana (to the gateway), checked with row 1.
    run_links: Vec<String>,
}

/// What an engine answered: column (name, type) and the rows.
struct Answer {
    columns: Vec<(String, String)>,
    rows: Vec<Value>,
}

fn str_of<'a>(value: &'a Value, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {value}"))
}

/// `curl <clickhouse> --data-binary '<sql> FORMAT JSON'`.
async fn clickhouse_query(stack: &Stack, sql: &str) -> Result<Answer, String> {
    let response = stack
        .http
        .post(stack.clickhouse.url())
        .body(format!("{sql}\nFORMAT JSON"))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(text);
    }
    let body: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
    let columns = body["meta"]
        .as_array()
        .expect("meta")
        .iter()
        .map(|m| {
            (
                str_of(&m["name"], "name").to_string(),
                str_of(&m["type"], "type").to_string(),
            )
        })
        .collect();
    let rows = body["data"].as_array().cloned().unwrap_or_default();
    Ok(Answer { columns, rows })
}

/// Succeeding, failing-after-a-retry and timed-out runs, and a refused
/// definition; waits until `jetcron.runs` and `jetcron.job_events` show them.
async fn make_history(stack: &Stack) {
    stack.put_job(r#"{"id":"grafana-ok","schedule":"@daily","target":{"type":"shell","command":"echo ok"}}"#,
    )
    .await;
    stack.put_job(r#"{"id":"grafana-flaky","schedule":"@daily","retry":{"max_attempts":2,"backoff":"100ms"},
        "target":{"type":"shell","command":"echo nope; exit 3"}}"#,
    )
    .await;
    stack
        .put_job(
            r#"{"id":"grafana-slow","schedule":"@daily","timeout":"1s","retry":{"max_attempts":1},
        "target":{"type":"shell","command":"sleep 5"}}"#,
        )
        .await;
    let mut expected = BTreeMap::new();
    for (job, status) in [
        ("grafana-ok", "succeeded"),
        ("grafana-ok", "succeeded"),
        (FLAKY, "failed"),
        ("grafana-slow", "timed_out"),
    ] {
        expected.insert(stack.trigger(job).await, status);
    }
    for (run_id, status) in &expected {
        stack
            .wait_for_run_status(run_id, status, Duration::from_secs(30))
            .await;
    }
    // `nats pub` of an invalid definition: nobody to answer, so job.rejected.
    let invalid =
        r#"{"id":"grafana-flaky","schedule":"* * * *","target":{"type":"shell","command":"true"}}"#;
    stack
        .client
        .publish("jetcron.api.jobs.put", invalid.into())
        .await
        .expect("publish");
    stack.client.flush().await.expect("flush");
    jetcron_testkit::wait_until(
        "runs and rejection projected",
        Duration::from_secs(30),
        || async {
            let runs = clickhouse_query(stack, "SELECT run_id, status FROM jetcron.runs")
                .await
                .ok()?;
            let seen: BTreeMap<String, String> = runs
                .rows
                .iter()
                .map(|r| {
                    (
                        str_of(&r["run_id"], "run_id").to_string(),
                        str_of(&r["status"], "status").to_string(),
                    )
                })
                .collect();
            let all_there = expected
                .iter()
                .all(|(id, s)| seen.get(id).map(String::as_str) == Some(*s));
            let rejections = clickhouse_query(
                stack,
                "SELECT event_id FROM jetcron.job_events WHERE job_id = 'grafana-flaky'",
            )
            .await
            .ok()?;
            (all_there && !rejections.rows.is_empty()).then_some(())
        },
    )
    .await;
}

/// Every dashboard JSON, by file name.
fn dashboards() -> Vec<(String, Value)> {
    let dir = repo_path("infra/grafana/dashboards");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "overview and job drill-down: {files:?}");
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read dashboard");
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, json)
        })
        .collect()
}

/// Panels, including those folded into rows.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push(panel);
        if let Some(nested) = panel["panels"].as_array() {
            all.extend(nested);
        }
    }
    all
}

fn assert_clickhouse_datasource(value: &Value, what: &str) {
    assert_eq!(value["datasource"]["type"], DATASOURCE_TYPE, "{what}");
    assert_eq!(value["datasource"]["uid"], DATASOURCE_UID, "{what}");
}

/// The panel's SQL with variables and macros expanded for `vars`.
fn expand(
    sql: &str,
    vars: &BTreeMap<String, String>,
    ctx: &grafana::QueryContext,
    what: &str,
) -> String {
    // The plugin strips comments before expanding macros; the dashboards have
    // none, so what runs here is what the plugin runs.
    assert!(
        !sql.contains("--") && !sql.contains("/*"),
        "{what}: no SQL comments"
    );
    assert!(
        !sql.contains("FORMAT") && !sql.trim_end().ends_with(';'),
        "{what}: plain SELECT"
    );
    let sql = grafana::interpolate_variables(sql, vars).unwrap_or_else(|e| panic!("{what}: {e}"));
    let sql = grafana::expand_macros(&sql, ctx).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        !sql.contains('$'),
        "{what}: unexpanded variable or macro in\n{sql}"
    );
    sql
}

/// Variables with fixed values (textbox, constant) and query variables.
fn variables(dashboard: &Value) -> (BTreeMap<String, String>, Vec<(String, String)>) {
    let mut fixed = BTreeMap::new();
    let mut queries = Vec::new();
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = str_of(&var["name"], "variable name").to_string();
        match var["type"].as_str() {
            Some("textbox" | "constant") => {
                fixed.insert(name, str_of(&var["query"], "value").to_string());
            }
            Some("query") => {
                assert_clickhouse_datasource(var, &name);
                // A plain string, or the plugin's newer {"rawSql": …} object.
                let sql = var["query"]
                    .as_str()
                    .or(var["query"]["rawSql"].as_str())
                    .unwrap_or_else(|| panic!("variable {name}: no SQL"));
                queries.push((name, sql.to_string()));
            }
            other => panic!("variable {name}: type {other:?} not handled by this test"),
        }
    }
    (fixed, queries)
}

/// Every `${…}` of a data link names a variable, a column of the panel or
/// the time range, and an internal link targets a dashboard variable.
fn check_links(
    panel: &Value,
    columns: &[String],
    vars: &BTreeMap<String, String>,
    all_vars: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let title = panel["title"].as_str().unwrap_or_default();
    let mut urls = Vec::new();
    for overrides in panel["fieldConfig"]["overrides"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for property in overrides["properties"].as_array().into_iter().flatten() {
            if property["id"] != "links" {
                continue;
            }
            for link in property["value"].as_array().expect("links") {
                let url = str_of(&link["url"], "link url");
                for text in [url, link["title"].as_str().unwrap_or_default()] {
                    for reference in text.split("${").skip(1) {
                        let name = reference.split('}').next().unwrap_or_default();
                        let ok = vars.contains_key(name)
                            || name == "__url_time_range"
                            || name
                                .strip_prefix("__data.fields.")
                                .is_some_and(|c| columns.iter().any(|col| col == c));
                        assert!(ok, "{title}: link refers to unknown ${{{name}}}");
                    }
                }
                if let Some(internal) = url.strip_prefix("/d/") {
                    let (uid, query) = internal.split_once('?').unwrap_or((internal, ""));
                    let target = all_vars
                        .get(uid)
                        .unwrap_or_else(|| panic!("{title}: link to unknown dashboard {uid}"));
                    for param in query.split('&').filter_map(|p| p.strip_prefix("var-")) {
                        let name = param.split('=').next().unwrap_or_default();
                        assert!(
                            target.contains(name),
                            "{title}: {uid} has no variable {name}"
                        );
                    }
                } else {
                    urls.push(url.to_string());
                }
            }
        }
    }
    urls
}

/// The same answer from both engines: 18.16 quotes 64-bit integers in JSON
/// and the two may print a float differently.
fn same_value(a: &Value, b: &Value) -> bool {
    let number = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse::<f64>().ok(),
        _ => None,
    };
    match (number(a), number(b)) {
        (Some(x), Some(y)) => (x - y).abs() <= 1e-9 * x.abs().max(1.0),
        _ => a == b,
    }
}

#[test]
fn provisioning_points_at_the_dashboards_and_the_datasource() {
    let datasource = std::fs::read_to_string(repo_path(
        "infra/grafana/provisioning/datasources/jetcron-clickhouse.yaml",
    ))
    .expect("datasource provisioning");
    for line in [
        "type: grafana-clickhouse-datasource",
        "uid: jetcron-clickhouse",
        "protocol: http",
        "defaultDatabase: jetcron",
        "password:",
    ] {
        assert!(datasource.contains(line), "datasource file lacks {line:?}");
    }
    let provider = std::fs::read_to_string(repo_path(
        "infra/grafana/provisioning/dashboards/jetcron.yaml",
    ))
    .expect("dashboard provider");
    assert!(provider.contains("type: file") && provider.contains("path:"));
    for (name, dashboard) in dashboards() {
        assert!(
            dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()),
            "{name}: uid"
        );
        let mut ids = BTreeSet::new();
        for panel in panels(&dashboard) {
            let title = panel["title"].as_str().unwrap_or_default();
            assert!(
                ids.insert(panel["id"].as_u64()),
                "{name}: duplicate panel id ({title})"
            );
            assert!(
                panel["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{name}: {title} says what it shows"
            );
            if panel["type"] == "text" || panel["type"] == "row" {
                continue;
            }
            assert_clickhouse_datasource(panel, title);
            let targets = panel["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{name}: {title} has a query");
            for target in targets {
                assert_clickhouse_datasource(target, title);
                assert_eq!(target["editorType"], "sql", "{title}");
                // sqlds: 0 time series, 1 table.
                let format = target["format"].as_u64();
                let query_type = if format == Some(0) {
                    "timeseries"
                } else {
                    "table"
                };
                assert!(matches!(format, Some(0 | 1)), "{title}: format");
                assert_eq!(target["queryType"], query_type, "{title}");
                assert!(
                    target["expectColumns"].is_array(),
                    "{name}: {title} declares expectColumns"
                );
                assert!(
                    target["pluginVersion"].as_str().is_some_and(|v| v >= "4"),
                    "{title}"
                );
            }
        }
    }
}

/// Every panel query of every dashboard, expanded for every value of the
/// dashboard's query variables (their own queries included).
async fn panel_queries(
    stack: &Stack,
    dashboards: &[(String, Value)],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<PanelQuery> {
    let all_vars: BTreeMap<String, BTreeSet<String>> = dashboards
        .iter()
        .map(|(_, d)| {
            let list = d["templating"]["list"].as_array().into_iter().flatten();
            let names = list.filter_map(|v| v["name"].as_str().map(str::to_string));
            (str_of(&d["uid"], "uid").to_string(), names.collect())
        })
        .collect();
    let mut queries = Vec::new();
    for (name, dashboard) in dashboards {
        let (fixed, query_vars) = variables(dashboard);
        let mut contexts = vec![fixed.clone()];
        for (var, sql) in &query_vars {
            let interval = Duration::from_secs(60);
            let ctx = grafana::QueryContext { from, to, interval };
            let label = format!("{name}: variable {var}");
            let sql = expand(sql, &fixed, &ctx, &label);
            let answer = clickhouse_query(stack, &sql)
                .await
                .unwrap_or_else(|e| panic!("{label}: {e}\n{sql}"));
            let first = &answer.columns[0].0;
            let values: BTreeSet<String> = answer
                .rows
                .iter()
                .map(|r| str_of(&r[first], "variable value").to_string())
                .collect();
            if var == "job" {
                let jobs = ["grafana-ok", FLAKY, "grafana-slow"].map(String::from);
                assert_eq!(values, BTreeSet::from(jobs), "{label}");
            }
            queries.push(PanelQuery {
                label,
                sql,
                columns: answer.columns.into_iter().map(|c| c.0).collect(),
                rows_required: true,
                time_series: false,
                run_links: Vec::new(),
            });
            // Every combination of values is a context the panels run in.
            contexts = contexts
                .into_iter()
                .flat_map(|c| {
                    values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.insert(var.clone(), v.clone());
                        c
                    })
                })
                .collect();
        }
        for vars in &contexts {
            // Rows are guaranteed for the flaky job (runs, retries, a rejection).
            let rows_required = vars.get("job").is_none_or(|j| j == FLAKY);
            let job = vars.get("job").map(|j| format!(" job={j}"));
            for panel in panels(dashboard) {
                let Some(targets) = panel["targets"].as_array() else {
                    continue;
                };
                let title = str_of(&panel["title"], "title");
                let interval = match panel["interval"].as_str() {
                    Some(i) => grafana::parse_interval(i)
                        .unwrap_or_else(|| panic!("{title}: interval {i}")),
                    None => Duration::from_secs(1),
                };
                let ctx = grafana::QueryContext { from, to, interval };
                for target in targets {
                    let ref_id = target["refId"].as_str().unwrap_or("A");
                    let label = format!(
                        "{name}: {title} ({ref_id}){}",
                        job.clone().unwrap_or_default()
                    );
                    let columns: Vec<String> = target["expectColumns"]
                        .as_array()
                        .unwrap_or_else(|| panic!("{label}: expectColumns"))
                        .iter()
                        .map(|c| str_of(c, "column").to_string())
                        .collect();
                    let run_links = check_links(panel, &columns, vars, &all_vars);
                    queries.push(PanelQuery {
                        sql: expand(str_of(&target["rawSql"], "rawSql"), vars, &ctx, &label),
                        label,
                        columns,
                        rows_required,
                        time_series: target["format"] == 0,
                        run_links: if rows_required { run_links } else { Vec::new() },
                    });
                }
            }
        }
    }
    queries
}

/// Run every query on the stack's ClickHouse 18.16: the declared columns,
/// `time` first in a time series, and rows where the data guarantees them.
async fn run_on_clickhouse_18(stack: &Stack, queries: &[PanelQuery]) -> Vec<Answer> {
    let mut answers = Vec::new();
    for q in queries {
        let answer = clickhouse_query(stack, &q.sql)
            .await
            .unwrap_or_else(|e| panic!("{} on ClickHouse 18.16: {e}\n{}", q.label, q.sql));
        let names: Vec<&str> = answer.columns.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(names, q.columns, "{}: columns on 18.16\n{}", q.label, q.sql);
        if q.time_series {
            let (name, kind) = &answer.columns[0];
            assert!(
                name == "time" && kind.starts_with("DateTime"),
                "{}: first column {name} {kind}",
                q.label
            );
        }
        if q.rows_required {
            assert!(
                !answer.rows.is_empty(),
                "{}: no rows on 18.16\n{}",
                q.label,
                q.sql
            );
        }
        answers.push(answer);
    }
    answers
}

/// What the panels show for the test's history.
fn assert_the_panels_tell_the_story(queries: &[PanelQuery], answers: &[Answer]) {
    let shown = |panel: &str, column: &str| -> Vec<Value> {
        let i = queries
            .iter()
            .position(|q| q.label == panel)
            .unwrap_or_else(|| panic!("no panel {panel}"));
        answers[i].rows.iter().map(|r| r[column].clone()).collect()
    };
    let numbers = |panel: &str, column: &str, expected: &[f64]| {
        let values = shown(panel, column);
        let same = values.len() == expected.len()
            && values
                .iter()
                .zip(expected)
                .all(|(v, e)| same_value(v, &json!(e)));
        assert!(
            same,
            "{panel}: {column} is {values:?}, expected {expected:?}"
        );
    };
    let overview = |title: &str| format!("jetcron-overview.json: {title} (A)");
    let job = |title: &str, id: &str| format!("jetcron-job.json: {title} (A) job={id}");
    // 4 runs: 2 succeeded, 1 failed, 1 timed out; one refused definition.
    numbers(&overview("Runs"), "runs", &[4.0]);
    numbers(&overview("Failure rate"), "failure_rate", &[0.5]);
    numbers(&overview("Rejected definitions"), "rejections", &[1.0]);
    let failures = overview("Recent failures");
    let mut failed: Vec<Value> = shown(&failures, "job_id")
        .into_iter()
        .zip(shown(&failures, "status"))
        .map(|(j, s)| json!([j, s]))
        .collect();
    failed.sort_by_key(Value::to_string);
    let expected = [
        json!([FLAKY, "failed"]),
        json!(["grafana-slow", "timed_out"]),
    ];
    assert_eq!(failed, expected, "{failures}");
    numbers(&job("Retries", FLAKY), "retried_attempts", &[1.0]);
    numbers(&job("Last runs", FLAKY), "attempt", &[2.0]);
    numbers(&job("Success rate", FLAKY), "success_rate", &[0.0]);
    numbers(&job("Success rate", "grafana-ok"), "success_rate", &[1.0]);
    let rejections = shown(&job("Recent rejections", FLAKY), "source");
    assert_eq!(rejections, [json!("api")]);
    let state = shown(&job("Job state", "grafana-slow"), "last_status");
    assert_eq!(state, [json!("timed_out")]);
}

/// chdb's answers equal 18.16's: columns, rows and every value.
fn assert_same_answers(queries: &[PanelQuery], old: &[Answer], version: &str, current: &[Value]) {
    for ((q, answer), result) in queries.iter().zip(old).zip(current) {
        if let Some(err) = result["error"].as_str() {
            panic!("{} on chdb {version}: {err}\n{}", q.label, q.sql);
        }
        let columns = result["columns"].as_array().expect("columns");
        let names: Vec<&str> = columns.iter().map(|c| str_of(&c[0], "column")).collect();
        assert_eq!(
            names, q.columns,
            "{}: columns on chdb {version}\n{}",
            q.label, q.sql
        );
        if q.time_series {
            let kind = str_of(&columns[0][1], "type");
            assert!(
                kind.starts_with("DateTime"),
                "{}: time is {kind} on chdb",
                q.label
            );
        }
        let data = result["data"].as_array().expect("data");
        assert_eq!(
            data.len(),
            answer.rows.len(),
            "{}: rows on chdb {version} and 18.16\n{}",
            q.label,
            q.sql
        );
        for (i, (row, other)) in answer.rows.iter().zip(data).enumerate() {
            for column in &q.columns {
                let (a, b) = (&row[column], &other[column]);
                assert!(
                    same_value(a, b),
                    "{}: row {i}, {column}: {a} on 18.16, {b} on chdb {version}\n{}",
                    q.label,
                    q.sql
                );
            }
        }
    }
}

#[tokio::test]
async fn every_panel_runs_on_clickhouse_18_16_and_current_with_the_columns_it_declares() {
    let started = Utc::now();
    let stack = Stack::start(StackOptions::with_shell()).await;
    make_history(&stack).await;
    let export = |table: &str| format!("SELECT * FROM {table} FORMAT JSONEachRow");
    let exported = json!({
        "jetcron.run_events": stack.clickhouse_sql(&export("jetcron.run_events")).await,
        "jetcron.job_events": stack.clickhouse_sql(&export("jetcron.job_events")).await,
    });
    let (from, to) = (
        started - chrono::Duration::minutes(5),
        Utc::now() + chrono::Duration::minutes(1),
    );
    let queries = panel_queries(&stack, &dashboards(), from, to).await;

    let old = run_on_clickhouse_18(&stack, &queries).await;
    assert_the_panels_tell_the_story(&queries, &old);

    let sqls: Vec<&str> = queries.iter().map(|q| q.sql.as_str()).collect();
    let (version, current) = jetcron_testkit::chdb::run_on_chdb(exported, &sqls).await;
    assert_same_answers(&queries, &old, &version, &current);

    // Run links open the run in the gateway (gateway_url = the test's gateway).
    let mut opened = 0;
    for (q, answer) in queries.iter().zip(&old) {
        let Some(row) = answer.rows.first() else {
            continue;
        };
        for template in &q.run_links {
            let mut url = template.replace("${gateway_url}", &stack.http_base);
            for (column, _) in &answer.columns {
                let value = row[column].as_str().map(str::to_string);
                let value = value.unwrap_or_else(|| row[column].to_string());
                url = url.replace(&format!("${{__data.fields.{column}}}"), &value);
            }
            let response = stack.http.get(&url).send().await.expect("gateway answers");
            assert_eq!(response.status().as_u16(), 200, "{}: {url}", q.label);
            let body: Value = response.json().await.expect("JSON run");
            assert_eq!(body["run"]["run_id"], row["run_id"], "{}: {url}", q.label);
            opened += 1;
        }
    }
    assert!(opened >= 2, "the run links of both dashboards were opened");
    stack.stop().await;
}
