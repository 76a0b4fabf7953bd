//! The replicated ClickHouse schema (`schemas/clickhouse/replicated/`, for a
//! cluster of one shard with several replicas) checked against the
//! single-node schema the projector applies, on a current ClickHouse (chdb):
//!
//! - every replicated statement parses (`formatQuery`: a Replicated engine
//!   cannot run without Keeper, which chdb has not), carries `ON CLUSTER`,
//!   and every table has a Replicated engine with its own Keeper path;
//! - the replicated DDL made single-node mechanically (no `ON CLUSTER`,
//!   `Replicated*MergeTree(path, replica, args)` → `*MergeTree(args)`)
//!   creates exactly what the single-node DDL creates: the same objects,
//!   engines, columns and types, sorting, primary and partition keys,
//!   settings and view queries. So the two cannot drift apart;
//! - on that schema, a retried INSERT (the same block again) is dropped by
//!   block deduplication, the mechanism ReplicatedMergeTree runs across
//!   replicas through Keeper (a single node keeps the same block log locally
//!   when `non_replicated_deduplication_window` is set), and the same events
//!   in other blocks change no answer: `run_state` folds them into the same
//!   aggregates, `run_events` collapses them in a merge;
//! - the SQL of docs/clickhouse-replication.md parses;
//! - `--clickhouse-schema replicated` creates nothing and names what is
//!   missing or not replicated (on the 18.16 server, which has no Keeper:
//!   the accepting case is not run here).

use jetcron_io::clickhouse_schema::{statements, MIGRATIONS};
use jetcron_testkit::chdb::run_statements_on_chdb;
use serde_json::Value;

fn replicated_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas/clickhouse/replicated")
}

/// The replicated DDL files, by name, in the order they apply.
fn replicated_files() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(replicated_dir())
        .expect("schemas/clickhouse/replicated")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "sql"))
        .map(|path| {
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read_to_string(&path).expect("read DDL file"))
        })
        .collect();
    files.sort();
    files
}

fn replicated_statements() -> Vec<String> {
    replicated_files()
        .iter()
        .flat_map(|(_, sql)| statements(sql))
        .collect()
}

fn single_node_statements() -> Vec<String> {
    MIGRATIONS
        .iter()
        .flat_map(|(_, sql)| statements(sql))
        .collect()
}

/// `text` as a ClickHouse string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// What a Replicated engine clause said.
#[derive(Debug)]
struct ReplicatedEngine {
    /// `ReplacingMergeTree` for `ReplicatedReplacingMergeTree`.
    family: String,
    /// Keeper path and replica name; `None` in the default-arguments form.
    path: Option<String>,
    replica: Option<String>,
}

