//! The ClickHouse side: the DDL in `schemas/clickhouse/`, the row type of
//! `jetcron.run_events`, and a client configured for every supported server.
//!
//! The DDL files are compiled in and applied in file-name order with
//! `IF NOT EXISTS`, so the projector and the gateway can both run them at start.
//! Validation is off in the client because ClickHouse 18.16 (Debian's package)
//! lacks `RowBinaryWithNamesAndTypes`; the row type here is the one place that
//! must match the table.

use anyhow::Context as _;
use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use tracing::warn;

use jetcron_core::audit::JobChange;
use jetcron_core::events::{AttemptOutcome, RunEvent, RunEventKind, RunId, Trigger};
use jetcron_core::job_events::{FireMissed, JobEvent, JobRejected};
use jetcron_core::time_format;

/// The DDL files, in the order they apply.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "001_database.sql",
        include_str!("../../../schemas/clickhouse/001_database.sql"),
    ),
    (
        "002_run_events.sql",
        include_str!("../../../schemas/clickhouse/002_run_events.sql"),
    ),
    (
        "003_job_events.sql",
        include_str!("../../../schemas/clickhouse/003_job_events.sql"),
    ),
    (
        "004_run_state.sql",
        include_str!("../../../schemas/clickhouse/004_run_state.sql"),
    ),
    (
        "005_run_parents.sql",
        include_str!("../../../schemas/clickhouse/005_run_parents.sql"),
    ),
    (
        "006_job_authors.sql",
        include_str!("../../../schemas/clickhouse/006_job_authors.sql"),
    ),
];

/// How to reach ClickHouse.
#[derive(Debug, Clone)]
pub struct ClickHouseOptions {
    /// HTTP interface, e.g. `http://127.0.0.1:8123`.
    pub url: String,
    pub user: Option<String>,
    pub password: Option<String>,
    /// Who makes the tables: jetcron (single node) or the operator.
    pub schema: SchemaMode,
}

/// Who creates jetcron's tables, and what is checked at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SchemaMode {
    /// jetcron applies `schemas/clickhouse/*.sql` (idempotently).
    #[default]
    Single,
    /// The operator applied `schemas/clickhouse/replicated/` with
    /// `ON CLUSTER`; jetcron creates nothing and waits until every table is
    /// there with a Replicated engine (a table it created itself would be
    /// on one server only, and the `ON CLUSTER` DDL would skip it).
    Replicated,
    /// The operator owns the schema entirely; nothing is checked.
    None,
}

impl std::str::FromStr for SchemaMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "single" => Ok(Self::Single),
            "replicated" => Ok(Self::Replicated),
            "none" => Ok(Self::None),
            other => Err(format!(
                "{other:?} is not a schema mode: single, replicated or none"
            )),
        }
    }
}

/// The tables (with a MergeTree engine) and views the services need.
const TABLES: [&str; 3] = ["run_events", "job_events", "run_state"];
const VIEWS: [&str; 3] = [RUN_STATE_VIEW, "runs", "job_state"];
/// The materialized view that folds run events into `run_state`.
const RUN_STATE_VIEW: &str = "run_state_mv_v3";
/// The views it replaced, newest first, with what a run list folded by
/// each gets wrong (docs/clickhouse-replication.md, upgrading). The
/// single-node DDL drops them; a replicated install drops them by hand.
const OLD_RUN_STATE_VIEWS: [(&str, &str); 2] = [
    (
        "run_state_mv_v2",
        "an event of an earlier attempt stored after a later attempt's can decide a run's status",
    ),
    (
        "run_state_mv",
        "an event of an earlier attempt stored after a later attempt's can decide a run's \
         status, and a run whose started event was lost lists no start",
    ),
];

impl ClickHouseOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            user: None,
            password: None,
            schema: SchemaMode::Single,
        }
    }

    /// A client for these options (no request is made yet).
    pub fn client(&self) -> clickhouse::Client {
        let mut client = clickhouse::Client::default()
            .with_url(&self.url)
            .with_validation(false);
        if let Some(user) = &self.user {
            client = client.with_user(user);
        }
        if let Some(password) = &self.password {
            client = client.with_password(password);
        }
        client
    }
}

