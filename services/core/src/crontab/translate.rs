//! One crontab entry to a jetcron job definition (C.2 of the plan):
//!
//! - `schedule`: the fields as written (`+` added where cron's day rule
//!   needs it) or the macro; `timezone`: `CRON_TZ` when set, else the
//!   caller's default. `TZ` only reaches the command, as under cron.
//! - `target`: `shell`, with the assignments in force as `env` (less
//!   `SHELL MAILTO MAILFROM CRON_TZ LOGNAME`, plus cron's `PATH` when
//!   unset, since the executor would pass its own), `HOME` as
//!   `working_dir`, another `SHELL` running the command, and the stdin
//!   data as a here-document.
//! - `notify`: `MAILTO=addr` names the caller's mail channel. jetcron
//!   alerts on failed runs; cron mails any output, which a note says.
//! - cron runs a command once, however long it takes, and never catches
//!   up a missed minute: the job has one attempt (`retry.max_attempts`
//!   1), the longest timeout (24h) and `misfire: skip`, not jetcron's
//!   defaults (3 attempts, 60s, one catch-up fire).
//!
//! Each definition is checked with `job::parse_job` before it is handed
//! out, so a job that the API would refuse is a [`Refusal`] here. (The
//! API's `parse_written` adds only "no fire after the write", which a
//! five-field line without a year cannot fail once `Schedule::parse` took
//! it; translating needs no clock.)

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::job_id::job_id;
use super::shell_text;
use super::{Entry, Refusal};
use crate::job::MAX_ENV_VARS;
use crate::schedule::parse_timezone;

/// What the caller decides for a whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranslateOptions {
    /// The namespace of the jobs; the default one when `None`.
    pub namespace: Option<String>,
    /// Put before each job's name (`cron-`); may be empty.
    pub prefix: String,
    /// The zone schedules are read in when no `CRON_TZ` is in force (the
    /// host's, decided by the caller).
    pub timezone: String,
    /// The alert channel `MAILTO=addr` entries notify.
    pub mail_channel: Option<String>,
    /// How the file is named in descriptions and the `crontab.file` label.
    pub file_label: String,
}

/// An entry as a job: its id, the definition, and what the reader of the
/// plan should know.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    pub id: String,
    pub spec_json: Value,
    pub notes: Vec<String>,
}

/// Variables cron reads itself rather than passing on as the job's.
const CRON_ONLY_VARS: [&str; 5] = ["SHELL", "MAILTO", "MAILFROM", "CRON_TZ", "LOGNAME"];
/// cron's `PATH` when the crontab sets none.
const CRON_PATH: &str = "/usr/bin:/bin";
/// Longest description, in bytes.
const MAX_DESCRIPTION: usize = 4096;
/// Longest label value, in bytes.
const MAX_LABEL_VALUE: usize = 255;

/// `entry` as a job definition, or why it cannot be one.
pub fn translate(entry: &Entry, options: &TranslateOptions) -> Result<Translated, Refusal> {
    let refuse = |reason: String| Refusal {
        line: entry.line,
        reason,
    };
    let vars: BTreeMap<&str, &str> = entry
        .env
        .iter()
        .map(|var| (var.name.as_str(), var.value.as_str()))
        .collect();
    let mut notes = Vec::new();
    let timezone = schedule_zone(&vars, options).map_err(refuse)?;
    if let Some(tz) = vars.get("TZ").filter(|tz| **tz != timezone) {
        notes.push(format!("TZ={tz} only reaches the command; the schedule is read in {timezone}, as cron reads it in its own zone"));
    }
    let mut target = json!({
        "type": "shell",
        "command": shell_command(entry, &vars).map_err(refuse)?,
        "env": job_env(entry, &vars).map_err(refuse)?,
    });
    if let Some(home) = vars.get("HOME") {
        if !home.starts_with('/') {
            return Err(refuse(format!(
                "HOME={home:?} is not an absolute path (cron runs the command in HOME)"
            )));
        }
        target["working_dir"] = json!(home);
    }
    let id = job_id(entry, options.namespace.as_deref(), &options.prefix);
    let mut spec = json!({
        "id": id,
        "description": description(entry, &options.file_label),
        "schedule": entry.timing.schedule_line(),
        "timezone": timezone,
        "target": target,
        "misfire": "skip",
        "retry": {"max_attempts": 1},
        "timeout": "24h",
        "labels": labels(entry, &options.file_label),
    });
    if let Some(notify) = notify(entry, &vars, options, &mut notes) {
        spec["notify"] = notify;
    }
    check(&spec).map_err(refuse)?;
    Ok(Translated {
        id,
        spec_json: spec,
        notes,
    })
}

