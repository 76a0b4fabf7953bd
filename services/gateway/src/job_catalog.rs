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
use async_nats::jetstream::kv::{self, Operation};
use chrono::{DateTime, Utc};
use futures::TryStreamExt as _;
use jetcron_core::job::{parse_written_with, ChainLink, ChainOn};
use jetcron_core::schedule_lines::SharedLines;
use jetcron_core::shared_text::SharedTexts;
use jetcron_io::bucket_follow::{self, BucketView};
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
        if let Ok(job) = parse_written_with(value, Some(key), at, &mut |line| lines.parse(line)) {
            let spec = job.spec;
            return Self {
                id: key.to_string(),
                revision,
                updated_at: at,
                valid: true,
                target_type: spec.target.kind().to_string(),
                schedule: spec.schedule.clone().unwrap_or_default(),
                timezone: spec.timezone.unwrap_or_default(),
                paused: spec.paused,
                labels: spec.labels,
                after: spec.after,
                description: spec
                    .description
                    .unwrap_or_default()
                    .chars()
                    .take(DESCRIPTION_CHARS)
                    .collect(),
            };
        }
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
        match (self.valid, self.paused) {
            (false, _) => "invalid",
            (true, true) => "paused",
            (true, false) => "active",
        }
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

/// A row as the catalog keeps it, for a million jobs: no duplicate of the
/// id (the map's key) or of the revision (the slot's), the schedule, zone
/// and target type shared between rows, and what most jobs leave empty
/// (description, labels, parents) behind one pointer.
#[derive(Debug)]
struct CompactRow {
    updated_at: DateTime<Utc>,
    valid: bool,
    paused: bool,
    schedule: Arc<str>,
    timezone: Arc<str>,
    target_type: Arc<str>,
    rare: Option<Box<RareRow>>,
}

/// The parts of a row most jobs leave empty.
#[derive(Debug, Default)]
struct RareRow {
    description: Box<str>,
    labels: Box<[(Box<str>, Box<str>)]>,
    after: Box<[(Box<str>, ChainOn)]>,
}

impl CompactRow {
    fn of(row: JobRow, texts: &mut SharedTexts) -> Self {
        let rare = RareRow {
            description: row.description.into(),
            labels: row
                .labels
                .into_iter()
                .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
                .collect(),
            after: row
                .after
                .into_iter()
                .map(|l| (l.job.into_boxed_str(), l.on))
                .collect(),
        };
        let empty = rare.description.is_empty() && rare.labels.is_empty() && rare.after.is_empty();
        Self {
            updated_at: row.updated_at,
            valid: row.valid,
            paused: row.paused,
            schedule: texts.share(&row.schedule),
            timezone: texts.share(&row.timezone),
            target_type: texts.share(&row.target_type),
            rare: (!empty).then(|| Box::new(rare)),
        }
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

    fn row(&self, id: &str, revision: u64) -> JobRow {
        JobRow {
            id: id.to_string(),
            revision,
            updated_at: self.updated_at,
            valid: self.valid,
            schedule: self.schedule.to_string(),
            timezone: self.timezone.to_string(),
            paused: self.paused,
            labels: self
                .labels()
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            target_type: self.target_type.to_string(),
            description: self.description().to_string(),
            after: self
                .after()
                .iter()
                .map(|(job, on)| ChainLink {
                    job: job.to_string(),
                    on: *on,
                })
                .collect(),
        }
    }

    fn state(&self) -> &'static str {
        match (self.valid, self.paused) {
            (false, _) => "invalid",
            (true, true) => "paused",
            (true, false) => "active",
        }
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels()
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }
}

/// The latest known revision of a key and its row (none: a delete marker,
/// kept so a late put of an older revision is ignored).
#[derive(Debug)]
struct Slot {
    revision: u64,
    row: Option<CompactRow>,
}

/// The catalog, shared by the watch and the readers.
#[derive(Clone, Default)]
pub struct JobCatalog {
    inner: Arc<RwLock<CatalogState>>,
    /// The process's parsed schedule lines (a row keeps only the text).
    lines: SharedLines,
}