/// Top-level arguments of an engine clause (no nested parentheses in ours).
fn split_arguments(arguments: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let (mut current, mut quoted) = (String::new(), false);
    for c in arguments.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' if !quoted => parts.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    parts.push(current);
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn unquoted(argument: &str) -> String {
    argument.trim_matches('\'').to_string()
}

/// `statement` without its `ON CLUSTER` clause and with its Replicated
/// engine replaced by the single-node one (the same engine arguments after
/// the Keeper path and replica name); the engine it replaced, if any.
fn single_node(statement: &str) -> (String, Option<ReplicatedEngine>) {
    let mut sql = statement.to_string();
    if let Some(at) = sql.find(" ON CLUSTER ") {
        let rest = &sql[at + " ON CLUSTER ".len()..];
        let name_len = if let Some(quoted) = rest.strip_prefix('\'') {
            quoted.find('\'').expect("closing quote of the cluster") + 2
        } else {
            rest.find(char::is_whitespace).unwrap_or(rest.len())
        };
        sql.replace_range(at..at + " ON CLUSTER ".len() + name_len, "");
    }
    let Some(at) = sql.find("ENGINE = Replicated") else {
        return (sql, None);
    };
    let name_start = at + "ENGINE = ".len();
    let name_len = sql[name_start..]
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(sql.len() - name_start);
    let name = sql[name_start..name_start + name_len].to_string();
    let family = name
        .strip_prefix("Replicated")
        .expect("a Replicated engine")
        .to_string();
    assert!(family.ends_with("MergeTree"), "engine {name}");
    let (arguments, clause_end) = match sql[name_start + name_len..].strip_prefix('(') {
        Some(rest) => {
            let close = rest.find(')').expect("closing parenthesis of the engine");
            (
                split_arguments(&rest[..close]),
                name_start + name_len + 1 + close + 1,
            )
        }
        None => (Vec::new(), name_start + name_len),
    };
    let (path, replica, engine_arguments) = match arguments.first() {
        Some(first) if first.starts_with('\'') => {
            assert!(arguments.len() >= 2, "{name}: a path needs a replica name");
            (
                Some(unquoted(&arguments[0])),
                Some(unquoted(&arguments[1])),
                arguments[2..].to_vec(),
            )
        }
        _ => (None, None, arguments),
    };
    sql.replace_range(
        name_start..clause_end,
        &format!("{family}({})", engine_arguments.join(", ")),
    );
    (
        sql,
        Some(ReplicatedEngine {
            family,
            path,
            replica,
        }),
    )
}

/// The catalog of database `jetcron`: what the two schemas must agree on.
const CATALOG: &[(&str, &str)] = &[
    (
        "database",
        "SELECT name, engine FROM system.databases WHERE name = 'jetcron'",
    ),
    (
        "tables",
        "SELECT name, engine, partition_key, sorting_key, primary_key, sampling_key, \
         engine_full, as_select, create_table_query \
         FROM system.tables WHERE database = 'jetcron' ORDER BY name",
    ),
    (
        "columns",
        "SELECT table, position, name, type, default_kind, default_expression, \
         compression_codec, is_in_partition_key, is_in_sorting_key, is_in_primary_key \
         FROM system.columns WHERE database = 'jetcron' ORDER BY table, position",
    ),
];

fn assert_no_errors(version: &str, statements: &[String], results: &[Value]) {
    for (sql, result) in statements.iter().zip(results) {
        assert!(
            result.get("error").is_none(),
            "chdb {version} refused: {sql}\n{result}"
        );
    }
}

#[tokio::test]
async fn every_replicated_statement_parses_on_current_clickhouse() {
    let files = replicated_files();
    let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    let single: Vec<&str> = MIGRATIONS.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, single, "one replicated file per single-node file");
    for ((name, sql), (_, single_sql)) in files.iter().zip(MIGRATIONS) {
        // The single-node DDL drops the views `run_state_mv_v3` replaced; a
        // replicated install drops them by hand once every service is
        // upgraded (docs/clickhouse-replication.md).
        let single_statements = statements(single_sql)
            .into_iter()
            .filter(|s| !s.starts_with("DROP TABLE IF EXISTS jetcron.run_state_mv"))
            .count();
        assert_eq!(
            statements(sql).len(),
            single_statements,
            "{name}: statements in the replicated and single-node files"
        );
    }

    let all = replicated_statements();
    let mut tables = 0;
    for statement in &all {
        assert!(
            statement.contains(" ON CLUSTER '{cluster}'"),
            "every object is created on every host: {statement}"
        );
        let (_, engine) = single_node(statement);
        if statement.starts_with("CREATE TABLE") {
            let engine = engine.unwrap_or_else(|| panic!("not a Replicated engine: {statement}"));
            let path = engine.path.as_deref().unwrap_or_default();
            assert!(
                path.contains("{shard}") && path.contains("{table}"),
                "{}: a Keeper path per shard and table, not {path:?}",
                engine.family
            );
            assert_eq!(engine.replica.as_deref(), Some("{replica}"));
            tables += 1;
        } else {
            assert!(engine.is_none(), "{statement}");
        }
    }
    assert_eq!(tables, 3, "run_events, job_events, run_state");

    let queries: Vec<String> = all
        .iter()
        .map(|s| format!("SELECT formatQuery({}) AS formatted", literal(s)))
        .collect();
    let (version, results) = run_statements_on_chdb(&queries).await;
    assert_no_errors(&version, &all, &results);
    for (statement, result) in all.iter().zip(&results) {
        let formatted = result["data"][0]["formatted"].as_str().unwrap_or_default();
        assert!(
            formatted.contains("ON CLUSTER `{cluster}`"),
            "chdb {version} read {statement}\nas {formatted}"
        );
    }
}

