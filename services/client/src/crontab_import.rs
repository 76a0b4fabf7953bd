//! `jetcron import-crontab`: a crontab brought over as jobs with shell
//! targets, through the same plan and writes as `apply`.
//!
//! The file is read as Debian's cron reads it ([`jetcron_core::crontab`]);
//! each line it refuses (`@reboot`, `fri-mon`, a line that never fires, …)
//! is printed with its line number and reason, and the rest is imported.
//! Ids come from each line's user, schedule and command, so importing the
//! same file again plans nothing, and `--prune` deletes only the jobs this
//! crontab made (label `crontab.file`: `--source`, by default this host and
//! the file's absolute path) whose lines are gone.
//!
//! Schedules are read in `--timezone`, else in the host's zone (what cron
//! did on this host), else UTC; a `CRON_TZ` line overrides it for the lines
//! after it. `MAILTO=address` alerts `--mail-channel`, or else the one email
//! channel whose recipients include the address; with neither, the job has
//! no alerts and the plan says so.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use jetcron_core::crontab::{self, CrontabKind, Entry, TranslateOptions, Translated};
use serde_json::json;

use crate::api::{Api, Endpoint};
use crate::apply::{execute, plan_against_store, Report};
use crate::manifest::{FileJob, Source};
use crate::output::Format;
use crate::plan::Prune;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The crontab: a user's (`crontab -l > FILE`), `/etc/crontab` or a
    /// file of `/etc/cron.d`.
    pub file: PathBuf,
    /// Lines name a user before the command (as in `/etc/crontab` and
    /// `/etc/cron.d`); the default for files there.
    #[arg(long)]
    pub system: bool,
    /// The namespace of the jobs (default: the default namespace).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Put before each job's name.
    #[arg(long, default_value = "cron-")]
    pub prefix: String,
    /// The zone the schedules are read in (default: this host's).
    #[arg(long)]
    pub timezone: Option<String>,
    /// The alert channel of lines under `MAILTO=address`.
    #[arg(long)]
    pub mail_channel: Option<String>,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also delete the jobs an earlier import of this crontab made whose
    /// lines are gone (those whose label `crontab.file` is this source).
    #[arg(long)]
    pub prune: bool,
    /// What to call this crontab in labels and descriptions, so --prune
    /// knows its jobs (default: `<host>:<absolute path>`). Give each crontab
    /// its own when several pass through one path (`crontab -l -u alice >
    /// /tmp/crontab`): `--source alice@web1`.
    #[arg(long)]
    pub source: Option<String>,
}

