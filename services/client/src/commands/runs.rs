//! `jetcron runs list|get|kill|logs`: the history (read from ClickHouse by
//! the gateway) and stopping a run.

use std::time::Duration;

use clap::{Args, Subcommand};
use jetcron_core::events::RunEventKind;
use serde_json::{json, Value};

use crate::api::{object, Api, CallError, Endpoint};
use crate::output::{self, shown, Format, Table};

/// How long `logs --follow` waits for a run to reach the history (a run
/// just triggered) before it says there is no such run.
const NOT_YET_PATIENCE: Duration = Duration::from_secs(60);

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List runs, newest scheduled time first (the last 7 days unless
    /// --from/--to say otherwise).
    List(ListRuns),
    /// Show one run: its status, attempts and events.
    Get { run_id: String },
    /// Stop a run wherever it is (a queued or retrying run when it next starts).
    Kill {
        run_id: String,
        /// Why, recorded with the kill.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Print what each attempt of a run wrote (output and error).
    Logs {
        run_id: String,
        /// Keep printing until the run has ended (waiting up to a minute
        /// for a run not in the history yet).
        #[arg(long)]
        follow: bool,
        /// How often --follow asks.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        interval: Duration,
    },
}

#[derive(Debug, Args)]
pub struct ListRuns {
    /// Only this job's runs.
    #[arg(long)]
    pub job: Option<String>,
    /// Only runs of this namespace's jobs.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Only these statuses (comma separated: succeeded,failed,…).
    #[arg(long)]
    pub status: Option<String>,
    /// Only runs of this pool.
    #[arg(long)]
    pub pool: Option<String>,
    /// RFC 3339 start of the scheduled-time range.
    #[arg(long)]
    pub from: Option<String>,
    /// RFC 3339 end of the scheduled-time range.
    #[arg(long)]
    pub to: Option<String>,
    /// Only runs whose error contains this text.
    #[arg(long)]
    pub search: Option<String>,
    /// At most this many runs (1 to 500, default 50).
    #[arg(long)]
    pub limit: Option<u32>,
    /// The page after this cursor (printed under a full page).
    #[arg(long)]
    pub cursor: Option<String>,
}

pub async fn run(api: &Api, command: RunsCommand, format: Format) -> anyhow::Result<String> {
    let (answer, text) = match command {
        RunsCommand::List(list) => {
            let body = object([
                ("job", list.job.map(Value::from)),
                ("namespace", list.namespace.map(Value::from)),
                ("status", list.status.map(Value::from)),
                ("pool", list.pool.map(Value::from)),
                ("from", list.from.map(Value::from)),
                ("to", list.to.map(Value::from)),
                ("q", list.search.map(Value::from)),
                ("limit", list.limit.map(Value::from)),
                ("cursor", list.cursor.map(Value::from)),
            ]);
            let answer = api.call(Endpoint::RunsList, body).await?;
            let text = runs_table(&answer);
            (answer, text)
        }
        RunsCommand::Get { run_id } => {
            let answer = get(api, &run_id).await?;
            let text = run_text(&answer["run"]);
            (answer, text)
        }
        RunsCommand::Kill { run_id, reason } => {
            let body = object([
                ("run_id", Some(json!(run_id))),
                ("reason", reason.map(Value::from)),
            ]);
            let answer = api.call(Endpoint::RunsKill, body).await?;
            let stopped = answer["stopped"].as_array().map_or(0, Vec::len);
            let text = match stopped {
                0 => format!("kill of {run_id} recorded: no attempt was running, the run stops when it next starts\n"),
                n => format!("killed {run_id}: {n} running attempt(s) stopped\n"),
            };
            (answer, text)
        }
        RunsCommand::Logs {
            run_id,
            follow,
            interval,
        } => return logs(api, &run_id, follow, interval, format).await,
    };
    Ok(match format {
        Format::Json => output::json(&answer),
        Format::Table => text,
    })
}

async fn get(api: &Api, run_id: &str) -> Result<Value, CallError> {
    api.call(Endpoint::RunsGet, json!({"run_id": run_id})).await
}

fn runs_table(answer: &Value) -> String {
    let mut table = Table::new(&[
        "RUN",
        "JOB",
        "STATUS",
        "TRIGGER",
        "SCHEDULED",
        "LAG",
        "DURATION",
        "ATTEMPT",
        "ERROR",
    ]);
    for run in answer["runs"].as_array().into_iter().flatten() {
        table.row(vec![
            shown(&run["run_id"]),
            shown(&run["job_id"]),
            shown(&run["status"]),
            shown(&run["trigger"]),
            shown(&run["scheduled_at"]),
            millis(&run["fire_lag_ms"]),
            millis(&run["duration_ms"]),
            format!("{}/{}", shown(&run["attempt"]), shown(&run["max_attempts"])),
            shown(&run["error"]),
        ]);
    }
    let mut text = match table.is_empty() {
        true => format!(
            "no runs between {} and {}\n",
            shown(&answer["from"]),
            shown(&answer["to"])
        ),
        false => table.render(),
    };
    if let Some(cursor) = answer["next_cursor"].as_str() {
        text.push_str(&format!("more: --cursor {cursor}\n"));
    }
    text
}

fn millis(value: &Value) -> String {
    match value.as_i64() {
        Some(ms) if ms.abs() >= 10_000 => format!("{:.1}s", ms as f64 / 1000.0),
        Some(ms) => format!("{ms}ms"),
        None => "-".to_string(),
    }
}

fn run_text(run: &Value) -> String {
    let mut text = String::new();
    for (label, key) in [
        ("run", "run_id"),
        ("job", "job_id"),
        ("status", "status"),
        ("trigger", "trigger"),
        ("scheduled", "scheduled_at"),
        ("started", "first_started_at"),
        ("finished", "finished_at"),
        ("executor", "executor_id"),
        ("error", "error"),
    ] {
        if !run[key].is_null() {
            text.push_str(&format!(
                "{:<10} {}\n",
                format!("{label}:"),
                shown(&run[key])
            ));
        }
    }
    let mut attempts = Table::new(&[
        "ATTEMPT", "EXECUTOR", "STARTED", "FINISHED", "OUTCOME", "ERROR",
    ]);
    for attempt in run["attempts"].as_array().into_iter().flatten() {
        let number = match attempt["shard"].as_u64() {
            Some(shard) => format!("{} (shard {shard})", shown(&attempt["attempt"])),
            None => shown(&attempt["attempt"]),
        };
        attempts.row(vec![
            number,
            shown(&attempt["executor_id"]),
            shown(&attempt["started_at"]),
            shown(&attempt["finished_at"]),
            shown(&attempt["outcome"]),
            shown(&attempt["error"]),
        ]);
    }
    if !attempts.is_empty() {
        text.push('\n');
        text.push_str(&attempts.render());
    }
    text
}

/// Each attempt's output and error, from the run's events, in order.
fn log_sections(run: &Value) -> Vec<(String, String)> {
    let mut sections = Vec::new();
    for event in run["events"].as_array().into_iter().flatten() {
        let (output, error) = (event["output"].as_str(), event["error"].as_str());
        if output.is_none() && error.is_none() {
            continue;
        }
        let key = shown(&event["event_id"]);
        let mut body = String::new();
        body.push_str(&format!(
            "== attempt {} on {}: {} ==\n",
            shown(&event["attempt"]),
            shown(&event["executor_id"]),
            shown(&event["kind"])
        ));
        if let Some(output) = output {
            body.push_str(output);
            if !output.ends_with('\n') {
                body.push('\n');
            }
            if event["output_truncated"] == true {
                body.push_str("[output cut at the executor's limit]\n");
            }
        }
        if let Some(error) = error {
            body.push_str(&format!("error: {error}\n"));
        }
        sections.push((key, body));
    }
    sections
}

async fn logs(
    api: &Api,
    run_id: &str,
    follow: bool,
    interval: Duration,
    format: Format,
) -> anyhow::Result<String> {
    use std::io::Write as _;
    let mut printed = std::collections::HashSet::new();
    let mut waited = Duration::ZERO;
    loop {
        // A run just triggered is not in the history yet: --follow waits.
        let answer = match get(api, run_id).await {
            Err(e) if follow && e.status() == Some(404) && waited < NOT_YET_PATIENCE => {
                tokio::time::sleep(interval).await;
                waited += interval;
                continue;
            }
            answer => answer?,
        };
        let run = &answer["run"];
        // A run's status is the kind of its last event: over once terminal.
        let ended = run["status"]
            .as_str()
            .and_then(RunEventKind::parse)
            .is_some_and(RunEventKind::is_terminal);
        if format == Format::Json {
            if ended || !follow {
                return Ok(output::json(
                    &json!({"ok": true, "run_id": run_id, "events": run["events"]}),
                ));
            }
        } else {
            let mut out = std::io::stdout().lock();
            for (key, body) in log_sections(run) {
                if printed.insert(key) {
                    let _ = out.write_all(body.as_bytes());
                }
            }
            let _ = out.flush();
            if !follow || ended {
                if printed.is_empty() {
                    return Ok(format!(
                        "run {run_id} ({}) wrote nothing\n",
                        shown(&run["status"])
                    ));
                }
                return Ok(String::new());
            }
        }
        tokio::time::sleep(interval).await;
    }
}