#[tokio::test]
async fn the_replicated_schema_made_single_node_is_the_single_node_schema() {
    let converted: Vec<(String, Option<ReplicatedEngine>)> = replicated_statements()
        .iter()
        .map(|s| single_node(s))
        .collect();
    for (sql, _) in &converted {
        assert!(
            !sql.contains("ON CLUSTER") && !sql.contains("Replicated"),
            "{sql}"
        );
    }
    let families: Vec<&str> = converted
        .iter()
        .filter_map(|(_, engine)| engine.as_ref().map(|e| e.family.as_str()))
        .collect();
    assert_eq!(
        families,
        [
            "ReplacingMergeTree",
            "ReplacingMergeTree",
            "AggregatingMergeTree"
        ]
    );

    let catalog: Vec<String> = CATALOG.iter().map(|(_, sql)| sql.to_string()).collect();
    let replicated: Vec<String> = converted
        .into_iter()
        .map(|(sql, _)| sql)
        .chain(catalog.iter().cloned())
        .collect();
    let single: Vec<String> = single_node_statements()
        .into_iter()
        .chain(catalog.iter().cloned())
        .collect();
    let ((version, replicated_results), (_, single_results)) = tokio::join!(
        run_statements_on_chdb(&replicated),
        run_statements_on_chdb(&single)
    );
    assert_no_errors(&version, &replicated, &replicated_results);
    assert_no_errors(&version, &single, &single_results);

    let replicated_catalog = &replicated_results[replicated.len() - CATALOG.len()..];
    let single_catalog = &single_results[single.len() - CATALOG.len()..];
    for (((what, _), made_single), single) in
        CATALOG.iter().zip(replicated_catalog).zip(single_catalog)
    {
        let (a, b) = (&made_single["data"], &single["data"]);
        assert!(
            a.as_array().is_some_and(|rows| !rows.is_empty()),
            "{what}: {a}"
        );
        let (a_rows, b_rows) = (a.as_array().expect("rows"), b.as_array().expect("rows"));
        assert_eq!(a_rows.len(), b_rows.len(), "{what}: {a}\n{b}");
        for (row_a, row_b) in a_rows.iter().zip(b_rows) {
            assert_eq!(
                row_a, row_b,
                "{what} on chdb {version}: replicated made single-node, then single-node"
            );
        }
    }
    let tables: Vec<&str> = replicated_catalog[1]["data"]
        .as_array()
        .expect("tables")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        tables,
        [
            "job_events",
            "job_state",
            "run_events",
            "run_state",
            "run_state_mv_v3",
            "runs"
        ]
    );
}

/// Two runs: one failed after a retry, one succeeded; and a missed fire.
const RUN_EVENTS: &[&str] = &[
    "('r1:1:started', 'r1', 'j', 'started', 'schedule', 'http', 'default', 1, 2, 'e1', 1000, 1100, NULL, NULL, NULL)",
    "('r1:1:retrying', 'r1', 'j', 'retrying', 'schedule', 'http', 'default', 1, 2, 'e1', 1000, 1200, 1200, 100, 'boom')",
    "('r1:2:started', 'r1', 'j', 'started', 'schedule', 'http', 'default', 2, 2, 'e2', 1000, 1300, NULL, NULL, NULL)",
    "('r1:2:failed', 'r1', 'j', 'failed', 'schedule', 'http', 'default', 2, 2, 'e2', 1000, 1400, 1400, 100, 'boom again')",
    "('r2:1:started', 'r2', 'j', 'started', 'schedule', 'http', 'default', 1, 2, 'e1', 2000, 2100, NULL, NULL, NULL)",
    "('r2:1:succeeded', 'r2', 'j', 'succeeded', 'schedule', 'http', 'default', 1, 2, 'e1', 2000, 2200, 2200, 100, NULL)",
];

