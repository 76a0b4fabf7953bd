//! How the console's job table asks for rows ([`RowQuery`]: filters, a
//! sort column, a page) and what it gets ([`RowPage`]): a walk over the
//! rows in memory, however many jobs there are.

use std::collections::BTreeMap;

use super::compact::{CatalogState, Row};
use super::row::JobRow;

/// How the table asks for rows.
#[derive(Debug, Clone, Default)]
pub struct RowQuery {
    /// Only this namespace's jobs (`default`: the names without a dot).
    pub namespace: Option<String>,
    /// Every label a row must carry.
    pub labels: BTreeMap<String, String>,
    /// Case-insensitive text in the id, description, schedule or target type.
    pub text: String,
    /// `active`, `paused`, `invalid`, or empty for all.
    pub state: String,
    pub sort: RowSort,
    pub descending: bool,
    pub offset: usize,
    pub limit: usize,
}

/// The column a table is sorted by (ties by id).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RowSort {
    #[default]
    Id,
    Updated,
    State,
    Schedule,
    Timezone,
}

impl RowSort {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "id" => Self::Id,
            "updated" => Self::Updated,
            "state" => Self::State,
            "schedule" => Self::Schedule,
            "timezone" => Self::Timezone,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Id => "id",
            Self::Updated => "updated",
            Self::State => "state",
            Self::Schedule => "schedule",
            Self::Timezone => "timezone",
        }
    }
}

/// One page of rows, and how many rows matched in all.
#[derive(Debug, Clone)]
pub struct RowPage {
    pub rows: Vec<JobRow>,
    pub matched: usize,
    pub total: usize,
}

impl CatalogState {
    /// The rows `query` asks for (the rows added since the last page are
    /// put in id order first).
    pub(super) fn page(&mut self, query: &RowQuery) -> RowPage {
        self.sort_order();
        let state = &*self;
        let texts = &state.texts;
        let needle = query.text.to_lowercase();
        let in_namespace = |id: &str| {
            query
                .namespace
                .as_deref()
                .is_none_or(|ns| jetcron_core::job::namespace_of(id) == ns)
        };
        let matches = |id: &str, row: &Row| {
            in_namespace(id)
                && (query.state.is_empty() || row.state() == query.state)
                && query
                    .labels
                    .iter()
                    .all(|(k, v)| row.label(k) == Some(v.as_str()))
                && (needle.is_empty()
                    || [
                        id,
                        row.description(),
                        texts.text(row.schedule),
                        texts.target_type(row),
                    ]
                    .iter()
                    .any(|f| f.to_lowercase().contains(&needle)))
        };
        let mut all: Vec<&Row> = state
            .in_id_order()
            .filter(|(id, row)| matches(id, row))
            .map(|(_, row)| row)
            .collect();
        // Already in id order; other columns sort with the id breaking ties.
        match query.sort {
            RowSort::Id => {}
            RowSort::Updated => all.sort_by_key(|r| r.updated_ns),
            RowSort::State => all.sort_by_key(|r| r.state()),
            RowSort::Schedule => all.sort_by_key(|r| texts.text(r.schedule)),
            RowSort::Timezone => all.sort_by_key(|r| texts.timezone(r)),
        }
        if query.descending {
            all.reverse();
        }
        // A namespace's table counts its own jobs only.
        let total = match &query.namespace {
            None => state.live,
            Some(_) => state
                .in_id_order()
                .filter(|(id, _)| in_namespace(id))
                .count(),
        };
        RowPage {
            matched: all.len(),
            total,
            rows: all
                .into_iter()
                .skip(query.offset)
                .take(query.limit)
                .map(|row| state.job_row(row))
                .collect(),
        }
    }
}
