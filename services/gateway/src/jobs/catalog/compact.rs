//! The rows as the catalog keeps them: compact ([`Row`], 40 bytes), their
//! ids in one arena, repeated texts kept once ([`Texts`]), found by id
//! through a hash table and listed in id order ([`CatalogState`]).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use jetcron_core::id_index::IdIndex;
use jetcron_core::job::{ChainLink, ChainOn};

use super::row::{state_name, JobRow};

/// A row as the catalog keeps it, 40 bytes for a million jobs: the id in
/// the catalog's arena, the schedule and the (zone, target type) pair as
/// numbers of texts kept once (few pairs occur: one number for both), the
/// update time as nanoseconds, and what most jobs leave empty
/// (description, labels, parents) behind one pointer. A key
/// whose job was deleted keeps its row (not live) with the delete marker's
/// revision, so a late put of an older revision is ignored.
#[derive(Debug)]
pub(super) struct Row {
    revision: u64,
    pub(super) updated_ns: i64,
    rare: Option<Box<RareRow>>,
    /// Where the id starts in [`CatalogState::ids`].
    id_at: u32,
    pub(super) schedule: TextId,
    /// Its timezone and target type ([`Texts::pair_text`]).
    zone_and_target: PairId,
    id_len: u16,
    flags: u8,
}

/// The number of a text in [`Texts`].
pub(super) type TextId = u32;

/// The number of a pair of texts in [`Texts`].
pub(super) type PairId = u32;

const LIVE: u8 = 1;
const VALID: u8 = 2;
const PAUSED: u8 = 4;

/// The parts of a row most jobs leave empty.
#[derive(Debug, Default)]
pub(super) struct RareRow {
    description: Box<str>,
    labels: Box<[(Box<str>, Box<str>)]>,
    after: Box<[(Box<str>, ChainOn)]>,
}

/// Texts many rows repeat, each kept once and named by its number, and
/// pairs of them likewise.
#[derive(Default)]
pub(super) struct Texts {
    list: Vec<Arc<str>>,
    numbers: std::collections::HashMap<Arc<str>, TextId>,
    pairs: Vec<(TextId, TextId)>,
    pair_numbers: std::collections::HashMap<(TextId, TextId), PairId>,
}

impl Texts {
    pub(super) fn number(&mut self, text: &str) -> TextId {
        if let Some(number) = self.numbers.get(text) {
            return *number;
        }
        let number = TextId::try_from(self.list.len()).unwrap_or(TextId::MAX);
        let text: Arc<str> = Arc::from(text);
        self.list.push(Arc::clone(&text));
        self.numbers.insert(text, number);
        number
    }

    pub(super) fn text(&self, number: TextId) -> &str {
        self.list.get(number as usize).map_or("", |t| t)
    }

    pub(super) fn pair_number(&mut self, first: &str, second: &str) -> PairId {
        let pair = (self.number(first), self.number(second));
        if let Some(number) = self.pair_numbers.get(&pair) {
            return *number;
        }
        let number = PairId::try_from(self.pairs.len()).unwrap_or(PairId::MAX);
        self.pairs.push(pair);
        self.pair_numbers.insert(pair, number);
        number
    }

    pub(super) fn pair_text(&self, number: PairId) -> (&str, &str) {
        self.pairs
            .get(number as usize)
            .map_or(("", ""), |(first, second)| {
                (self.text(*first), self.text(*second))
            })
    }

    /// The timezone of a row.
    pub(super) fn timezone(&self, row: &Row) -> &str {
        self.pair_text(row.zone_and_target).0
    }

    /// The target type of a row.
    pub(super) fn target_type(&self, row: &Row) -> &str {
        self.pair_text(row.zone_and_target).1
    }
}

impl RareRow {
    pub(super) fn of(row: &mut JobRow) -> Option<Box<Self>> {
        let rare = RareRow {
            description: std::mem::take(&mut row.description).into(),
            labels: std::mem::take(&mut row.labels)
                .into_iter()
                .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
                .collect(),
            after: std::mem::take(&mut row.after)
                .into_iter()
                .map(|l| (l.job.into_boxed_str(), l.on))
                .collect(),
        };
        let empty = rare.description.is_empty() && rare.labels.is_empty() && rare.after.is_empty();
        (!empty).then(|| Box::new(rare))
    }
}

impl Row {
    pub(super) fn live(&self) -> bool {
        self.flags & LIVE != 0
    }

    pub(super) fn description(&self) -> &str {
        self.rare.as_ref().map_or("", |r| &r.description)
    }

    pub(super) fn labels(&self) -> &[(Box<str>, Box<str>)] {
        self.rare.as_ref().map_or(&[], |r| &r.labels)
    }

    pub(super) fn after(&self) -> &[(Box<str>, ChainOn)] {
        self.rare.as_ref().map_or(&[], |r| &r.after)
    }

    pub(super) fn updated_at(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_nanos(self.updated_ns)
    }

    pub(super) fn valid(&self) -> bool {
        self.flags & VALID != 0
    }

    pub(super) fn paused(&self) -> bool {
        self.flags & PAUSED != 0
    }

    pub(super) fn state(&self) -> &'static str {
        state_name(self.valid(), self.paused())
    }

    pub(super) fn label(&self, key: &str) -> Option<&str> {
        self.labels()
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }
}

