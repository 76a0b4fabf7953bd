//! Where a job stands in chains: the parents its `after` names, with their
//! states, and the jobs that name it ([`ChainView`], on a job's page).

use jetcron_core::job::ChainOn;
use serde::Serialize;

use super::compact::{CatalogState, Row};

/// A job's parents and children (its `after`, and the jobs naming it there).
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ChainView {
    /// The jobs this one runs after; `state` says when one is paused,
    /// invalid or `missing` (deleted, or never created): its runs then start
    /// nothing here.
    pub parents: Vec<ChainPeer>,
    /// The jobs that run after this one.
    pub children: Vec<ChainPeer>,
}

/// One end of a chain link.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ChainPeer {
    pub job: String,
    /// Which ending of the parent's run starts the child.
    pub on: ChainOn,
    /// `active`, `paused`, `invalid` or `missing`.
    pub state: &'static str,
}

impl CatalogState {
    /// Where `id` stands in chains: its parents (each with its state, or
    /// `missing`) and the jobs that name it. Finding the children walks
    /// every row: a job page's cost, not a table's.
    pub(super) fn chain_of(&self, id: &str) -> ChainView {
        let state_of = |job: &str| self.get(job).map_or("missing", Row::state);
        let parents = self
            .get(id)
            .map(|row| {
                row.after()
                    .iter()
                    .map(|(job, on)| ChainPeer {
                        job: job.to_string(),
                        on: *on,
                        state: state_of(job),
                    })
                    .collect()
            })
            .unwrap_or_default();
        // In the order rows came (no walk through the id order's
        // indirection), then the few children sorted.
        let mut children: Vec<ChainPeer> = self
            .rows
            .iter()
            .filter(|row| row.live())
            .filter_map(|row| {
                let (_, on) = row.after().iter().find(|(job, _)| &**job == id)?;
                Some(ChainPeer {
                    job: self.id(row).to_string(),
                    on: *on,
                    state: row.state(),
                })
            })
            .collect();
        children.sort_by(|a, b| a.job.cmp(&b.job));
        ChainView { parents, children }
    }
}
