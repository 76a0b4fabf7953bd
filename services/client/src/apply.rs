//! `jetcron apply` and `jetcron diff`: job files made true in the store,
//! or shown against it.
//!
//! Every write carries the revision the plan was made from
//! (`expected_revision`; 0 for a create), so a job edited by someone else
//! between plan and write is a conflict that names both revisions, never a
//! silent overwrite. Writes go one at a time in the plan's order and stop at
//! the first refusal, saying what was done before it; running `apply` again
//! plans what is left.
//!
//! Exit codes for pipelines ([`crate::Outcome`]): 0 nothing to do, 2 changes
//! applied or planned, 1 an error.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use jetcron_core::job::{namespace_of, validate_namespace};
use serde_json::{json, Value};

use crate::api::{Api, CallError, Endpoint};
use crate::commands::jobs::list_all;
use crate::manifest::{self, FileJob};
use crate::output::{self, Format};
use crate::plan::{self, Action, Plan, Prune, StoredJob};
use crate::Outcome;
use jetcron_core::api::ErrorCode;

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Job files or folders (JSON or YAML); `-` reads standard input.
    #[arg(short = 'f', long = "file", required = true)]
    pub files: Vec<PathBuf>,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also delete the stored jobs the files do not name, in the namespaces
    /// the files' jobs are in (or in --namespace).
    #[arg(long)]
    pub prune: bool,
    /// The namespaces --prune may delete in (repeat for several); needed
    /// when the files name no job at all.
    #[arg(long = "namespace")]
    pub namespaces: Vec<String>,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Job files or folders (JSON or YAML); `-` reads standard input.
    #[arg(short = 'f', long = "file", required = true)]
    pub files: Vec<PathBuf>,
    /// Also show the stored jobs the files do not name as deletes (as
    /// `apply --prune` would), in these namespaces or the files' ones.
    #[arg(long)]
    pub prune: bool,
    #[arg(long = "namespace")]
    pub namespaces: Vec<String>,
}

/// What a finished command prints, and its outcome.
pub struct Report {
    pub text: String,
    pub outcome: Outcome,
}

/// `jetcron diff`.
pub async fn diff(api: &Api, args: DiffArgs, format: Format) -> anyhow::Result<Report> {
    let plan = plan_files(api, &args.files, args.prune, &args.namespaces).await?;
    Ok(Report {
        text: match format {
            Format::Json => output::json(&plan.to_json()),
            Format::Table => plan.render(),
        },
        outcome: outcome_of(&plan),
    })
}

/// `jetcron apply`.
pub async fn apply(api: &Api, args: ApplyArgs, format: Format) -> anyhow::Result<Report> {
    let plan = plan_files(api, &args.files, args.prune, &args.namespaces).await?;
    execute(api, &plan, args.dry_run, format).await
}

/// The plan of the job files at `paths` against the store.
async fn plan_files(
    api: &Api,
    paths: &[PathBuf],
    prune: bool,
    namespaces: &[String],
) -> anyhow::Result<Plan> {
    let files = manifest::read(paths)?;
    let prune = prune_scope(&files, prune, namespaces)?;
    plan_against_store(api, &files, prune).await
}

/// Carry `plan` out (or only show it), and report.
pub async fn execute(
    api: &Api,
    plan: &Plan,
    dry_run: bool,
    format: Format,
) -> anyhow::Result<Report> {
    let outcome = outcome_of(plan);
    if dry_run || outcome == Outcome::NothingToDo {
        let mut text = match format {
            Format::Json => output::json(&json!({"applied": false, "plan": plan.to_json()})),
            Format::Table => plan.render(),
        };
        if format == Format::Table {
            text.push_str(match (dry_run, outcome) {
                (_, Outcome::NothingToDo) => "no changes: the store matches the files\n",
                _ => "dry run: nothing was changed\n",
            });
        }
        return Ok(Report { text, outcome });
    }
    let mut done = String::new();
    for step in &plan.steps {
        match write(api, step).await {
            Ok(Some(line)) => done.push_str(&line),
            Ok(None) => {}
            Err(e) => {
                let mut message = String::new();
                if !done.is_empty() {
                    let _ = write!(message, "{done}");
                }
                let _ = write!(message, "stopped at {}: {e}\nthe steps after it were not tried; run apply again to plan what is left", step.id);
                anyhow::bail!(message);
            }
        }
    }
    let text = match format {
        Format::Json => output::json(&json!({"applied": true, "plan": plan.to_json()})),
        Format::Table => {
            let (c, u, d, _) = plan.counts();
            format!(
                "{}{done}applied: {c} created, {u} updated, {d} deleted\n",
                plan.render()
            )
        }
    };
    Ok(Report { text, outcome })
}