/// Every key the catalog has seen: rows in the order they came, found by id
/// through a hash table of row numbers, listed in id order through `order`.
#[derive(Default)]
pub(super) struct CatalogState {
    pub(super) rows: Vec<Row>,
    /// Every id, one after the other (a row names its part).
    ids: String,
    /// Row numbers, found by their id.
    by_id: IdIndex,
    /// Row numbers in id order up to `sorted`; rows added since follow.
    order: Vec<u32>,
    sorted: usize,
    pub(super) texts: Texts,
    /// Keys that hold a job.
    pub(super) live: usize,
    pub(super) synced: bool,
}

/// The id of `row` in the arena `ids`.
pub(super) fn id_in<'a>(ids: &'a str, row: &Row) -> &'a str {
    let at = row.id_at as usize;
    ids.get(at..at + usize::from(row.id_len)).unwrap_or("")
}

impl CatalogState {
    pub(super) fn id(&self, row: &Row) -> &str {
        id_in(&self.ids, row)
    }

    /// Make room for rows up to `keys` in all (a watch opening on that
    /// many keys).
    pub(super) fn reserve(&mut self, keys: usize) {
        let more = keys.saturating_sub(self.rows.len());
        let (rows, ids) = (&self.rows, &self.ids);
        self.by_id
            .reserve(more, |n| Some(id_in(ids, &rows[n as usize])));
        self.rows.reserve_exact(more);
    }

    pub(super) fn number_of(&self, id: &str) -> Option<u32> {
        let (rows, ids) = (&self.rows, &self.ids);
        self.by_id.find(id, |n| Some(id_in(ids, &rows[n as usize])))
    }

    /// The live row of `id`.
    pub(super) fn get(&self, id: &str) -> Option<&Row> {
        let row = &self.rows[self.number_of(id)? as usize];
        row.live().then_some(row)
    }

    pub(super) fn record(&mut self, key: &str, revision: u64, row: Option<JobRow>) {
        let number = self.number_of(key);
        if number.is_some_and(|n| self.rows[n as usize].revision >= revision) {
            return;
        }
        let Ok(id_len) = u16::try_from(key.len()) else {
            return; // longer than any NATS subject a key can be part of
        };
        let Ok(id_at) = u32::try_from(self.ids.len()) else {
            return;
        };
        let compact = match row {
            Some(mut row) => {
                let mut flags = LIVE;
                if row.valid {
                    flags |= VALID;
                }
                if row.paused {
                    flags |= PAUSED;
                }
                Row {
                    revision,
                    updated_ns: row.updated_at.timestamp_nanos_opt().unwrap_or_default(),
                    rare: RareRow::of(&mut row),
                    id_at,
                    schedule: self.texts.number(&row.schedule),
                    zone_and_target: self.texts.pair_number(&row.timezone, &row.target_type),
                    id_len,
                    flags,
                }
            }
            None => Row {
                revision,
                updated_ns: 0,
                rare: None,
                id_at,
                schedule: 0,
                zone_and_target: 0,
                id_len,
                flags: 0,
            },
        };
        let now_live = compact.live();
        match number {
            Some(n) => {
                let slot = &mut self.rows[n as usize];
                let was_live = slot.live();
                // The id is already in the arena.
                let (id_at, id_len) = (slot.id_at, slot.id_len);
                *slot = Row {
                    id_at,
                    id_len,
                    ..compact
                };
                match (was_live, now_live) {
                    (false, true) => self.live += 1,
                    (true, false) => self.live -= 1,
                    _ => {}
                }
            }
            None => {
                let Ok(n) = u32::try_from(self.rows.len()) else {
                    return;
                };
                self.ids.push_str(key);
                self.rows.push(compact);
                let (rows, ids) = (&self.rows, &self.ids);
                self.by_id
                    .insert(key, n, |m| Some(id_in(ids, &rows[m as usize])));
                self.order.push(n);
                if now_live {
                    self.live += 1;
                }
            }
        }
    }

    /// Put the rows added since the last call into id order.
    pub(super) fn sort_order(&mut self) {
        if self.sorted == self.order.len() {
            return;
        }
        // The standard stable sort finds the sorted head as one run: the
        // rows added since are sorted and merged in, not the whole order.
        let (rows, ids) = (&self.rows, &self.ids);
        self.order
            .sort_by(|a, b| id_in(ids, &rows[*a as usize]).cmp(id_in(ids, &rows[*b as usize])));
        self.sorted = self.order.len();
    }

    /// The live rows in id order (after [`CatalogState::sort_order`]).
    pub(super) fn in_id_order(&self) -> impl Iterator<Item = (&str, &Row)> {
        self.order
            .iter()
            .map(|n| &self.rows[*n as usize])
            .filter(|row| row.live())
            .map(|row| (self.id(row), row))
    }

    pub(super) fn job_row(&self, row: &Row) -> JobRow {
        JobRow {
            id: self.id(row).to_string(),
            revision: row.revision,
            updated_at: row.updated_at(),
            valid: row.valid(),
            schedule: self.texts.text(row.schedule).to_string(),
            timezone: self.texts.timezone(row).to_string(),
            paused: row.paused(),
            labels: row
                .labels()
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            target_type: self.texts.target_type(row).to_string(),
            description: row.description().to_string(),
            after: row
                .after()
                .iter()
                .map(|(job, on)| ChainLink {
                    job: job.to_string(),
                    on: *on,
                })
                .collect(),
        }
    }
}