/// The statements of one DDL file, comments removed.
pub fn statements(sql: &str) -> Vec<String> {
    let without_comments: String = sql
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    without_comments
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Apply every migration, idempotently.
pub async fn apply(client: &clickhouse::Client) -> anyhow::Result<()> {
    for (name, sql) in MIGRATIONS {
        for statement in statements(sql) {
            let statement = match column_addition(&statement) {
                Some(addition) => match missing_column(client, &addition).await? {
                    true => addition.without_condition,
                    false => continue,
                },
                None => statement,
            };
            client
                .query(&statement)
                .execute()
                .await
                .with_context(|| format!("apply ClickHouse migration {name}"))?;
        }
    }
    Ok(())
}

/// `ALTER TABLE <db.table> ADD COLUMN IF NOT EXISTS <column> …`, taken
/// apart: ClickHouse 18.16 knows no `IF NOT EXISTS` there, so jetcron asks
/// `system.columns` and adds the column without the condition when it is
/// missing (the DDL files keep the condition, for operators and current
/// servers).
#[derive(Debug, PartialEq)]
struct ColumnAddition {
    database: String,
    table: String,
    column: String,
    without_condition: String,
}

fn column_addition(statement: &str) -> Option<ColumnAddition> {
    let words: Vec<&str> = statement.split_whitespace().collect();
    let prefix = ["ALTER", "TABLE"];
    let condition = ["ADD", "COLUMN", "IF", "NOT", "EXISTS"];
    if words.len() < 9 || words[..2] != prefix || words[3..8] != condition {
        return None;
    }
    let (database, table) = words[2].split_once('.')?;
    Some(ColumnAddition {
        database: database.to_string(),
        table: table.to_string(),
        column: words[8].to_string(),
        without_condition: statement.replacen("IF NOT EXISTS ", "", 1),
    })
}

async fn missing_column(
    client: &clickhouse::Client,
    addition: &ColumnAddition,
) -> anyhow::Result<bool> {
    let count: u64 = client
        .query("SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = ?")
        .bind(&addition.database)
        .bind(&addition.table)
        .bind(&addition.column)
        .fetch_one()
        .await
        .with_context(|| {
            format!(
                "look for column {} of {}.{}",
                addition.column, addition.database, addition.table
            )
        })?;
    Ok(count == 0)
}

/// Make the schema ready as `mode` says: apply it, or check the replicated
/// one the operator applied (an error names what is missing or not
/// [`prepare`], retried until it succeeds or `shutdown` is asked (a
/// service starts while ClickHouse is away and catches up when it comes):
/// jittered waits from 250 ms to 10 s, one log line per 10 s. `false` when
/// shutdown came first.
pub async fn prepare_when_possible(
    client: &clickhouse::Client,
    mode: SchemaMode,
    shutdown: &tokio_util::sync::CancellationToken,
) -> bool {
    let mut delay = crate::retry::RetryDelay::new(
        std::time::Duration::from_millis(250),
        std::time::Duration::from_secs(10),
    );
    let mut failures = crate::retry::LogLimiter::per_10s();
    loop {
        match prepare(client, mode).await {
            Ok(()) => return true,
            Err(e) => {
                if let Some(count) = failures.admit() {
                    tracing::warn!(error = %format!("{e:#}"), count, "ClickHouse schema not ready yet, retrying");
                }
            }
        }
        if delay.sleep(shutdown).await {
            return false;
        }
    }
}

/// replicated; callers retry).
pub async fn prepare(client: &clickhouse::Client, mode: SchemaMode) -> anyhow::Result<()> {
    match mode {
        SchemaMode::Single => apply(client).await,
        SchemaMode::Replicated => check_replicated(client).await,
        SchemaMode::None => Ok(()),
    }
}

#[derive(Debug, clickhouse::Row, Deserialize)]
struct TableRow {
    name: String,
    engine: String,
}

async fn check_replicated(client: &clickhouse::Client) -> anyhow::Result<()> {
    let found: Vec<TableRow> = client
        .query("SELECT name, engine FROM system.tables WHERE database = 'jetcron'")
        .fetch_all()
        .await
        .context("read jetcron's tables from system.tables")?;
    let ReplicatedCheck { problems, old_view } = replicated_check(&found);
    if let Some((old, flaw)) = old_view {
        warn!(
            "jetcron.{RUN_STATE_VIEW} is missing, jetcron.{old} folds the runs ({flaw}): apply \
             schemas/clickhouse/replicated/004_run_state.sql ON CLUSTER"
        );
    }
    anyhow::ensure!(
        problems.is_empty(),
        "--clickhouse-schema replicated: {}; apply schemas/clickhouse/replicated/ ON CLUSTER \
         (docs/clickhouse-replication.md)",
        problems.join(", ")
    );
    Ok(())
}

/// What a replicated install's tables say: what is wrong, and which old
/// view folds the runs (with what it gets wrong) when the current one is
/// missing.
#[derive(Debug, PartialEq)]
struct ReplicatedCheck {
    problems: Vec<String>,
    old_view: Option<(&'static str, &'static str)>,
}

fn replicated_check(found: &[TableRow]) -> ReplicatedCheck {
    let engine = |name: &str| {
        found
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.engine.as_str())
    };
    let mut problems = Vec::new();
    let mut old_view = None;
    for table in TABLES {
        match engine(table) {
            None => problems.push(format!("jetcron.{table} is missing")),
            Some(e) if !e.starts_with("Replicated") => problems.push(format!(
                "jetcron.{table} has engine {e}, not a Replicated one"
            )),
            Some(_) => {}
        }
    }
    for view in VIEWS {
        if engine(view).is_some() {
            continue;
        }
        // An install from before 2026-12-05 until its replicated 004 file
        // is applied again: an old view folds the runs, with its flaws.
        if view == RUN_STATE_VIEW {
            old_view = OLD_RUN_STATE_VIEWS
                .into_iter()
                .find(|(old, _)| engine(old).is_some());
            if old_view.is_some() {
                continue;
            }
        }
        problems.push(format!("jetcron.{view} is missing"));
    }
    ReplicatedCheck { problems, old_view }
}