fn insert_run_events(rows: &[&str]) -> String {
    format!(
        "INSERT INTO jetcron.run_events (event_id, run_id, job_id, kind, trigger, target_type, \
         pool, attempt, max_attempts, executor_id, scheduled_ms, at_ms, finished_ms, duration_ms, \
         error) SETTINGS async_insert = 0 VALUES {}",
        rows.join(", ")
    )
}

const INSERT_JOB_EVENT: &str = "INSERT INTO jetcron.job_events SETTINGS async_insert = 0 VALUES \
    ('r3:fire.missed', 'fire.missed', 'gateway', 'j', 0, 3000, 0, [], [], \
     'no run of r3 scheduled at 3000', '[]', '', '')";

/// What the gateway and the dashboards read: runs, jobs, events, missed fires.
const ANSWERS: &[&str] = &[
    "SELECT * FROM jetcron.runs ORDER BY run_id",
    "SELECT * FROM jetcron.job_state",
    "SELECT count() AS events FROM (SELECT event_id FROM jetcron.run_events LIMIT 1 BY event_id)",
    "SELECT uniqExact(event_id) AS missed FROM jetcron.job_events WHERE kind = 'fire.missed'",
];
/// Rows stored, before merges.
const STORED: &str = "SELECT (SELECT count() FROM jetcron.run_events) AS run_events, \
    (SELECT count() FROM jetcron.run_state) AS run_state, \
    (SELECT count() FROM jetcron.job_events) AS job_events";

#[tokio::test]
async fn retried_blocks_are_dropped_and_replayed_events_change_no_answer() {
    let mut sql: Vec<String> = replicated_statements()
        .iter()
        .map(|s| single_node(s).0)
        .collect();
    // The block log a ReplicatedMergeTree keeps in Keeper, kept locally.
    for table in ["run_events", "run_state", "job_events"] {
        sql.push(format!(
            "ALTER TABLE jetcron.{table} MODIFY SETTING non_replicated_deduplication_window = 1000"
        ));
    }
    let batch = [insert_run_events(RUN_EVENTS), INSERT_JOB_EVENT.to_string()];
    // Checkpoints: (what happened, index of its first answer).
    let mut checkpoints = Vec::new();
    let mut checkpoint = |sql: &mut Vec<String>, what: &'static str| {
        checkpoints.push((what, sql.len()));
        sql.extend(ANSWERS.iter().map(|q| q.to_string()));
        sql.push(STORED.to_string());
    };
    // The projector's batch, then its retry after an error that came back
    // although ClickHouse had stored it (the same rows in the same order).
    sql.extend(batch.iter().cloned());
    checkpoint(&mut sql, "stored");
    sql.extend(batch.iter().cloned());
    checkpoint(&mut sql, "retried");
    // The same events delivered again in other batches (after the ack wait,
    // a replay from a new consumer): other blocks, no block deduplication.
    let reversed: Vec<&str> = RUN_EVENTS.iter().rev().copied().collect();
    sql.push(insert_run_events(&reversed[..2]));
    sql.push(insert_run_events(&reversed[2..]));
    checkpoint(&mut sql, "replayed");
    sql.push("OPTIMIZE TABLE jetcron.run_events FINAL".to_string());
    checkpoint(&mut sql, "merged");

    let (version, results) = run_statements_on_chdb(&sql).await;
    assert_no_errors(&version, &sql, &results);
    let answers_at = |at: usize| results[at..at + ANSWERS.len()].to_vec();
    let stored_at = |at: usize| {
        let row = &results[at + ANSWERS.len()]["data"][0];
        ["run_events", "run_state", "job_events"].map(|c| {
            row[c]
                .as_str()
                .and_then(|n| n.parse::<u64>().ok())
                .or_else(|| row[c].as_u64())
                .unwrap_or_else(|| panic!("{c} in {row}"))
        })
    };
    let (_, first) = checkpoints[0];
    let expected = answers_at(first);
    let runs = expected[0]["data"].as_array().expect("runs");
    let statuses: Vec<&str> = runs.iter().filter_map(|r| r["status"].as_str()).collect();
    assert_eq!(
        statuses,
        ["failed", "succeeded"],
        "chdb {version}: {runs:?}"
    );
    for (what, at) in &checkpoints {
        for (query, (got, want)) in ANSWERS.iter().zip(answers_at(*at).iter().zip(&expected)) {
            assert_eq!(got["data"], want["data"], "chdb {version}, {what}: {query}");
        }
    }
    let stored: Vec<(&str, [u64; 3])> = checkpoints
        .iter()
        .map(|(what, at)| (*what, stored_at(*at)))
        .collect();
    let events = RUN_EVENTS.len() as u64;
    assert_eq!(stored[0], ("stored", [events, 2, 1]), "chdb {version}");
    // The retry stored nothing: neither the events nor the view's block.
    assert_eq!(stored[1], ("retried", [events, 2, 1]), "chdb {version}");
    // Other blocks are stored, and fold into the same answers.
    let replayed = stored[2].1;
    assert_eq!(replayed[0], 2 * events, "chdb {version}: {stored:?}");
    assert!(replayed[1] > 2, "chdb {version}: {stored:?}");
    // A merge collapses the copies of each event.
    assert_eq!(stored[3].1[0], events, "chdb {version}: {stored:?}");
}

