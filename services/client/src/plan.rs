//! Files against what is stored: which jobs to create, update (and which
//! fields change), leave alone or delete.
//!
//! Definitions are compared as the gateway reads them ([`JobSpec`] after
//! parsing), so formatting, key order and JSON against YAML are no change;
//! a field written out with its default value is (the stored bytes differ),
//! once. Secrets are never shown: a changed value of `target.headers`,
//! `target.env` or `notify.headers` reads `(changed)`, and a file's
//! `"<redacted>"` (an export's placeholder) means "keep what is stored".
//!
//! `paused` belongs to whoever paused the job during an incident more than
//! to the file: a file that does not say `paused` keeps a stored pause (with
//! a note); one that says `paused: false` resumes it.
//!
//! Steps are ordered to be written one by one so that no write closes a
//! chain cycle on the way ([`write_order`]); deletes go last.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use jetcron_core::job::{is_secret_field, namespace_of, parse_job, restore_redacted, REDACTED};
use serde_json::{json, Value};

use crate::manifest::{FileJob, Source};

/// A stored job as `jobs.list` shows it.
#[derive(Debug, Clone)]
pub struct StoredJob {
    pub id: String,
    pub revision: u64,
    /// The definition as written; `None` when it could not be read.
    pub definition: Option<Value>,
}