/// One row of `jetcron.run_events`.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct RunEventRow {
    pub event_id: String,
    pub run_id: String,
    pub job_id: String,
    pub kind: String,
    pub trigger: String,
    pub target_type: String,
    pub pool: String,
    pub attempt: u32,
    pub max_attempts: u32,
    pub executor_id: String,
    pub scheduled_ms: i64,
    pub at_ms: i64,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub duration_ms: Option<i64>,
    pub retry_at_ms: Option<i64>,
    pub status_code: Option<i32>,
    pub exit_code: Option<i32>,
    pub output: Option<String>,
    pub output_truncated: u8,
    pub error: Option<String>,
    pub outcome: Option<String>,
    pub shard: Option<u32>,
    pub shards: Option<u32>,
    /// The run whose end started this one; empty when none (a chain's child).
    pub parent_run_id: String,
    pub parent_job_id: String,
}

/// Column list of [`RunEventRow`], for `SELECT`s that read it back.
pub const RUN_EVENT_COLUMNS: &str = "event_id, run_id, job_id, kind, trigger, target_type, pool, \
    attempt, max_attempts, executor_id, scheduled_ms, at_ms, started_ms, finished_ms, duration_ms, \
    retry_at_ms, status_code, exit_code, output, output_truncated, error, outcome, shard, shards, \
    parent_run_id, parent_job_id";

impl From<&RunEvent> for RunEventRow {
    fn from(e: &RunEvent) -> Self {
        Self {
            event_id: e.event_id.clone(),
            run_id: e.run_id.0.clone(),
            job_id: e.job_id.clone(),
            kind: e.kind.as_str().to_string(),
            trigger: e.trigger.as_str().to_string(),
            target_type: e.target_type.clone(),
            pool: e.pool.clone(),
            attempt: e.attempt,
            max_attempts: e.max_attempts,
            executor_id: e.executor_id.clone(),
            scheduled_ms: e.scheduled_at.timestamp_millis(),
            at_ms: e.at.timestamp_millis(),
            started_ms: e.started_at.map(|t| t.timestamp_millis()),
            finished_ms: e.finished_at.map(|t| t.timestamp_millis()),
            duration_ms: e.duration_ms,
            retry_at_ms: e.retry_at.map(|t| t.timestamp_millis()),
            status_code: e.status_code,
            exit_code: e.exit_code,
            output: e.output.clone(),
            output_truncated: u8::from(e.output_truncated),
            error: e.error.clone(),
            outcome: e.outcome.map(|o| o.as_str().to_string()),
            shard: e.shard,
            shards: e.shards,
            parent_run_id: e
                .parent_run_id
                .as_ref()
                .map(|r| r.0.clone())
                .unwrap_or_default(),
            parent_job_id: e.parent_job_id.clone().unwrap_or_default(),
        }
    }
}