/// The zone of the schedule: `CRON_TZ`, else the caller's default.
fn schedule_zone(
    vars: &BTreeMap<&str, &str>,
    options: &TranslateOptions,
) -> Result<String, String> {
    match vars.get("CRON_TZ") {
        Some(zone) => parse_timezone(zone)
            .map(|_| zone.to_string())
            .map_err(|e| format!("CRON_TZ={zone}: {e}")),
        None => parse_timezone(&options.timezone)
            .map(|_| options.timezone.clone())
            .map_err(|e| format!("the default time zone: {e}")),
    }
}

/// The command as `/bin/sh -c` runs it: by another shell when `SHELL`
/// says so, fed its stdin data.
fn shell_command(entry: &Entry, vars: &BTreeMap<&str, &str>) -> Result<String, String> {
    let command = match vars.get("SHELL") {
        None | Some(&"/bin/sh") => entry.command.clone(),
        Some(&"") => return Err("SHELL is empty: cron cannot run the command".into()),
        Some(shell) => shell_text::run_by(shell, &entry.command),
    };
    Ok(match &entry.stdin {
        Some(data) => shell_text::with_stdin(&command, data),
        None => command,
    })
}

/// The job's environment: the assignments in force, less cron's own.
fn job_env(entry: &Entry, vars: &BTreeMap<&str, &str>) -> Result<BTreeMap<String, String>, String> {
    let mut env = BTreeMap::new();
    for var in &entry.env {
        if CRON_ONLY_VARS.contains(&var.name.as_str()) {
            continue;
        }
        let first_ok = var
            .name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let rest_ok = var
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !first_ok || !rest_ok {
            return Err(format!(
                "line {} sets {:?}, which a job cannot set: names are [A-Za-z_][A-Za-z0-9_]*",
                var.line, var.name
            ));
        }
        if var.name.to_ascii_uppercase().starts_with("JETCRON_") {
            return Err(format!(
                "line {} sets {}: JETCRON_* variables are the executor's run context",
                var.line, var.name
            ));
        }
        env.insert(var.name.clone(), var.value.clone());
    }
    if !vars.contains_key("PATH") {
        env.insert("PATH".to_string(), CRON_PATH.to_string());
    }
    if env.len() > MAX_ENV_VARS {
        return Err(format!(
            "{} environment variables are in force; a job takes at most {MAX_ENV_VARS}",
            env.len()
        ));
    }
    Ok(env)
}

/// `notify` for `MAILTO`, and the notes on mail.
fn notify(
    entry: &Entry,
    vars: &BTreeMap<&str, &str>,
    options: &TranslateOptions,
    notes: &mut Vec<String>,
) -> Option<Value> {
    const ALERTS: &str =
        "jetcron alerts on failed runs, not on output: cron mails any output, success included";
    match (vars.get("MAILTO"), &options.mail_channel) {
        (Some(&""), _) => None,
        (Some(to), Some(channel)) => {
            notes.push(format!(
                "MAILTO={to}: alerts go to channel {channel:?}; {ALERTS}"
            ));
            Some(json!({"channels": [channel]}))
        }
        (Some(to), None) => {
            notes.push(format!(
                "MAILTO={to}: no mail channel given, so the job has no alerts; {ALERTS}"
            ));
            None
        }
        (None, _) => {
            let owner = match &entry.user {
                Some(user) => format!("user {user:?}"),
                None => "the crontab's owner".to_string(),
            };
            notes.push(format!(
                "MAILTO is unset: cron mails output to {owner}; the job has no alerts"
            ));
            None
        }
    }
}

/// The comment lines above the entry and where it came from, at most
/// [`MAX_DESCRIPTION`] bytes (the comments are cut first).
fn description(entry: &Entry, file_label: &str) -> String {
    let source = format!("imported from {file_label}:{}", entry.line);
    let room = MAX_DESCRIPTION.saturating_sub(source.len() + 1);
    let comments = entry.comments.join("\n");
    match cut(&comments, room) {
        "" => cut(&source, MAX_DESCRIPTION).to_string(),
        comments => format!("{comments}\n{source}"),
    }
}

/// Labels: the file, the line and (system crontabs) the user.
fn labels(entry: &Entry, file_label: &str) -> BTreeMap<&'static str, String> {
    let mut labels = BTreeMap::from([
        ("crontab.file", label_value(file_label)),
        ("crontab.line", entry.line.to_string()),
    ]);
    if let Some(user) = &entry.user {
        labels.insert("crontab.user", label_value(user));
    }
    labels
}

/// A label value: control characters as `?`, at most 255 bytes.
fn label_value(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    cut(&clean, MAX_LABEL_VALUE).to_string()
}

/// The longest start of `text` of at most `max` bytes, on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The definition as the API would take it, or its problems.
fn check(spec: &Value) -> Result<(), String> {
    let bytes = serde_json::to_vec(spec).map_err(|e| format!("internal: {e}"))?;
    crate::job::parse_job(&bytes, None)
        .map(drop)
        .map_err(|problems| {
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            format!("the job would be refused: {}", problems.join("; "))
        })
}