impl StoredJob {
    /// From one entry of a `jobs.list` answer.
    pub fn from_listed(listed: &Value) -> Option<Self> {
        Some(Self {
            id: listed["id"].as_str()?.to_string(),
            revision: listed["revision"].as_u64().unwrap_or(0),
            definition: listed.get("job").filter(|j| j.is_object()).cloned(),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Create,
    /// The stored job, at `revision`, differs in `fields`.
    Update {
        revision: u64,
        fields: Vec<FieldChange>,
    },
    Unchanged {
        revision: u64,
    },
    Delete {
        revision: u64,
    },
}

/// One field's change, secrets without their values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldChange {
    /// Dotted as in the API's errors: `target.url`, `after[0].job`.
    pub field: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Step {
    pub id: String,
    pub action: Action,
    /// What to write (creates and updates).
    pub definition: Option<Value>,
    pub source: Option<Source>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub steps: Vec<Step>,
}

/// Which stored jobs that no file names are deleted.
#[derive(Debug, Clone, Default)]
pub struct Prune {
    /// Delete in these namespaces only (`default`: names without a dot).
    pub namespaces: BTreeSet<String>,
    /// And only jobs with this label (`crontab.file` of an import).
    pub label: Option<(String, String)>,
}

impl Prune {
    /// Whether `job` is one this prune may delete.
    fn covers(&self, job: &StoredJob) -> bool {
        self.namespaces.contains(namespace_of(&job.id))
            && self.label.as_ref().is_none_or(|(key, value)| {
                job.definition
                    .as_ref()
                    .is_some_and(|d| d["labels"][key].as_str() == Some(value))
            })
    }
}

/// Why there can be no plan.
#[derive(Debug)]
pub struct PlanError(pub Vec<String>);

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl std::error::Error for PlanError {}

/// The plan that makes `stored` match `files` (and, with `prune`, deletes
/// what the files do not name in its namespaces).
pub fn plan(
    files: &[FileJob],
    stored: &[StoredJob],
    prune: Option<&Prune>,
) -> Result<Plan, PlanError> {
    let by_id: BTreeMap<&str, &StoredJob> = stored.iter().map(|s| (s.id.as_str(), s)).collect();
    let mut errors = Vec::new();
    let mut steps = Vec::new();
    for file in files {
        match step_for(file, by_id.get(file.id.as_str()).copied()) {
            Ok(step) => steps.push(step),
            Err(e) => errors.push(format!("{}: job {}: {e}", file.source, file.id)),
        }
    }
    if let Some(prune) = prune {
        let named: BTreeSet<&str> = files.iter().map(|f| f.id.as_str()).collect();
        for job in stored {
            if !named.contains(job.id.as_str()) && prune.covers(job) {
                steps.push(Step {
                    id: job.id.clone(),
                    action: Action::Delete {
                        revision: job.revision,
                    },
                    definition: None,
                    source: None,
                    notes: Vec::new(),
                });
            }
        }
    }
    if !errors.is_empty() {
        return Err(PlanError(errors));
    }
    Ok(Plan {
        steps: write_order::ordered(steps, stored),
    })
}

fn step_for(file: &FileJob, stored: Option<&StoredJob>) -> Result<Step, String> {
    let mut desired = file.definition.clone();
    let mut notes = Vec::new();
    let step = |action, definition, notes| Step {
        id: file.id.clone(),
        action,
        definition,
        source: Some(file.source.clone()),
        notes,
    };
    let Some(stored) = stored else {
        if restore_redacted(&mut desired.clone(), None).is_err() {
            return Err(format!(
                "holds \"{REDACTED}\" and there is no stored job to take the secret from: give the real value"
            ));
        }
        return Ok(step(Action::Create, Some(desired), notes));
    };
    let Some(stored_definition) = &stored.definition else {
        notes.push("the stored value is not a definition: it is replaced".into());
        return Ok(step(
            replaced(stored.revision, "(unreadable)"),
            Some(desired),
            notes,
        ));
    };
    if desired.get("paused").is_none() && stored_definition["paused"] == true {
        desired["paused"] = json!(true);
        notes.push("stays paused (paused in the store; the file does not say paused)".into());
    }
    // What the file's placeholders stand for, to compare; the file's own
    // text (placeholders and all) is what is sent, and the gateway puts
    // the same secrets back.
    let mut compared = desired.clone();
    restore_redacted(&mut compared, Some(stored_definition)).map_err(|problems| {
        problems
            .iter()
            .map(|p| format!("{}: {}", p.field, p.message))
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    let before = canonical(stored_definition);
    let after = canonical(&compared);
    let Some(before) = before else {
        notes.push("the stored definition is invalid: it is replaced".into());
        return Ok(step(
            replaced(stored.revision, "(invalid)"),
            Some(desired),
            notes,
        ));
    };
    let after = after.ok_or("the file's job does not parse")?;
    let fields = field_changes(&before, &after);
    let action = match fields.is_empty() {
        true => Action::Unchanged {
            revision: stored.revision,
        },
        false => Action::Update {
            revision: stored.revision,
            fields,
        },
    };
    Ok(step(action, Some(desired), notes))
}

/// An update that replaces a stored value that is no valid definition
/// (`was` says which) with the file's job.
fn replaced(revision: u64, was: &str) -> Action {
    Action::Update {
        revision,
        fields: vec![FieldChange {
            field: "(all)".into(),
            before: Some(was.into()),
            after: Some("(the file's job)".into()),
        }],
    }
}

/// A definition as the gateway reads it, re-encoded; `None` if it does not parse.
fn canonical(definition: &Value) -> Option<Value> {
    let bytes = serde_json::to_vec(definition).ok()?;
    let job = parse_job(&bytes, None).ok()?;
    serde_json::to_value(job.spec).ok()
}

/// The fields whose values differ, in field order; secret maps' values hidden.
pub fn field_changes(before: &Value, after: &Value) -> Vec<FieldChange> {
    let (mut old, mut new) = (BTreeMap::new(), BTreeMap::new());
    flatten("", before, &mut old);
    flatten("", after, &mut new);
    let fields: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    fields
        .into_iter()
        .filter(|f| old.get(*f) != new.get(*f))
        .map(|field| {
            let secret = is_secret_field(field);
            let show = |v: Option<&Value>, mark: &str| {
                v.map(|v| match secret {
                    true => mark.to_string(),
                    false => v.to_string(),
                })
            };
            FieldChange {
                field: field.clone(),
                before: show(old.get(field), "(secret)"),
                after: show(new.get(field), "(changed)"),
            }
        })
        .collect()
}

fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(fields) if !fields.is_empty() => {
            for (key, v) in fields {
                let path = match prefix.is_empty() {
                    true => key.clone(),
                    false => format!("{prefix}.{key}"),
                };
                flatten(&path, v, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, v) in items.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), v, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.clone());
        }
    }
}

impl Plan {
    /// Whether anything would be written.
    pub fn has_changes(&self) -> bool {
        self.steps
            .iter()
            .any(|s| !matches!(s.action, Action::Unchanged { .. }))
    }

    /// `(create, update, delete, unchanged)`.
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let mut counts = (0, 0, 0, 0);
        for step in &self.steps {
            match step.action {
                Action::Create => counts.0 += 1,
                Action::Update { .. } => counts.1 += 1,
                Action::Delete { .. } => counts.2 += 1,
                Action::Unchanged { .. } => counts.3 += 1,
            }
        }
        counts
    }

    /// The plan for people: one line per change and one per changed field.
    pub fn render(&self) -> String {
        let mut text = String::new();
        for step in &self.steps {
            let from = step
                .source
                .as_ref()
                .map(|s| format!(" ({s})"))
                .unwrap_or_default();
            let _ = match &step.action {
                Action::Create => writeln!(text, "+ create {}{from}", step.id),
                Action::Update { revision, fields } => {
                    let _ = writeln!(text, "~ update {} (revision {revision}){from}", step.id);
                    for f in fields {
                        let _ = match (&f.before, &f.after) {
                            (Some(b), Some(a)) => writeln!(text, "    {}: {b} -> {a}", f.field),
                            (None, Some(a)) => writeln!(text, "    + {}: {a}", f.field),
                            (Some(b), None) => writeln!(text, "    - {}: {b}", f.field),
                            (None, None) => Ok(()),
                        };
                    }
                    Ok(())
                }
                Action::Delete { revision } => {
                    writeln!(text, "- delete {} (revision {revision})", step.id)
                }
                Action::Unchanged { .. } => Ok(()),
            };
            for note in &step.notes {
                let _ = writeln!(text, "    note: {} {note}", step.id);
            }
        }
        let (create, update, delete, unchanged) = self.counts();
        let _ = writeln!(
            text,
            "{create} to create, {update} to update, {delete} to delete, {unchanged} unchanged"
        );
        text
    }

    /// The plan for scripts.
    pub fn to_json(&self) -> Value {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|step| {
                let (action, revision, fields) = match &step.action {
                    Action::Create => ("create", None, Vec::new()),
                    Action::Update { revision, fields } => ("update", Some(*revision), fields.clone()),
                    Action::Unchanged { revision } => ("unchanged", Some(*revision), Vec::new()),
                    Action::Delete { revision } => ("delete", Some(*revision), Vec::new()),
                };
                json!({
                    "id": step.id,
                    "action": action,
                    "revision": revision,
                    "source": step.source.as_ref().map(|s| s.to_string()),
                    "fields": fields.iter().map(|f| json!({"field": f.field, "before": f.before, "after": f.after})).collect::<Vec<_>>(),
                    "notes": step.notes,
                })
            })
            .collect();
        json!({ "steps": steps })
    }
}

#[cfg(test)]
mod tests;
mod write_order;