#[derive(Default)]
struct CatalogState {
    /// Every key seen, in id order (the table's default order).
    slots: BTreeMap<Box<str>, Slot>,
    /// Keys that hold a job.
    live: usize,
    synced: bool,
    texts: SharedTexts,
}

impl CatalogState {
    fn record(&mut self, key: &str, revision: u64, row: Option<JobRow>) {
        let row = row.map(|row| CompactRow::of(row, &mut self.texts));
        let now_live = row.is_some();
        match self.slots.get_mut(key) {
            Some(slot) if slot.revision >= revision => {}
            Some(slot) => {
                let was_live = slot.row.is_some();
                *slot = Slot { revision, row };
                match (was_live, now_live) {
                    (false, true) => self.live += 1,
                    (true, false) => self.live -= 1,
                    _ => {}
                }
            }
            None => {
                self.slots.insert(key.into(), Slot { revision, row });
                if now_live {
                    self.live += 1;
                }
            }
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
        state.synced.then(|| {
            let exists = state.slots.get(key).is_some_and(|s| s.row.is_some());
            (exists, state.live)
        })
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
            .slots
            .get(id)
            .and_then(|s| s.row.as_ref())
            .map(|row| row.after().iter().map(|(job, _)| job.to_string()).collect())
            .unwrap_or_default()
    }

    /// Where `id` stands in chains: its parents (each with its state, or
    /// `missing`) and the jobs that name it. Finding the children walks
    /// every row: a job page's cost, not a table's.
    pub fn chain_of(&self, id: &str) -> ChainView {
        let state = self.read();
        let state_of = |job: &str| {
            state
                .slots
                .get(job)
                .and_then(|s| s.row.as_ref())
                .map_or("missing", CompactRow::state)
        };
        let parents = state
            .slots
            .get(id)
            .and_then(|s| s.row.as_ref())
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
        let children = state
            .slots
            .iter()
            .filter_map(|(child, slot)| {
                let row = slot.row.as_ref()?;
                let (_, on) = row.after().iter().find(|(job, _)| &**job == id)?;
                Some(ChainPeer {
                    job: child.to_string(),
                    on: *on,
                    state: row.state(),
                })
            })
            .collect();
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
        let state = self.read();
        let needle = query.text.to_lowercase();
        let matches = |id: &str, row: &CompactRow| {
            (query.state.is_empty() || row.state() == query.state)
                && query
                    .labels
                    .iter()
                    .all(|(k, v)| row.label(k) == Some(v.as_str()))
                && (needle.is_empty()
                    || [id, row.description(), &row.schedule, &row.target_type]
                        .iter()
                        .any(|f| f.to_lowercase().contains(&needle)))
        };
        let mut all: Vec<(&str, &CompactRow, u64)> = state
            .slots
            .iter()
            .filter_map(|(id, slot)| Some((&**id, slot.row.as_ref()?, slot.revision)))
            .filter(|(id, row, _)| matches(id, row))
            .collect();
        // Already in id order; other columns sort with the id breaking ties.
        match query.sort {
            RowSort::Id => {}
            RowSort::Updated => all.sort_by_key(|(_, r, _)| r.updated_at),
            RowSort::State => all.sort_by_key(|(_, r, _)| r.state()),
            RowSort::Schedule => all.sort_by(|(_, a, _), (_, b, _)| a.schedule.cmp(&b.schedule)),
            RowSort::Timezone => all.sort_by(|(_, a, _), (_, b, _)| a.timezone.cmp(&b.timezone)),
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
                .map(|(id, row, revision)| row.row(id, revision))
                .collect(),
        }
    }

    fn mark_synced(&self) {
        self.write().synced = true;
    }

    /// Follow `bucket` until `shutdown`, reopening the watch when it breaks.
    pub async fn follow(self, bucket: kv::Store, shutdown: CancellationToken) {
        bucket_follow::follow(&bucket, &self, "job catalog", &shutdown).await;
    }
}

impl BucketView for JobCatalog {
    fn apply(&self, entry: &kv::Entry) {
        let row = (entry.operation == Operation::Put).then(|| {
            JobRow::from_value(
                &entry.key,
                entry.revision,
                &entry.value,
                entry.created,
                &self.lines,
            )
        });
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
}