/// Import; what to print and the outcome (as `apply`'s).
pub async fn import(api: &Api, args: ImportArgs, format: Format) -> anyhow::Result<Report> {
    let bytes =
        std::fs::read(&args.file).with_context(|| format!("read {}", args.file.display()))?;
    let label = args
        .source
        .clone()
        .unwrap_or_else(|| default_source(&args.file));
    refuse_unread_cron_d_file(&args.file)?;
    let kind = match args.system || is_system_path(&args.file) {
        true => CrontabKind::System,
        false => CrontabKind::User,
    };
    let mut lines = String::new();
    // cron reads bytes; a comment in Latin-1 should not stop an import.
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let _ = writeln!(
                lines,
                "warning {label}: not UTF-8; bytes that are not were read as U+FFFD"
            );
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        }
    };
    let parsed = crontab::parse(&text, kind);
    let timezone = args.timezone.clone().unwrap_or_else(host_timezone);
    let channels = mail_channels(api, &parsed.entries, args.mail_channel.is_none()).await?;
    let mut refusals = parsed.refusals.clone();
    let mut jobs: Vec<Translated> = Vec::new();
    let mut job_lines = Vec::new();
    for entry in &parsed.entries {
        let options = TranslateOptions {
            namespace: args.namespace.clone(),
            prefix: args.prefix.clone(),
            timezone: timezone.clone(),
            mail_channel: args
                .mail_channel
                .clone()
                .or_else(|| channel_for(entry, &channels)),
            file_label: label.clone(),
        };
        match crontab::translate(entry, &options) {
            Ok(job) => {
                jobs.push(job);
                job_lines.push(entry.line);
            }
            Err(refusal) => refusals.push(refusal),
        }
    }
    crontab::number_repeated_ids(&mut jobs);
    for refusal in &refusals {
        let _ = writeln!(
            lines,
            "refused {label}:{}: {}",
            refusal.line, refusal.reason
        );
    }
    for warning in &parsed.warnings {
        let _ = writeln!(
            lines,
            "warning {label}:{}: {}",
            warning.line, warning.message
        );
    }
    let files: Vec<FileJob> = jobs
        .iter()
        .zip(&job_lines)
        .map(|(job, line)| FileJob {
            id: job.id.clone(),
            source: Source {
                file: format!("{label}:{line}"),
                index: None,
            },
            definition: job.spec_json.clone(),
        })
        .collect();
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let prune = args.prune.then(|| Prune {
        namespaces: BTreeSet::from([namespace]),
        label: Some(("crontab.file".to_string(), label.clone())),
    });
    let mut plan = plan_against_store(api, &files, prune).await?;
    // The translation's notes (time zones, mail, users) beside each job.
    for step in &mut plan.steps {
        if let Some(job) = jobs.iter().find(|j| j.id == step.id) {
            step.notes.extend(job.notes.iter().cloned());
        }
    }
    if files.is_empty() && !lines.is_empty() {
        anyhow::bail!("{lines}nothing in {label} can be imported");
    }
    let report = execute(api, &plan, args.dry_run, format).await?;
    let _ = writeln!(
        lines,
        "schedules read in {timezone} unless CRON_TZ says otherwise"
    );
    let warnings: Vec<_> = parsed
        .warnings
        .iter()
        .map(|w| json!({"line": w.line, "message": w.message}))
        .collect();
    let refused: Vec<_> = refusals
        .iter()
        .map(|r| json!({"line": r.line, "reason": r.reason}))
        .collect();
    let said = json!({"refused": refused, "warnings": warnings, "timezone": timezone});
    with_what_the_import_said(report, format, &lines, said)
}

/// `report` with the refusals, warnings and zone before the plan (a table)
/// or beside it (`-o json`: `refused`, `warnings`, `timezone`).
fn with_what_the_import_said(
    mut report: Report,
    format: Format,
    lines: &str,
    said: serde_json::Value,
) -> anyhow::Result<Report> {
    match format {
        Format::Table => report.text = format!("{lines}{}", report.text),
        Format::Json => {
            let mut answer: serde_json::Value =
                serde_json::from_str(&report.text).context("the plan as JSON")?;
            for key in ["refused", "warnings", "timezone"] {
                answer[key] = said[key].clone();
            }
            report.text = crate::output::json(&answer);
        }
    }
    Ok(report)
}

/// The crontab's default name in labels and descriptions: this host and
/// the file's absolute path, so an import from another folder is the same
/// crontab and another host's `/etc/crontab` is not.
fn default_source(path: &Path) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let path = std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string();
    match host.is_empty() {
        true => path,
        false => format!("{host}:{path}"),
    }
}

/// cron skips files of `/etc/cron.d` whose names are not all letters,
/// digits, `_` and `-` (`x.dpkg-old`, `backup~`): importing one would start
/// jobs cron never ran.
fn refuse_unread_cron_d_file(path: &Path) -> anyhow::Result<()> {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    match cron_skips(&path) {
        true => anyhow::bail!(
            "cron does not read {} (a name in /etc/cron.d must be letters, digits, _ and - only): its lines never ran, nothing is imported",
            path.display()
        ),
        false => Ok(()),
    }
}

/// Whether `path` (absolute) is a file of `/etc/cron.d` cron does not read.
fn cron_skips(path: &Path) -> bool {
    path.parent() == Some(Path::new("/etc/cron.d"))
        && path
            .file_name()
            .is_some_and(|name| !crontab::cron_reads_cron_d_file(&name.to_string_lossy()))
}

fn is_system_path(path: &Path) -> bool {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    path == Path::new("/etc/crontab") || path.parent() == Some(Path::new("/etc/cron.d"))
}

