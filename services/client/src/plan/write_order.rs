//! In which order a plan's writes go. The gateway refuses a write that would
//! close a chain cycle through the jobs stored at that moment, so a plan
//! that moves edges around (`a` after `b` where `b` was after `a`) must
//! write the job that drops an edge before the one that adds the reverse
//! one. Each next write is the first (by id) whose new parents do not lead
//! back to it through the chains as they will be stored by then; deletes go
//! last. A set of files that is itself a cycle has no such order: its
//! writes go by id and the gateway names the cycle.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{Action, Step, StoredJob};

/// `steps` in the order to write them.
pub(super) fn ordered(steps: Vec<Step>, stored: &[StoredJob]) -> Vec<Step> {
    let mut parents: BTreeMap<String, BTreeSet<String>> = stored
        .iter()
        .map(|job| (job.id.clone(), parents_of(job.definition.as_ref())))
        .collect();
    let (mut writes, rest): (Vec<Step>, Vec<Step>) = steps
        .into_iter()
        .partition(|s| matches!(s.action, Action::Create | Action::Update { .. }));
    let (deletes, unchanged): (Vec<Step>, Vec<Step>) = rest
        .into_iter()
        .partition(|s| matches!(s.action, Action::Delete { .. }));
    writes.sort_by(|a, b| a.id.cmp(&b.id));
    let mut order = unchanged;
    while !writes.is_empty() {
        let next = writes
            .iter()
            .position(|step| {
                let new = parents_of(step.definition.as_ref());
                !new.iter().any(|p| leads_to(&parents, p, &step.id))
            })
            .unwrap_or(0);
        let step = writes.remove(next);
        parents.insert(step.id.clone(), parents_of(step.definition.as_ref()));
        order.push(step);
    }
    order.extend(deletes);
    order
}

/// The jobs a definition's `after` names.
fn parents_of(definition: Option<&Value>) -> BTreeSet<String> {
    definition
        .and_then(|d| d["after"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|link| link["job"].as_str().map(str::to_string))
        .collect()
}

/// Whether following parents from `from` reaches `target` (or is it).
fn leads_to(parents: &BTreeMap<String, BTreeSet<String>>, from: &str, target: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(job) = todo.pop() {
        if job == target {
            return true;
        }
        if seen.insert(job.clone()) {
            todo.extend(parents.get(&job).into_iter().flatten().cloned());
        }
    }
    false
}
