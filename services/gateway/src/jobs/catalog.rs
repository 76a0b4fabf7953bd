//! What the gateway knows of every job without asking the bucket: one small
//! row per key (schedule, zone, state, labels, target type), kept by a watch
//! of `jetcron_jobs` (last value per key, then every change).
//!
//! Two users: the `max_jobs` limit counts from it, so a put needs no scan of
//! the bucket; and the console's job table filters, sorts and pages it, so a
//! page of 50 out of 100,000 jobs costs a walk over memory, not 100,000 KV
//! reads. The bucket stays the source of truth: a job's page reads its entry.
//!
//! The gateway notes its own writes as soon as the bucket answers them, so a
//! create right after another through the same gateway counts both and a
//! pause shows in the table at once (the watch delivers them again later; an
//! older revision never overwrites a newer one). Until the watch has caught
//! up, [`JobCatalog::synced`] is false: the limit counts keys the slow way
//! and the console says the list is loading. Several gateways each keep
//! their own view, so concurrent creates through different gateways can
//! pass the limit by a few; a direct `nats kv put` is not counted at all
//! (NATS permissions decide who may do that).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use anyhow::Context as _;
use async_nats::jetstream::kv;
use chrono::{DateTime, Utc};
use futures::TryStreamExt as _;
use jetcron_core::id_index::IdIndex;
use jetcron_core::job::{parse_written_with, ChainLink, ChainOn, ValidJob};
use jetcron_core::schedule_lines::SharedLines;
use jetcron_io::job_feed::{self, FeedReceiver, JobEntry, JobView, Written};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// Longest description kept in a row (the job page shows the whole one).
const DESCRIPTION_CHARS: usize = 160;

/// One job as the table shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub id: String,
    pub revision: u64,
    pub updated_at: DateTime<Utc>,
    /// Whether the definition validates (only valid ones are scheduled).
    pub valid: bool,
    pub schedule: String,
    /// IANA zone as written; empty for UTC.
    pub timezone: String,
    pub paused: bool,
    pub labels: BTreeMap<String, String>,
    /// `http`, `nats`, `shell`, or empty when unreadable.
    pub target_type: String,
    pub description: String,
    /// The parents a valid definition names in `after`.
    pub after: Vec<ChainLink>,
}

impl JobRow {
    /// The row of a stored value (`key`, written at `at`), valid or not;
    /// its schedule line parsed through `lines`.
    pub fn from_value(
        key: &str,
        revision: u64,
        value: &[u8],
        at: DateTime<Utc>,
        lines: &SharedLines,
    ) -> Self {
        // A valid definition is read once, by the validation; only an
        // invalid one is looked at again, as plain JSON, for what it has.
        match parse_written_with(value, Some(key), at, &mut |line| lines.parse(line)) {
            Ok(job) => Self::of_valid(key, revision, at, &job),
            Err(_) => Self::of_invalid(key, revision, at, value),
        }
    }

    /// The row of a decoded entry; `None` for a delete.
    pub fn from_entry(entry: &JobEntry) -> Option<Self> {
        let (key, revision, at) = (&entry.key, entry.revision, entry.written_at);
        match &entry.written {
            Written::Valid(job) => Some(Self::of_valid(key, revision, at, job)),
            Written::Invalid { value, .. } => Some(Self::of_invalid(key, revision, at, value)),
            Written::Removed | Written::NotChained => None,
        }
    }

    fn of_valid(key: &str, revision: u64, at: DateTime<Utc>, job: &ValidJob) -> Self {
        let spec = &job.spec;
        Self {
            id: key.to_string(),
            revision,
            updated_at: at,
            valid: true,
            target_type: spec.target.kind().to_string(),
            schedule: spec.schedule.clone().unwrap_or_default(),
            timezone: spec.timezone.clone().unwrap_or_default(),
            paused: spec.paused,
            labels: spec.labels.clone(),
            after: spec.after.clone(),
            description: spec
                .description
                .as_deref()
                .unwrap_or_default()
                .chars()
                .take(DESCRIPTION_CHARS)
                .collect(),
        }
    }