fn from_millis(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

impl RunEventRow {
    /// Back to the event; `None` for a row whose kind or trigger this build does not know.
    pub fn into_event(self) -> Option<RunEvent> {
        let trigger = Trigger::parse(&self.trigger)?;
        Some(RunEvent {
            event_id: self.event_id,
            run_id: RunId(self.run_id),
            job_id: self.job_id,
            kind: RunEventKind::parse(&self.kind)?,
            trigger,
            scheduled_at: from_millis(self.scheduled_ms),
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            executor_id: self.executor_id,
            target_type: self.target_type,
            pool: self.pool,
            at: from_millis(self.at_ms),
            started_at: self.started_ms.map(from_millis),
            finished_at: self.finished_ms.map(from_millis),
            duration_ms: self.duration_ms,
            status_code: self.status_code,
            exit_code: self.exit_code,
            output: self.output,
            output_truncated: self.output_truncated != 0,
            error: self.error,
            retry_at: self.retry_at_ms.map(from_millis),
            outcome: self.outcome.as_deref().and_then(AttemptOutcome::parse),
            shard: self.shard,
            shards: self.shards,
            parent_run_id: (!self.parent_run_id.is_empty()).then_some(RunId(self.parent_run_id)),
            parent_job_id: (!self.parent_job_id.is_empty()).then_some(self.parent_job_id),
        })
    }
}

/// One row of `jetcron.job_events`.
#[derive(Debug, Clone, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct JobEventRow {
    pub event_id: String,
    pub kind: String,
    pub source: String,
    pub job_id: String,
    pub revision: u64,
    pub at_ms: i64,
    pub size: u64,
    pub fields: Vec<String>,
    pub codes: Vec<String>,
    pub message: String,
    pub problems: String,
    /// Who wrote the revision (`job.changed`, `job.deleted`; empty for
    /// other kinds).
    pub actor: String,
    /// Through which door.
    pub door: String,
}

/// Column list of [`JobEventRow`].
pub const JOB_EVENT_COLUMNS: &str =
    "event_id, kind, source, job_id, revision, at_ms, size, fields, codes, message, problems, actor, door";

impl From<&JobRejected> for JobEventRow {
    fn from(e: &JobRejected) -> Self {
        Self {
            event_id: e.event_id.clone(),
            kind: e.kind.clone(),
            source: e.source.as_str().to_string(),
            job_id: e.job_id.clone().unwrap_or_default(),
            revision: e.revision.unwrap_or(0),
            at_ms: e.at.timestamp_millis(),
            size: e.size,
            fields: e.problems.iter().map(|p| p.field.clone()).collect(),
            codes: e.problems.iter().map(|p| p.code.clone()).collect(),
            message: e
                .problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
            problems: serde_json::to_string(&e.problems).unwrap_or_else(|_| "[]".into()),
            actor: String::new(),
            door: String::new(),
        }
    }
}

/// The row of a missed fire: `at_ms` is the scheduled time (so repeats
/// collapse in the table's `(at_ms, event_id)` key), `source` is `gateway`,
/// and `message` names the run id and the time; nothing in it depends on
/// which gateway found it or when.
impl From<&FireMissed> for JobEventRow {
    fn from(e: &FireMissed) -> Self {
        Self {
            event_id: e.event_id.clone(),
            kind: e.kind.clone(),
            source: "gateway".into(),
            job_id: e.job_id.clone(),
            revision: 0,
            at_ms: e.scheduled_at.timestamp_millis(),
            size: 0,
            fields: Vec::new(),
            codes: Vec::new(),
            message: format!(
                "no run of {} scheduled at {}",
                e.run_id.as_str(),
                time_format::rfc3339_millis(e.scheduled_at)
            ),
            problems: "[]".into(),
            actor: String::new(),
            door: String::new(),
        }
    }
}

impl From<&JobChange> for JobEventRow {
    fn from(change: &JobChange) -> Self {
        Self {
            event_id: change.event_id(),
            kind: change.kind().into(),
            source: "bucket".into(),
            job_id: change.key.clone(),
            revision: change.revision,
            at_ms: change.at.timestamp_millis(),
            size: change.size,
            fields: Vec::new(),
            codes: Vec::new(),
            message: String::new(),
            problems: "[]".into(),
            actor: change.author.actor.clone(),
            door: change.author.door.as_str().into(),
        }
    }
}