/// One step's write; the line saying what was done.
async fn write(api: &Api, step: &plan::Step) -> anyhow::Result<Option<String>> {
    let put = |revision: u64| {
        let mut body = step.definition.clone().unwrap_or(Value::Null);
        body["expected_revision"] = json!(revision);
        body
    };
    let (result, planned, verb) = match &step.action {
        Action::Unchanged { .. } => return Ok(None),
        Action::Create => (api.call(Endpoint::JobsPut, put(0)).await, 0, "created"),
        Action::Update { revision, .. } => (
            api.call(Endpoint::JobsPut, put(*revision)).await,
            *revision,
            "updated",
        ),
        Action::Delete { revision } => {
            let body = json!({"id": step.id, "expected_revision": revision});
            (
                api.call(Endpoint::JobsDelete, body).await,
                *revision,
                "deleted",
            )
        }
    };
    match result {
        Ok(answer) => Ok(Some(match answer["revision"].as_u64() {
            Some(revision) if verb != "deleted" => {
                format!("{verb} {} (revision {revision})\n", step.id)
            }
            _ => format!("{verb} {}\n", step.id),
        })),
        Err(e) if is_conflict(&e) => Err(conflict(api, &step.id, planned, e).await),
        Err(e) => Err(anyhow::anyhow!("{e}")),
    }
}

/// Whether the API refused a compare-and-swap (not, say, `limit_exceeded`,
/// also a 409).
fn is_conflict(e: &CallError) -> bool {
    matches!(e, CallError::Refused(r) if r.error.code == ErrorCode::Conflict)
}

/// A compare-and-swap refusal, with the revision the job is at now.
async fn conflict(api: &Api, id: &str, planned: u64, e: CallError) -> anyhow::Error {
    let now = match api.call(Endpoint::JobsGet, json!({"id": id})).await {
        Ok(answer) => match answer["job"]["revision"].as_u64() {
            Some(revision) => format!("now at revision {revision}"),
            None => "now unreadable".to_string(),
        },
        Err(CallError::Refused(r)) if r.status == 404 => "now deleted".to_string(),
        Err(_) => "now: could not read it".to_string(),
    };
    let read = match planned {
        0 => "the plan found no such job".to_string(),
        revision => format!("the plan read it at revision {revision}"),
    };
    anyhow::anyhow!("job {id} changed since the plan ({read}; {now}): {e}")
}

fn outcome_of(plan: &Plan) -> Outcome {
    match plan.has_changes() {
        true => Outcome::Changes,
        false => Outcome::NothingToDo,
    }
}

/// Which stored jobs `--prune` may delete: those of the namespaces the
/// files touch, or of `namespaces` when given (which must then hold every
/// namespace of the files). Without jobs in the files, `namespaces` is
/// required: an empty folder must not mean "delete everything".
pub fn prune_scope(
    files: &[FileJob],
    prune: bool,
    namespaces: &[String],
) -> anyhow::Result<Option<Prune>> {
    for namespace in namespaces {
        validate_namespace("namespace", namespace)
            .map_err(|p| anyhow::anyhow!("--namespace {p}"))?;
    }
    let touched: BTreeSet<String> = files
        .iter()
        .map(|f| namespace_of(&f.id).to_string())
        .collect();
    let namespaces = match (prune, namespaces.is_empty()) {
        (false, _) => return Ok(None),
        (true, false) => {
            if let Some(outside) = touched.iter().find(|ns| !namespaces.contains(ns)) {
                anyhow::bail!(
                    "the files hold jobs of namespace {outside:?}, which --namespace does not name: prune within the files' namespaces, or name them all"
                );
            }
            namespaces.iter().cloned().collect()
        }
        (true, true) if touched.is_empty() => anyhow::bail!(
            "--prune with no jobs in the files would delete every job: name the namespaces to empty with --namespace"
        ),
        (true, true) => touched,
    };
    Ok(Some(Prune {
        namespaces,
        label: None,
    }))
}

/// The plan of `files` against the store. The jobs read are those of the
/// namespaces the files touch and those `prune` covers, so a team's user
/// plans within what it may see.
pub async fn plan_against_store(
    api: &Api,
    files: &[FileJob],
    prune: Option<Prune>,
) -> anyhow::Result<Plan> {
    let mut read: BTreeSet<String> = files
        .iter()
        .map(|f| namespace_of(&f.id).to_string())
        .collect();
    if let Some(prune) = &prune {
        read.extend(prune.namespaces.iter().cloned());
    }
    let mut stored = Vec::new();
    for namespace in &read {
        let listed = list_all(api, Some(namespace), &[]).await?;
        stored.extend(listed.iter().filter_map(StoredJob::from_listed));
    }
    Ok(plan::plan(files, &stored, prune.as_ref())?)
}
