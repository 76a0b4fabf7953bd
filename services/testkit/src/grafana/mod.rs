//! The Grafana dashboards (`infra/grafana/dashboards/*.json`) as Grafana runs
//! them, for tests that check what they show.
//!
//! [`panel_queries`] reads every dashboard, asks ClickHouse for the values of
//! its query variables (`$job`) and expands every panel's SQL for every
//! combination of values: template variables as the browser does, then the
//! ClickHouse plugin's `$__` macros ([`macros`]). [`run_panels`] runs them on
//! the stack's ClickHouse 18.16 and checks each answer has the columns the
//! panel declares in `expectColumns`. The dashboards test also runs them on a
//! current ClickHouse ([`crate::chdb`]); the replay test compares the answers
//! before and after a replay of `JETCRON_RUNS`.

pub mod macros;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

pub use macros::QueryContext;

use crate::Stack;

pub const DATASOURCE_UID: &str = "jetcron-clickhouse";
pub const DATASOURCE_TYPE: &str = "grafana-clickhouse-datasource";

/// One panel query (or a query variable's own query), expanded for one set
/// of variable values.
#[derive(Debug, Clone)]
pub struct PanelQuery {
    /// `<file>: <panel title> (<refId>)[ <var>=<value>…]`, or
    /// `<file>: variable <name>`.
    pub label: String,
    pub sql: String,
    /// The columns the target declares (`expectColumns`); a variable's query
    /// declares none, these are the ones it answered with.
    pub columns: Vec<String>,
    pub time_series: bool,
    /// The variable values the SQL was expanded with.
    pub vars: BTreeMap<String, String>,
    /// `Some(name)` for the query of the variable `name`.
    pub variable: Option<String>,
    /// Data links that leave Grafana (to the gateway), not yet expanded.
    pub external_links: Vec<String>,
}

/// What ClickHouse answered: column (name, type) and the rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub columns: Vec<(String, String)>,
    pub rows: Vec<Value>,
}

/// The string in `value` (panics otherwise: tests only).
pub fn str_of<'a>(value: &'a Value, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {value}"))
}

/// `curl <clickhouse> --data-binary '<sql> FORMAT JSON'`.
pub async fn clickhouse_query(stack: &Stack, sql: &str) -> Result<Answer, String> {
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

/// `infra/grafana/dashboards`.
pub fn dashboards_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/grafana/dashboards")
}

/// Every dashboard JSON, by file name, sorted.
pub fn dashboards() -> Vec<(String, Value)> {
    let dir = dashboards_dir();
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
pub fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push(panel);
        if let Some(nested) = panel["panels"].as_array() {
            all.extend(nested);
        }
    }
    all
}

/// A panel, target or variable reads the jetcron ClickHouse datasource.
pub fn assert_clickhouse_datasource(value: &Value, what: &str) {
    assert_eq!(value["datasource"]["type"], DATASOURCE_TYPE, "{what}");
    assert_eq!(value["datasource"]["uid"], DATASOURCE_UID, "{what}");
}

/// The panel's SQL with variables and macros expanded for `vars`.
pub fn expand(
    sql: &str,
    vars: &BTreeMap<String, String>,
    ctx: &QueryContext,
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
    let sql = macros::interpolate_variables(sql, vars).unwrap_or_else(|e| panic!("{what}: {e}"));
    let sql = macros::expand_macros(&sql, ctx).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        !sql.contains('$'),
        "{what}: unexpanded variable or macro in\n{sql}"
    );
    sql
}

/// Variables with fixed values (textbox, constant) and query variables.
pub fn variables(dashboard: &Value) -> (BTreeMap<String, String>, Vec<(String, String)>) {
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
/// the time range, and an internal link targets a dashboard variable; the
/// links that leave Grafana.
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

/// Every panel query of every dashboard, expanded for every value of the
/// dashboard's query variables, whose own queries come first (and must
/// answer on the stack's ClickHouse).
pub async fn panel_queries(
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
            let ctx = QueryContext { from, to, interval };
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
            queries.push(PanelQuery {
                label,
                sql,
                columns: answer.columns.into_iter().map(|c| c.0).collect(),
                time_series: false,
                vars: fixed.clone(),
                variable: Some(var.clone()),
                external_links: Vec::new(),
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
            let chosen: String = query_vars
                .iter()
                .map(|(var, _)| format!(" {var}={}", vars[var]))
                .collect();
            for panel in panels(dashboard) {
                let Some(targets) = panel["targets"].as_array() else {
                    continue;
                };
                let title = str_of(&panel["title"], "title");
                let interval = match panel["interval"].as_str() {
                    Some(i) => {
                        macros::parse_interval(i).unwrap_or_else(|| panic!("{title}: interval {i}"))
                    }
                    None => Duration::from_secs(1),
                };
                let ctx = QueryContext { from, to, interval };
                for target in targets {
                    let ref_id = target["refId"].as_str().unwrap_or("A");
                    let label = format!("{name}: {title} ({ref_id}){chosen}");
                    let columns: Vec<String> = target["expectColumns"]
                        .as_array()
                        .unwrap_or_else(|| panic!("{label}: expectColumns"))
                        .iter()
                        .map(|c| str_of(c, "column").to_string())
                        .collect();
                    let external_links = check_links(panel, &columns, vars, &all_vars);
                    queries.push(PanelQuery {
                        sql: expand(str_of(&target["rawSql"], "rawSql"), vars, &ctx, &label),
                        label,
                        columns,
                        time_series: target["format"] == 0,
                        vars: vars.clone(),
                        variable: None,
                        external_links,
                    });
                }
            }
        }
    }
    queries
}

/// Run every query on the stack's ClickHouse (18.16): each answers with the
/// declared columns, `time` (a `DateTime`) first in a time series.
pub async fn run_panels(stack: &Stack, queries: &[PanelQuery]) -> Vec<Answer> {
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
        answers.push(answer);
    }
    answers
}