impl From<&JobEvent> for JobEventRow {
    fn from(event: &JobEvent) -> Self {
        match event {
            JobEvent::Rejected(e) => JobEventRow::from(e),
            JobEvent::FireMissed(e) => JobEventRow::from(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddl_files_split_into_statements() {
        let all: Vec<String> = MIGRATIONS
            .iter()
            .flat_map(|(_, sql)| statements(sql))
            .collect();
        assert_eq!(all.len(), 13);
        assert!(all[0].starts_with("CREATE DATABASE IF NOT EXISTS jetcron"));
        assert!(all[1].contains("ORDER BY (job_id, scheduled_ms, run_id, event_id)"));
        assert!(all[2].contains("jetcron.job_events"));
        assert!(
            all[4].starts_with("CREATE MATERIALIZED VIEW IF NOT EXISTS jetcron.run_state_mv_v3 ")
        );
        assert_eq!(all[5], "DROP TABLE IF EXISTS jetcron.run_state_mv_v2");
        assert_eq!(all[6], "DROP TABLE IF EXISTS jetcron.run_state_mv");
        assert!(all.iter().all(|s| !s.contains("--")));
        assert_eq!(
            column_addition(&all[9]),
            Some(ColumnAddition {
                database: "jetcron".into(),
                table: "run_events".into(),
                column: "parent_run_id".into(),
                without_condition:
                    "ALTER TABLE jetcron.run_events ADD COLUMN parent_run_id String DEFAULT ''"
                        .into(),
            })
        );
        assert_eq!(column_addition(&all[1]), None);
        let authors: Vec<String> = all[11..]
            .iter()
            .filter_map(|s| column_addition(s))
            .map(|a| format!("{}.{}", a.table, a.column))
            .collect();
        assert_eq!(authors, ["job_events.actor", "job_events.door"]);
    }

    #[test]
    fn a_missed_fire_row_does_not_depend_on_when_it_was_found() {
        let at = DateTime::parse_from_rfc3339("2026-03-01T10:00:00Z")
            .expect("instant")
            .with_timezone(&Utc);
        let grace = chrono::Duration::minutes(2);
        let first = FireMissed::new("nightly", at, at + grace, grace);
        let again = FireMissed::new("nightly", at, at + grace * 5, grace);
        let row = JobEventRow::from(&first);
        assert_eq!(row, JobEventRow::from(&again), "rows do not depend on when");
        assert_eq!(
            (row.kind.as_str(), row.at_ms),
            ("fire.missed", at.timestamp_millis())
        );
        assert!(
            row.message.contains(first.run_id.as_str()),
            "{}",
            row.message
        );
        assert_eq!(JobEventRow::from(&JobEvent::FireMissed(first)), row);
    }

    fn tables(rows: &[(&str, &str)]) -> Vec<TableRow> {
        rows.iter()
            .map(|(name, engine)| TableRow {
                name: name.to_string(),
                engine: engine.to_string(),
            })
            .collect()
    }

    #[test]
    fn a_replicated_install_is_checked_table_by_table_and_an_old_view_is_let_through() {
        let replicated = [
            ("run_events", "ReplicatedMergeTree"),
            ("job_events", "ReplicatedMergeTree"),
            ("run_state", "ReplicatedAggregatingMergeTree"),
            ("runs", "View"),
            ("job_state", "View"),
        ];
        let with = |views: &[&'static str]| {
            let mut rows = replicated.to_vec();
            rows.extend(views.iter().map(|v| (*v, "MaterializedView")));
            replicated_check(&tables(&rows))
        };
        let fine = ReplicatedCheck {
            problems: vec![],
            old_view: None,
        };
        assert_eq!(with(&["run_state_mv_v3"]), fine);
        assert_eq!(
            with(&["run_state_mv_v3", "run_state_mv_v2", "run_state_mv"]),
            fine,
            "old views not dropped yet fold beside the new one"
        );
        let folded_by = |views: &[&'static str]| with(views).old_view.map(|(view, _)| view);
        assert_eq!(with(&["run_state_mv_v2"]).problems, Vec::<String>::new());
        assert_eq!(
            folded_by(&["run_state_mv_v2"]),
            Some("run_state_mv_v2"),
            "an install from before the new view runs, with a warning"
        );
        assert_eq!(folded_by(&["run_state_mv"]), Some("run_state_mv"));
        assert_eq!(
            folded_by(&["run_state_mv", "run_state_mv_v2"]),
            Some("run_state_mv_v2"),
            "the newest old view is named"
        );
        let (_, flaw) = with(&["run_state_mv"]).old_view.expect("old view");
        assert!(flaw.contains("lists no start"), "{flaw}");
        assert_eq!(
            replicated_check(&tables(&replicated)).problems,
            vec!["jetcron.run_state_mv_v3 is missing"]
        );
        let mut single_node = replicated.to_vec();
        single_node[0] = ("run_events", "MergeTree");
        single_node.push(("run_state_mv_v3", "MaterializedView"));
        assert_eq!(
            replicated_check(&tables(&single_node)).problems,
            vec!["jetcron.run_events has engine MergeTree, not a Replicated one"]
        );
        assert_eq!(replicated_check(&[]).problems.len(), 6, "all missing");
    }
}