    fn of_invalid(key: &str, revision: u64, at: DateTime<Utc>, value: &[u8]) -> Self {
        let json: serde_json::Value = serde_json::from_slice(value).unwrap_or_default();
        let text = |name: &str| json.get(name).and_then(|v| v.as_str()).unwrap_or_default();
        let labels = json
            .get("labels")
            .and_then(|v| v.as_object())
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            id: key.to_string(),
            revision,
            updated_at: at,
            valid: false,
            schedule: text("schedule").to_string(),
            timezone: text("timezone").to_string(),
            paused: json.get("paused").and_then(|v| v.as_bool()) == Some(true),
            labels,
            target_type: json
                .get("target")
                .and_then(|t| t.get("type"))
                .and_then(|t| t.as_str())
                .unwrap_or_default()
                .to_string(),
            description: text("description")
                .chars()
                .take(DESCRIPTION_CHARS)
                .collect(),
            after: Vec::new(),
        }
    }

    /// `active`, `paused` or `invalid`.
    pub fn state(&self) -> &'static str {
        state_name(self.valid, self.paused)
    }
}

/// `active`, `paused` or `invalid`: a row's state as the table shows it.
fn state_name(valid: bool, paused: bool) -> &'static str {
    match (valid, paused) {
        (false, _) => "invalid",
        (true, true) => "paused",
        (true, false) => "active",
    }
}

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

/// How the table asks for rows.
#[derive(Debug, Clone, Default)]
pub struct RowQuery {
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

/// A row as the catalog keeps it, 40 bytes for a million jobs: the id in
/// the catalog's arena, the schedule and the (zone, target type) pair as
/// numbers of texts kept once (few pairs occur: one number for both), the
/// update time as nanoseconds, and what most jobs leave empty
/// (description, labels, parents) behind one pointer. A key
/// whose job was deleted keeps its row (not live) with the delete marker's
/// revision, so a late put of an older revision is ignored.
#[derive(Debug)]
struct Row {
    revision: u64,
    updated_ns: i64,
    rare: Option<Box<RareRow>>,
    /// Where the id starts in [`CatalogState::ids`].
    id_at: u32,
    schedule: TextId,
    /// Its timezone and target type ([`Texts::pair_text`]).
    zone_and_target: PairId,
    id_len: u16,
    flags: u8,
}

/// The number of a text in [`Texts`].
type TextId = u32;

/// The number of a pair of texts in [`Texts`].
type PairId = u32;

const LIVE: u8 = 1;
const VALID: u8 = 2;
const PAUSED: u8 = 4;

/// The parts of a row most jobs leave empty.
#[derive(Debug, Default)]
struct RareRow {
    description: Box<str>,
    labels: Box<[(Box<str>, Box<str>)]>,
    after: Box<[(Box<str>, ChainOn)]>,
}

/// Texts many rows repeat, each kept once and named by its number, and
/// pairs of them likewise.
#[derive(Default)]
struct Texts {
    list: Vec<Arc<str>>,
    numbers: std::collections::HashMap<Arc<str>, TextId>,
    pairs: Vec<(TextId, TextId)>,
    pair_numbers: std::collections::HashMap<(TextId, TextId), PairId>,
}

impl Texts {
    fn number(&mut self, text: &str) -> TextId {
        if let Some(number) = self.numbers.get(text) {
            return *number;
        }
        let number = TextId::try_from(self.list.len()).unwrap_or(TextId::MAX);
        let text: Arc<str> = Arc::from(text);
        self.list.push(Arc::clone(&text));
        self.numbers.insert(text, number);
        number
    }

    fn text(&self, number: TextId) -> &str {
        self.list.get(number as usize).map_or("", |t| t)
    }