/// The statements of the fenced ```sql blocks of docs/clickhouse-replication.md.
fn guide_statements() -> Vec<String> {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/clickhouse-replication.md"),
    )
    .expect("docs/clickhouse-replication.md");
    doc.split("```sql")
        .skip(1)
        .flat_map(|block| statements(block.split("```").next().unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn the_sql_of_the_replication_guide_parses() {
    let all = guide_statements();
    assert!(all.len() >= 10, "{all:?}");
    let queries: Vec<String> = all
        .iter()
        .map(|s| format!("SELECT formatQuery({}) AS formatted", literal(s)))
        .collect();
    let (version, results) = run_statements_on_chdb(&queries).await;
    assert_no_errors(&version, &all, &results);
}

#[tokio::test]
async fn replicated_mode_creates_nothing_and_names_what_is_missing_or_not_replicated() {
    use jetcron_io::clickhouse_schema::{self, ClickHouseOptions, SchemaMode};
    let server = jetcron_testkit::ClickHouseServer::start();
    let client = ClickHouseOptions::new(server.url()).client();
    // An empty server: nothing is created, every object is named.
    let empty = clickhouse_schema::prepare(&client, SchemaMode::Replicated)
        .await
        .expect_err("no tables");
    let message = format!("{empty:#}");
    for object in ["run_events", "job_events", "run_state", "runs", "job_state"] {
        assert!(
            message.contains(&format!("jetcron.{object} is missing")),
            "{message}"
        );
    }
    assert!(
        message.contains("schemas/clickhouse/replicated/"),
        "{message}"
    );
    clickhouse_schema::prepare(&client, SchemaMode::None)
        .await
        .expect("none checks nothing");
    let tables: Vec<String> = client
        .query("SELECT name FROM system.tables WHERE database = 'jetcron'")
        .fetch_all()
        .await
        .unwrap_or_default();
    assert!(tables.is_empty(), "replicated or none created {tables:?}");
    // Tables made by the single-node DDL are refused, by name and engine.
    clickhouse_schema::prepare(&client, SchemaMode::Single)
        .await
        .expect("single applies");
    let single = clickhouse_schema::prepare(&client, SchemaMode::Replicated)
        .await
        .expect_err("not replicated");
    let message = format!("{single:#}");
    assert!(
        message.contains("jetcron.run_events has engine ReplacingMergeTree, not a Replicated one"),
        "{message}"
    );
    assert!(!message.contains("missing"), "{message}");
}
