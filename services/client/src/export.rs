//! `jetcron export`: every stored job (of a namespace) as files that
//! `jetcron apply` takes back unchanged.
//!
//! Files are `<dir>/<namespace>/<job>.json` (or `.yaml`), each holding the
//! definition as it was written, without revision or timestamps. Secrets
//! (`target.headers`, `target.env`, `notify.headers` values) are written as
//! `"<redacted>"` unless `--show-secrets`; applying the files back keeps the
//! stored secrets ([`jetcron_core::job::restore_redacted`]). Over NATS the
//! API hands out definitions whole, so redaction is the client's own; over
//! HTTP the gateway redacts unless reads are protected and the token is an
//! editor's. Without `-d`, the jobs go to standard output as one list,
//! which `apply -f -` reads. A stored definition that is not valid cannot
//! be written as a file `apply` takes: the export then fails (exit 1),
//! naming it, since an `apply --prune` of the files would delete it.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use jetcron_core::job::{namespace_of, redact_written, JobName};
use serde_json::Value;

use crate::api::Api;
use crate::commands::jobs::list_all;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FileFormat {
    #[default]
    Json,
    Yaml,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Only this namespace's jobs (`default`: names without a dot).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Write one file per job under this folder (`<namespace>/<job>.json`)
    /// instead of one list to standard output.
    #[arg(long = "dir", short = 'd')]
    pub dir: Option<PathBuf>,
    /// json or yaml.
    #[arg(long, value_enum, default_value_t = FileFormat::Json)]
    pub format: FileFormat,
    /// Write secret values as they are stored (keep such files out of git).
    #[arg(long)]
    pub show_secrets: bool,
}

/// Export; the text for standard output (the jobs, or what was written).
pub async fn export(api: &Api, args: ExportArgs) -> anyhow::Result<String> {
    let listed = list_all(api, args.namespace.as_deref(), &[]).await?;
    let mut jobs = Vec::new();
    let mut skipped = Vec::new();
    for job in listed {
        let id = job["id"].as_str().unwrap_or_default().to_string();
        match (
            job["valid"].as_bool(),
            job.get("job").filter(|j| j.is_object()),
        ) {
            (Some(true), Some(definition)) => {
                let mut definition = definition.clone();
                if !args.show_secrets {
                    redact_written(&mut definition);
                }
                jobs.push((id, definition));
            }
            _ => skipped.push(id),
        }
    }
    let text = match &args.dir {
        Some(dir) => {
            for (id, definition) in &jobs {
                write_job(dir, id, definition, args.format)?;
            }
            format!("exported {} jobs to {}\n", jobs.len(), dir.display())
        }
        None => {
            let all = Value::Array(jobs.into_iter().map(|(_, d)| d).collect());
            encode(&all, args.format)?
        }
    };
    // A job left out of an export would be deleted by `apply --prune` of
    // it: that is an error (the files of the others are written).
    if !skipped.is_empty() {
        let written = match &args.dir {
            Some(_) => text.trim_end().to_string() + "; ",
            None => String::new(),
        };
        anyhow::bail!(
            "{written}{} stored definitions are invalid and were not exported ({}): fix or delete them (jetcron jobs get ID) before applying an export with --prune",
            skipped.len(),
            skipped.join(", ")
        );
    }
    Ok(text)
}

fn write_job(dir: &Path, id: &str, definition: &Value, format: FileFormat) -> anyhow::Result<()> {
    let local = JobName::of(id).local;
    let folder = dir.join(namespace_of(id));
    std::fs::create_dir_all(&folder).with_context(|| format!("create {}", folder.display()))?;
    let extension = match format {
        FileFormat::Json => "json",
        FileFormat::Yaml => "yaml",
    };
    let path = folder.join(format!("{local}.{extension}"));
    std::fs::write(&path, encode(definition, format)?)
        .with_context(|| format!("write {}", path.display()))
}

/// JSON (pretty) or YAML text of `value`, ending in a newline. YAML strings
/// that could read as something else are quoted by the serializer.
fn encode(value: &Value, format: FileFormat) -> anyhow::Result<String> {
    match format {
        FileFormat::Json => {
            let mut text = serde_json::to_string_pretty(value)?;
            text.push('\n');
            Ok(text)
        }
        FileFormat::Yaml => serde_saphyr::to_string(value).context("encode YAML"),
    }
}