    fn pair_number(&mut self, first: &str, second: &str) -> PairId {
        let pair = (self.number(first), self.number(second));
        if let Some(number) = self.pair_numbers.get(&pair) {
            return *number;
        }
        let number = PairId::try_from(self.pairs.len()).unwrap_or(PairId::MAX);
        self.pairs.push(pair);
        self.pair_numbers.insert(pair, number);
        number
    }

    fn pair_text(&self, number: PairId) -> (&str, &str) {
        self.pairs
            .get(number as usize)
            .map_or(("", ""), |(first, second)| {
                (self.text(*first), self.text(*second))
            })
    }

    /// The timezone of a row.
    fn timezone(&self, row: &Row) -> &str {
        self.pair_text(row.zone_and_target).0
    }

    /// The target type of a row.
    fn target_type(&self, row: &Row) -> &str {
        self.pair_text(row.zone_and_target).1
    }
}

impl RareRow {
    fn of(row: &mut JobRow) -> Option<Box<Self>> {
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
    fn live(&self) -> bool {
        self.flags & LIVE != 0
    }

    fn description(&self) -> &str {
        self.rare.as_ref().map_or("", |r| &r.description)
    }

    fn labels(&self) -> &[(Box<str>, Box<str>)] {
        self.rare.as_ref().map_or(&[], |r| &r.labels)
    }

    fn after(&self) -> &[(Box<str>, ChainOn)] {
        self.rare.as_ref().map_or(&[], |r| &r.after)
    }

    fn updated_at(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_nanos(self.updated_ns)
    }

    fn valid(&self) -> bool {
        self.flags & VALID != 0
    }

    fn paused(&self) -> bool {
        self.flags & PAUSED != 0
    }

    fn state(&self) -> &'static str {
        state_name(self.valid(), self.paused())
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels()
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }
}

/// The catalog, shared by the watch and the readers.
#[derive(Clone, Default)]
pub struct JobCatalog {
    inner: Arc<RwLock<CatalogState>>,
    /// The process's parsed schedule lines (a row keeps only the text).
    lines: SharedLines,
}

/// Every key the catalog has seen: rows in the order they came, found by id
/// through a hash table of row numbers, listed in id order through `order`.
#[derive(Default)]
struct CatalogState {
    rows: Vec<Row>,
    /// Every id, one after the other (a row names its part).
    ids: String,
    /// Row numbers, found by their id.
    by_id: IdIndex,
    /// Row numbers in id order up to `sorted`; rows added since follow.
    order: Vec<u32>,
    sorted: usize,
    texts: Texts,
    /// Keys that hold a job.
    live: usize,
    synced: bool,
}

/// The id of `row` in the arena `ids`.
fn id_in<'a>(ids: &'a str, row: &Row) -> &'a str {
    let at = row.id_at as usize;
    ids.get(at..at + usize::from(row.id_len)).unwrap_or("")
}

impl CatalogState {
    fn id(&self, row: &Row) -> &str {
        id_in(&self.ids, row)
    }

    /// Make room for rows up to `keys` in all (a watch opening on that
    /// many keys).
    fn reserve(&mut self, keys: usize) {
        let more = keys.saturating_sub(self.rows.len());
        let (rows, ids) = (&self.rows, &self.ids);
        self.by_id
            .reserve(more, |n| Some(id_in(ids, &rows[n as usize])));
        self.rows.reserve_exact(more);
    }

    fn number_of(&self, id: &str) -> Option<u32> {
        let (rows, ids) = (&self.rows, &self.ids);
        self.by_id.find(id, |n| Some(id_in(ids, &rows[n as usize])))
    }

    /// The live row of `id`.
    fn get(&self, id: &str) -> Option<&Row> {
        let row = &self.rows[self.number_of(id)? as usize];
        row.live().then_some(row)
    }

