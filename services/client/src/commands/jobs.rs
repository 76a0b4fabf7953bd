//! `jetcron jobs list|get|put|delete|pause|resume|trigger|backfill|preview`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use jetcron_core::job::redact_written;
use serde_json::{json, Value};

use crate::api::{object, Api, CallError, Endpoint};
use crate::manifest;
use crate::output::{self, shown, Format, Table};

/// Jobs per page when a command reads every job.
pub const PAGE: usize = 500;

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List jobs, ordered by id.
    List(ListJobs),
    /// Show one job: its revision, whether it is valid, its definition.
    Get {
        id: String,
        /// Show the values of target.headers, target.env and
        /// notify.headers (hidden by default, as in exports).
        #[arg(long)]
        show_secrets: bool,
    },
    /// Create or replace the jobs of files (JSON or YAML; `-` reads
    /// standard input), each as one put: no plan, no prune (see `apply`).
    Put {
        #[arg(short = 'f', long = "file", required = true)]
        files: Vec<PathBuf>,
    },
    /// Delete a job (its history stays in the bucket).
    Delete {
        id: String,
        /// Only if the job is still at this revision.
        #[arg(long)]
        expected_revision: Option<u64>,
    },
    /// Pause a job, or every job with the given labels.
    Pause(SelectJobs),
    /// Resume a job, or every job with the given labels.
    Resume(SelectJobs),
    /// Run a job now (a manual run).
    Trigger { id: String },
    /// Run the scheduled times of a past range that have no run yet.
    Backfill {
        id: String,
        /// RFC 3339 start of the range.
        #[arg(long)]
        from: String,
        /// RFC 3339 end of the range.
        #[arg(long)]
        to: String,
    },
    /// The next fires of a schedule line, with wall times and DST notes.
    Preview {
        /// The line, as in a job (`0 30 9 * * mon-fri`, `@every 5m`).
        schedule: String,
        /// IANA time zone (default UTC).
        #[arg(long)]
        timezone: Option<String>,
        /// How many fires (1 to 1000, default 10).
        #[arg(long)]
        count: Option<usize>,
        /// Fires after this RFC 3339 instant (default now).
        #[arg(long)]
        from: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct ListJobs {
    /// Only this namespace's jobs (`default`: names without a dot).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Only jobs with this label (`key=value`; repeat for several).
    #[arg(long = "label", value_parser = super::parse_label)]
    pub labels: Vec<(String, String)>,
    /// Show secret values in `-o json` (hidden by default).
    #[arg(long)]
    pub show_secrets: bool,
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct SelectJobs {
    /// The job.
    pub id: Option<String>,
    /// Every job with this label (`key=value`; repeat for several).
    #[arg(long = "label", value_parser = super::parse_label)]
    pub labels: Vec<(String, String)>,
}

/// Run `command`; the text to print.
pub async fn run(api: &Api, command: JobsCommand, format: Format) -> anyhow::Result<String> {
    let (answer, text) = match command {
        JobsCommand::List(list) => {
            let mut jobs = list_all(api, list.namespace.as_deref(), &list.labels).await?;
            if !list.show_secrets {
                jobs.iter_mut()
                    .for_each(|job| redact_written(&mut job["job"]));
            }
            return Ok(match format {
                Format::Json => output::json(&json!({"ok": true, "jobs": jobs})),
                Format::Table => jobs_table(&jobs),
            });
        }
        JobsCommand::Get { id, show_secrets } => {
            let mut answer = api.call(Endpoint::JobsGet, json!({"id": id})).await?;
            if !show_secrets {
                redact_written(&mut answer["job"]["job"]);
            }
            return Ok(match format {
                Format::Json => output::json(&answer),
                Format::Table => job_text(&answer["job"]),
            });
        }
        JobsCommand::Put { files } => return put_files(api, &files, format).await,
        JobsCommand::Delete {
            id,
            expected_revision,
        } => {
            let body = object([
                ("id", Some(json!(id))),
                ("expected_revision", expected_revision.map(Value::from)),
            ]);
            let answer = api.call(Endpoint::JobsDelete, body).await?;
            let line = format!(
                "deleted {id} (revision {})\n",
                shown(&answer["deleted_revision"])
            );
            (answer, line)
        }
        JobsCommand::Pause(select) => paused(api, Endpoint::JobsPause, select).await?,
        JobsCommand::Resume(select) => paused(api, Endpoint::JobsResume, select).await?,
        JobsCommand::Trigger { id } => {
            let answer = api.call(Endpoint::JobsTrigger, json!({"id": id})).await?;
            let line = format!("triggered {id}: run {}\n", shown(&answer["run_id"]));
            (answer, line)
        }
        JobsCommand::Backfill { id, from, to } => {
            let body = json!({"id": id, "from": from, "to": to});
            let answer = api.call(Endpoint::JobsBackfill, body).await?;
            let count = |k: &str| answer[k].as_array().map_or(0, Vec::len);
            let line = format!(
                "backfilled {id}: {} runs started, {} times had a run already\n",
                count("emitted"),
                count("skipped")
            );
            (answer, line)
        }
        JobsCommand::Preview {
            schedule,
            timezone,
            count,
            from,
        } => {
            let body = object([
                ("schedule", Some(json!(schedule))),
                ("timezone", timezone.map(Value::from)),
                ("count", count.map(Value::from)),
                ("from", from.map(Value::from)),
            ]);
            let answer = api.call(Endpoint::SchedulesPreview, body).await?;
            let text = preview_text(&answer);
            (answer, text)
        }
    };
    Ok(match format {
        Format::Json => output::json(&answer),
        Format::Table => text,
    })
}

/// Every job (of `namespace`, with `labels`), read in pages.
pub async fn list_all(
    api: &Api,
    namespace: Option<&str>,
    labels: &[(String, String)],
) -> Result<Vec<Value>, CallError> {
    let labels: serde_json::Map<String, Value> =
        labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    let mut jobs = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let body = object([
            ("namespace", namespace.map(Value::from)),
            (
                "labels",
                (!labels.is_empty()).then(|| Value::Object(labels.clone())),
            ),
            ("limit", Some(json!(PAGE))),
            ("after", after.clone().map(Value::from)),
        ]);
        let mut page = api.call(Endpoint::JobsList, body).await?;
        if let Some(Value::Array(more)) = page.get_mut("jobs").map(Value::take) {
            jobs.extend(more);
        }
        match page["next_after"].as_str() {
            // A page that does not move on would loop for ever.
            Some(next) if after.as_deref().is_some_and(|a| next <= a) => {
                return Err(CallError::Transport(anyhow::anyhow!(
                    "jobs.list did not move on after {next:?}: is the gateway older than this client?"
                )))
            }
            Some(next) => after = Some(next.to_string()),
            None => return Ok(jobs),
        }
    }
}

async fn paused(
    api: &Api,
    endpoint: Endpoint,
    select: SelectJobs,
) -> Result<(Value, String), CallError> {
    let body = match select.id {
        Some(id) => json!({"id": id}),
        None => {
            let labels: serde_json::Map<String, Value> = select
                .labels
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            json!({ "labels": labels })
        }
    };
    let answer = api.call(endpoint, body).await?;
    let verb = if endpoint == Endpoint::JobsPause {
        "paused"
    } else {
        "resumed"
    };
    let ids = |k: &str| -> Vec<String> {
        answer[k]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| {
                v["id"]
                    .as_str()
                    .or(v.as_str())
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    let mut text = String::new();
    for id in ids("changed") {
        text.push_str(&format!("{verb} {id}\n"));
    }
    for id in ids("unchanged") {
        text.push_str(&format!("{id} was {verb} already\n"));
    }
    for failed in answer["failed"].as_array().into_iter().flatten() {
        text.push_str(&format!(
            "{} not {verb}: {}\n",
            shown(&failed["id"]),
            shown(&failed["error"]["message"])
        ));
    }
    for id in answer["not_tried"].as_array().into_iter().flatten() {
        text.push_str(&format!("{} not tried\n", shown(id)));
    }
    Ok((answer, text))
}

/// Put every job of `files`, one request each, stopping at the first refusal.
async fn put_files(api: &Api, files: &[PathBuf], format: Format) -> anyhow::Result<String> {
    let jobs = manifest::read(files).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut answers = Vec::new();
    let mut text = String::new();
    for job in jobs {
        let answer = api
            .call(Endpoint::JobsPut, job.definition.clone())
            .await
            .map_err(|e| anyhow::anyhow!("{}: job {}: {e}", job.source, job.id))?;
        let verb = if answer["created"] == true {
            "created"
        } else {
            "updated"
        };
        text.push_str(&format!(
            "{verb} {} (revision {})\n",
            job.id,
            shown(&answer["revision"])
        ));
        answers.push(answer);
    }
    Ok(match format {
        Format::Json => output::json(&Value::Array(answers)),
        Format::Table => text,
    })
}

/// The list's table: one row per job.
fn jobs_table(jobs: &[Value]) -> String {
    let mut table = Table::new(&[
        "ID", "SCHEDULE", "TIMEZONE", "TARGET", "STATE", "REVISION", "UPDATED",
    ]);
    for job in jobs {
        let definition = &job["job"];
        let state = match (job["valid"].as_bool(), definition["paused"].as_bool()) {
            (Some(false), _) => "invalid",
            (_, Some(true)) => "paused",
            _ => "active",
        };
        table.row(vec![
            shown(&job["id"]),
            shown(&definition["schedule"]),
            definition["timezone"].as_str().unwrap_or("UTC").to_string(),
            target_text(&definition["target"]),
            state.to_string(),
            shown(&job["revision"]),
            shown(&job["updated_at"]),
        ]);
    }
    match table.is_empty() {
        true => "no jobs\n".to_string(),
        false => table.render(),
    }
}

/// `nats svc.billing`, `http POST https://…`, `shell ./backup.sh`.
pub fn target_text(target: &Value) -> String {
    let kind = target["type"].as_str().unwrap_or("?");
    let what = match kind {
        "nats" => shown(&target["subject"]),
        "http" => format!(
            "{} {}",
            target["method"].as_str().unwrap_or("POST"),
            shown(&target["url"])
        ),
        "shell" => shown(&target["command"]),
        _ => String::new(),
    };
    format!("{kind} {what}")
}

/// One stored job for people: its facts, then its definition.
fn job_text(job: &Value) -> String {
    let mut text = format!(
        "id:        {}\nrevision:  {}\nupdated:   {}\nvalid:     {}\n",
        shown(&job["id"]),
        shown(&job["revision"]),
        shown(&job["updated_at"]),
        shown(&job["valid"]),
    );
    for problem in job["problems"].as_array().into_iter().flatten() {
        text.push_str(&format!(
            "problem:   {}: {}\n",
            shown(&problem["field"]),
            shown(&problem["message"])
        ));
    }
    text.push_str("definition:\n");
    text.push_str(&output::json(&job["job"]));
    text
}

fn preview_text(answer: &Value) -> String {
    let mut text = String::new();
    if let Some(description) = answer["description"].as_str() {
        text.push_str(description);
        text.push('\n');
    }
    let mut table = Table::new(&["FIRE (UTC)", "WALL TIME", "NOTE"]);
    for fire in answer["fires"].as_array().into_iter().flatten() {
        table.row(vec![
            shown(&fire["at"]),
            shown(&fire["local"]),
            shown(&fire["note"]),
        ]);
    }
    text.push_str(&table.render());
    text
}
