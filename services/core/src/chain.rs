//! Chains: a job that names parents in `after` runs when one of their runs
//! ends the way it asks (`on`). What the pieces agree on lives here, without
//! I/O: the run id of a chained run (one per child and parent run, so that
//! every executor that starts it names it the same and JetStream keeps one),
//! which ending starts which child, and the cycle check of a put.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::events::{RunEventKind, RunId};
use crate::job::ChainLink;

/// Namespace of chained run ids (a fixed, random UUID; apart from fires').
const CHAIN_NAMESPACE: Uuid = Uuid::from_u128(0x1f5b_8a27_c3d4_4e09_9b6a_0c7e_52d1_a8f3);

/// The run of `child` started by the end of `parent_run`: the same id however
/// many times that end is seen, never equal to another job's or parent's.
pub fn chained_run_id(child: &str, parent_run: &RunId) -> RunId {
    let name = format!("{child}\n{parent_run}");
    RunId(Uuid::new_v5(&CHAIN_NAMESPACE, name.as_bytes()).to_string())
}

/// How a parent run ended, as far as its children go: `Some(true)` it
/// succeeded, `Some(false)` it ended badly (failed after its last retry,
/// timed out, killed), `None` it did not end in a way that starts anything
/// (a skipped fire ran nothing; other kinds are not endings).
pub fn parent_ending(kind: RunEventKind) -> Option<bool> {
    match kind {
        RunEventKind::Succeeded => Some(true),
        RunEventKind::Failed | RunEventKind::TimedOut | RunEventKind::Killed => Some(false),
        _ => None,
    }
}

/// The cycle that `job` with parents `after` would close, given every other
/// job's parents (`parents_of`): the path `job → parent → … → job`, or
/// `None`. The search walks up the parents, each job once.
pub fn find_cycle(
    job: &str,
    after: &[ChainLink],
    parents_of: &dyn Fn(&str) -> Vec<String>,
) -> Option<Vec<String>> {
    // Depth-first over parents, remembering how each job was reached.
    let mut reached_from: BTreeMap<String, String> = BTreeMap::new();
    let mut seen = BTreeSet::from([job.to_string()]);
    let mut stack: Vec<String> = Vec::new();
    for link in after {
        if link.job == job {
            return Some(vec![job.to_string(), job.to_string()]);
        }
        if seen.insert(link.job.clone()) {
            reached_from.insert(link.job.clone(), job.to_string());
            stack.push(link.job.clone());
        }
    }
    while let Some(current) = stack.pop() {
        for parent in parents_of(&current) {
            if parent == job {
                // job → … → current → job.
                let mut path = vec![current.clone()];
                let mut at = current.clone();
                while let Some(from) = reached_from.get(&at) {
                    path.push(from.clone());
                    at = from.clone();
                }
                path.reverse();
                path.push(job.to_string());
                return Some(path);
            }
            if seen.insert(parent.clone()) {
                reached_from.insert(parent.clone(), current.clone());
                stack.push(parent);
            }
        }
    }
    None
}

/// A cycle's path as people read it: `a → b → a`.
pub fn cycle_text(path: &[String]) -> String {
    path.join(" → ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::ChainOn;

    fn link(job: &str) -> ChainLink {
        ChainLink {
            job: job.into(),
            on: ChainOn::Success,
        }
    }

    fn graph<'a>(edges: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Vec<String> + 'a {
        move |child: &str| {
            edges
                .iter()
                .filter(|(c, _)| *c == child)
                .map(|(_, p)| p.to_string())
                .collect()
        }
    }

    #[test]
    fn a_cycle_is_found_and_named_from_the_job_round_to_it() {
        // load runs after transform, transform after extract; extract after
        // load would close extract → load → transform → extract.
        let parents = graph(&[("load", "transform"), ("transform", "extract")]);
        let cycle = find_cycle("extract", &[link("load")], &parents).expect("cycle");
        assert_eq!(cycle_text(&cycle), "extract → load → transform → extract");
        assert_eq!(
            find_cycle("report", &[link("load")], &parents),
            None,
            "a new leaf closes nothing"
        );
        assert_eq!(
            find_cycle("x", &[link("x")], &parents),
            Some(vec!["x".into(), "x".into()])
        );
    }

    #[test]
    fn diamonds_are_not_cycles() {
        // d after b and c, both after a: a shared ancestor is no cycle.
        let parents = graph(&[("b", "a"), ("c", "a")]);
        assert_eq!(find_cycle("d", &[link("b"), link("c")], &parents), None);
    }

    #[test]
    fn chained_run_ids_are_stable_and_distinct() {
        let parent = RunId("6f1c3f0e-9b7d-4e52-8c1a-5d2f7e90b3c4".into());
        let other = RunId("7f1c3f0e-9b7d-4e52-8c1a-5d2f7e90b3c4".into());
        let id = chained_run_id("load", &parent);
        assert_eq!(id, chained_run_id("load", &parent));
        assert_ne!(id, chained_run_id("load", &other));
        assert_ne!(id, chained_run_id("report", &parent));
        assert_eq!(
            uuid::Uuid::parse_str(id.as_str())
                .expect("uuid")
                .to_string(),
            id.0
        );
    }

    #[test]
    fn endings_start_the_children_that_asked_for_them() {
        let on = |on| ChainLink {
            job: "p".into(),
            on,
        };
        let cases = [
            (RunEventKind::Succeeded, [true, false, true]),
            (RunEventKind::Failed, [false, true, true]),
            (RunEventKind::TimedOut, [false, true, true]),
            (RunEventKind::Killed, [false, true, true]),
        ];
        for (kind, expected) in cases {
            let succeeded = parent_ending(kind).expect("an ending");
            let got = [ChainOn::Success, ChainOn::Failure, ChainOn::Completed]
                .map(|o| on(o).on.starts_after(succeeded));
            assert_eq!(got, expected, "{kind:?}");
        }
        for kind in [
            RunEventKind::Skipped,
            RunEventKind::Started,
            RunEventKind::Retrying,
            RunEventKind::Notified,
        ] {
            assert_eq!(parent_ending(kind), None, "{kind:?}");
        }
    }
}