    fn record(&mut self, key: &str, revision: u64, row: Option<JobRow>) {
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
    fn sort_order(&mut self) {
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
    fn in_id_order(&self) -> impl Iterator<Item = (&str, &Row)> {
        self.order
            .iter()
            .map(|n| &self.rows[*n as usize])
            .filter(|row| row.live())
            .map(|row| (self.id(row), row))
    }

    fn job_row(&self, row: &Row) -> JobRow {
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

impl JobCatalog {
    /// An empty catalog parsing schedule lines through `lines`.
    pub fn new(lines: SharedLines) -> Self {
        Self {
            inner: Arc::default(),
            lines,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, CatalogState> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, CatalogState> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the watch has caught up with the bucket.
    pub fn synced(&self) -> bool {
        self.read().synced
    }

    /// Whether `key` exists and how many keys exist, once synced.
    pub fn lookup(&self, key: &str) -> Option<(bool, usize)> {
        let state = self.read();
        state.synced.then(|| (state.get(key).is_some(), state.live))
    }

    /// How many jobs there are.
    pub fn len(&self) -> usize {
        self.read().live
    }

    /// Whether there is no job.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The parents `id` names in `after` (none when unknown or invalid).
    pub fn parents_of(&self, id: &str) -> Vec<String> {
        let state = self.read();
        state
            .get(id)
            .map(|row| row.after().iter().map(|(job, _)| job.to_string()).collect())
            .unwrap_or_default()
    }

    /// Where `id` stands in chains: its parents (each with its state, or
    /// `missing`) and the jobs that name it. Finding the children walks
    /// every row: a job page's cost, not a table's.
    pub fn chain_of(&self, id: &str) -> ChainView {
        let state = self.read();
        let state_of = |job: &str| state.get(job).map_or("missing", Row::state);
        let parents = state
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
        let mut children: Vec<ChainPeer> = state
            .rows
            .iter()
            .filter(|row| row.live())
            .filter_map(|row| {
                let (_, on) = row.after().iter().find(|(job, _)| &**job == id)?;
                Some(ChainPeer {
                    job: state.id(row).to_string(),
                    on: *on,
                    state: row.state(),
                })
            })
            .collect();
        children.sort_by(|a, b| a.job.cmp(&b.job));
        ChainView { parents, children }
    }

    /// Note a put this gateway made: `value` is now `key`'s at `revision`.
    pub fn note_put(&self, key: &str, revision: u64, value: &[u8], at: DateTime<Utc>) {
        let row = JobRow::from_value(key, revision, value, at, &self.lines);
        self.write().record(key, revision, Some(row));
    }

    /// Note a delete this gateway made: `revision` is `key`'s delete marker.
    pub fn note_delete(&self, key: &str, revision: u64) {
        self.write().record(key, revision, None);
    }

    /// The rows `query` asks for.
    pub fn page(&self, query: &RowQuery) -> RowPage {
        // Sorted and read under one guard: a row the watch adds in between
        // would be listed out of order.
        let mut state = self.write();
        state.sort_order();
        let state = &*state;
        let texts = &state.texts;
        let needle = query.text.to_lowercase();
        let matches = |id: &str, row: &Row| {
            (query.state.is_empty() || row.state() == query.state)
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
        RowPage {
            matched: all.len(),
            total: state.live,
            rows: all
                .into_iter()
                .skip(query.offset)
                .take(query.limit)
                .map(|row| state.job_row(row))
                .collect(),
        }
    }

    fn mark_synced(&self) {
        self.write().synced = true;
    }

    /// Keep up with the jobs bucket through `feed` until `shutdown`.
    pub async fn follow(self, feed: FeedReceiver, shutdown: CancellationToken) {
        job_feed::keep(feed, &self, &shutdown).await;
    }
}

impl JobView for JobCatalog {
    fn expect(&self, keys: usize) {
        self.write().reserve(keys);
    }

    fn apply(&self, entry: &JobEntry) {
        if matches!(entry.written, Written::NotChained) {
            return; // not decoded: a feed for chain indexes only
        }
        let row = JobRow::from_entry(entry);
        self.write().record(&entry.key, entry.revision, row);
    }

    fn synced(&self) {
        self.mark_synced();
    }
}

/// Count the keys of `bucket` by listing them (before the catalog is synced).
pub async fn count_keys(bucket: &kv::Store, key: &str) -> anyhow::Result<(bool, usize)> {
    let keys: Vec<String> = bucket
        .keys()
        .await
        .context("list job keys")?
        .try_collect()
        .await
        .context("list job keys")?;
    Ok((keys.iter().any(|k| k == key), keys.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, extra: &str) -> Vec<u8> {
        format!(r#"{{"id":"{id}","schedule":"0 * * * *","target":{{"type":"shell","command":"true"}}{extra}}}"#)
            .into_bytes()
    }

    fn synced() -> JobCatalog {
        let catalog = JobCatalog::default();
        catalog.mark_synced();
        catalog
    }

    #[test]
    fn own_writes_count_at_once_and_late_older_revisions_change_nothing() {
        let catalog = synced();
        let now = Utc::now();
        catalog.note_put("a", 3, &job("a", ""), now);
        catalog.note_put("b", 4, &job("b", ""), now);
        assert_eq!(catalog.lookup("a"), Some((true, 2)));
        // The watch delivers the same and older revisions later.
        let mut state = catalog.write();
        state.record("a", 1, None);
        state.record(
            "a",
            3,
            Some(JobRow::from_value(
                "a",
                3,
                &job("a", ""),
                now,
                &SharedLines::default(),
            )),
        );
        state.record("b", 5, None);
        state.record(
            "b",
            4,
            Some(JobRow::from_value(
                "b",
                4,
                &job("b", ""),
                now,
                &SharedLines::default(),
            )),
        );
        drop(state);
        assert_eq!(catalog.lookup("a"), Some((true, 1)));
        assert_eq!(catalog.lookup("b"), Some((false, 1)));
        catalog.note_put("b", 6, &job("b", ""), now);
        assert_eq!(catalog.lookup("b"), Some((true, 2)));
        catalog.note_delete("a", 7);
        assert_eq!(catalog.lookup("a"), Some((false, 1)));
        // A key longer than any id (a direct `nats kv put`) is counted and
        // listed as invalid.
        let long = "k".repeat(300);
        catalog.note_put(&long, 8, b"{}", now);
        assert_eq!(catalog.lookup(&long), Some((true, 2)));
        let invalid = catalog.page(&RowQuery {
            state: "invalid".into(),
            limit: 10,
            ..Default::default()
        });
        assert_eq!(invalid.rows.len(), 1);
        assert_eq!(invalid.rows[0].id, long);
    }

    #[test]
    fn rows_filter_by_label_text_and_state_sort_and_page() {
        let catalog = synced();
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).expect("time");
        for i in 0..30 {
            let team = if i % 3 == 0 { "billing" } else { "search" };
            let paused = if i % 5 == 0 { r#","paused":true"# } else { "" };
            let extra = format!(
                r#","labels":{{"team":"{team}"}},"description":"Nightly report {i}"{paused}"#
            );
            let id = format!("job-{i:02}");
            catalog.note_put(
                &id,
                i + 1,
                &job(&id, &extra),
                t0 + chrono::Duration::seconds(30 - i as i64),
            );
        }
        catalog.note_put(
            "broken",
            99,
            br#"{"id":"broken","schedule":"61 * * * *"}"#,
            t0,
        );

        let page = catalog.page(&RowQuery {
            limit: 5,
            offset: 5,
            ..Default::default()
        });
        assert_eq!((page.total, page.matched), (31, 31));
        let ids: Vec<_> = page.rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["job-04", "job-05", "job-06", "job-07", "job-08"]);

        let billing = catalog.page(&RowQuery {
            labels: BTreeMap::from([("team".into(), "billing".into())]),
            limit: 100,
            ..Default::default()
        });
        assert_eq!(billing.matched, 10);
        assert!(billing.rows.iter().all(|r| r.labels["team"] == "billing"));

        let text = catalog.page(&RowQuery {
            text: "REPORT 2".into(),
            limit: 100,
            ..Default::default()
        });
        let ids: Vec<_> = text.rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "job-02", "job-20", "job-21", "job-22", "job-23", "job-24", "job-25", "job-26",
                "job-27", "job-28", "job-29"
            ]
        );

        let paused = catalog.page(&RowQuery {
            state: "paused".into(),
            limit: 100,
            ..Default::default()
        });
        assert_eq!(paused.matched, 6);
        let invalid = catalog.page(&RowQuery {
            state: "invalid".into(),
            limit: 100,
            ..Default::default()
        });
        assert_eq!(invalid.rows[0].id, "broken");

        // Newest first among the active ones (job-00, written last, is paused).
        let newest = catalog.page(&RowQuery {
            sort: RowSort::Updated,
            descending: true,
            state: "active".into(),
            limit: 2,
            ..Default::default()
        });
        let ids: Vec<_> = newest.rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["job-01", "job-02"]);
        let last = catalog.page(&RowQuery {
            descending: true,
            limit: 1,
            ..Default::default()
        });
        assert_eq!(last.rows[0].id, "job-29");
    }

    #[test]
    fn rows_added_in_any_order_list_in_id_order_and_deleted_keys_leave_the_list() {
        let catalog = synced();
        let now = Utc::now();
        // A scrambled order of 500 ids (7 is coprime with 500).
        let ids: Vec<String> = (0..500)
            .map(|i| format!("job-{:03}", (i * 7) % 500))
            .collect();
        for (n, id) in ids.iter().enumerate() {
            catalog.note_put(id, n as u64 + 1, &job(id, ""), now);
        }
        let all = |catalog: &JobCatalog| -> Vec<String> {
            catalog
                .page(&RowQuery {
                    limit: 1_000,
                    ..Default::default()
                })
                .rows
                .into_iter()
                .map(|r| r.id)
                .collect()
        };
        let mut expected: Vec<String> = (0..500).map(|i| format!("job-{i:03}")).collect();
        assert_eq!(all(&catalog), expected);
        // Rows added after a listing merge into the order.
        catalog.note_put("aaa", 600, &job("aaa", ""), now);
        catalog.note_put("job-2500", 601, &job("job-2500", ""), now);
        catalog.note_delete("job-100", 602);
        expected.retain(|id| id != "job-100");
        expected.insert(0, "aaa".into());
        expected.push("job-2500".into());
        expected.sort();
        assert_eq!(all(&catalog), expected);
        assert_eq!(catalog.lookup("job-100"), Some((false, 501)));
        // Back again under a newer revision, not under an older one.
        catalog.note_put("job-100", 603, &job("job-100", r#","paused":true"#), now);
        catalog.note_delete("job-100", 550);
        let row = catalog
            .page(&RowQuery {
                text: "job-100".into(),
                limit: 10,
                ..Default::default()
            })
            .rows;
        assert_eq!(row.len(), 1);
        assert_eq!((row[0].revision, row[0].paused), (603, true));
        assert_eq!(row[0].schedule, "0 * * * *");
        assert_eq!(row[0].target_type, "shell");
        assert_eq!(std::mem::size_of::<Row>(), 40);
        // A row's zone and target type are kept as one pair.
        catalog.note_put(
            "zoned",
            604,
            &job("zoned", r#","timezone":"Europe/Berlin""#),
            now,
        );
        let zoned = catalog
            .page(&RowQuery {
                text: "zoned".into(),
                limit: 10,
                ..Default::default()
            })
            .rows;
        assert_eq!(
            zoned
                .iter()
                .map(|r| (r.id.as_str(), r.timezone.as_str(), r.target_type.as_str()))
                .collect::<Vec<_>>(),
            [("zoned", "Europe/Berlin", "shell")]
        );
        assert_eq!(
            catalog
                .page(&RowQuery {
                    text: "job-10".into(),
                    limit: 1,
                    ..Default::default()
                })
                .rows[0]
                .timezone,
            ""
        );
    }
}