/// This host's zone: `/etc/timezone`, else the zone `/etc/localtime` links
/// to, else UTC.
fn host_timezone() -> String {
    let named = std::fs::read_to_string("/etc/timezone")
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let linked = || {
        let target = std::fs::read_link("/etc/localtime").ok()?;
        let text = target.to_string_lossy().into_owned();
        text.split_once("zoneinfo/")
            .map(|(_, zone)| zone.to_string())
    };
    named.or_else(linked).unwrap_or_else(|| "UTC".to_string())
}

/// The email channels (name, recipients) of `channels.list` (each entry
/// holds its definition as `channel`), read when some line has a
/// `MAILTO` address and no channel was given.
async fn mail_channels(
    api: &Api,
    entries: &[Entry],
    needed: bool,
) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    if !needed || entries.iter().all(|e| mailto(e).is_none()) {
        return Ok(Vec::new());
    }
    let answer = api.call(Endpoint::ChannelsList, json!({})).await?;
    Ok(answer["channels"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|stored| &stored["channel"])
        .filter(|c| c["type"] == "email")
        .filter_map(|c| {
            let to: Vec<String> = c["to"]
                .as_array()?
                .iter()
                .filter_map(|a| a.as_str().map(str::to_lowercase))
                .collect();
            Some((c["name"].as_str()?.to_string(), to))
        })
        .collect())
}

/// The entry's `MAILTO` addresses, if it has any.
fn mailto(entry: &Entry) -> Option<Vec<String>> {
    let value = entry.env.iter().rev().find(|v| v.name == "MAILTO")?;
    let addresses: Vec<String> = value
        .value
        .split(',')
        .map(|a| a.trim().to_lowercase())
        .filter(|a| !a.is_empty())
        .collect();
    (!addresses.is_empty()).then_some(addresses)
}

/// The one email channel that mails every `MAILTO` address of `entry`.
fn channel_for(entry: &Entry, channels: &[(String, Vec<String>)]) -> Option<String> {
    let addresses = mailto(entry)?;
    let mut matching = channels
        .iter()
        .filter(|(_, to)| addresses.iter().all(|a| to.contains(a)));
    match (matching.next(), matching.next()) {
        (Some((name, _)), None) => Some(name.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetcron_core::crontab::{parse, CrontabKind};

    #[test]
    fn mailto_picks_the_one_email_channel_with_every_address() {
        let parsed = parse(
            "MAILTO=Ops@Example.com\n0 1 * * * a\nMAILTO=ops@example.com,cto@example.com\n0 2 * * * b\nMAILTO=\"\"\n0 3 * * * c\n",
            CrontabKind::User,
        );
        let channels = vec![
            ("ops-mail".to_string(), vec!["ops@example.com".to_string()]),
            (
                "all-mail".to_string(),
                vec!["ops@example.com".to_string(), "cto@example.com".to_string()],
            ),
        ];
        let picked: Vec<Option<String>> = parsed
            .entries
            .iter()
            .map(|e| channel_for(e, &channels))
            .collect();
        // Two channels mail ops@: no guess; one mails both: that one; "" mails nobody.
        assert_eq!(picked, [None, Some("all-mail".to_string()), None]);
        let one = vec![channels[0].clone()];
        assert_eq!(
            channel_for(&parsed.entries[0], &one),
            Some("ops-mail".to_string())
        );
    }

    #[test]
    fn files_cron_skips_in_etc_cron_d_are_not_imported() {
        assert!(cron_skips(Path::new("/etc/cron.d/x.dpkg-old")));
        assert!(cron_skips(Path::new("/etc/cron.d/backup~")));
        assert!(!cron_skips(Path::new("/etc/cron.d/e2scrub_all")));
        assert!(!cron_skips(Path::new("/tmp/x.dpkg-old")));
    }

    #[test]
    fn files_of_etc_cron_d_are_system_crontabs() {
        assert!(is_system_path(Path::new("/etc/crontab")));
        assert!(is_system_path(Path::new("/etc/cron.d/e2scrub_all")));
        assert!(!is_system_path(Path::new("/tmp/crontab")));
        let zone = host_timezone();
        assert!(
            jetcron_core::schedule::parse_timezone(&zone).is_ok(),
            "{zone}"
        );
    }
}
