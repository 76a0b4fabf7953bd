//! `GET /ui/jobs`: every job in a table, filtered by label, text and state,
//! sorted by a column, 50 to a page.
//!
//! Rows come from the [`crate::jobs::catalog`] in memory; only the page's rows
//! are read further: their entries from the bucket (next fire) and their run
//! figures ([`crate::runs::figures::row_figures`]), each in one round; the
//! figures only glance at ClickHouse, so a slow one leaves them out.

use std::collections::BTreeMap;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use jetcron_core::access::Role;
use jetcron_core::job::ValidJob;
use serde::Deserialize;

use super::charts;
use super::namespace_choice;
use super::pages::{duration_ms, render, status_class, when, Frame};
use super::viewer::{url_escape, ConsoleError, Viewer};
use crate::jobs::catalog::{JobRow, RowQuery, RowSort};
use crate::runs::figures::{self, GetRowFigures, RowFigures};
use crate::sql::reads::Patience;
use crate::GatewayState;

/// Rows per page.
pub const PAGE_SIZE: usize = 50;
/// KV reads in flight for one page.
const READS_IN_FLIGHT: usize = 16;

#[derive(Debug, Default, Deserialize)]
pub struct JobsQuery {
    /// Text in the id, description, schedule or target type.
    #[serde(default)]
    q: String,
    /// Label selector, `key=value` pairs separated by commas.
    #[serde(default)]
    labels: String,
    /// `active`, `paused`, `invalid`, or empty.
    #[serde(default)]
    state: String,
    #[serde(default)]
    sort: String,
    /// `desc` for descending.
    #[serde(default)]
    dir: String,
    /// One namespace's jobs (a team's session: always its own).
    #[serde(default)]
    namespace: String,
    /// 1-based page number.
    page: Option<usize>,
    done: Option<String>,
}

/// One row as the template shows it.
pub struct Row {
    pub id: String,
    pub link: String,
    pub schedule: String,
    pub words: String,
    pub timezone: String,
    pub state: &'static str,
    pub updated: String,
    pub next_fire: String,
    pub last_status: String,
    pub last_class: &'static str,
    pub last_when: String,
    pub last_duration: String,
    pub last_link: String,
    pub succeeded_24h: u64,
    pub failed_24h: u64,
    pub sparkline: String,
    pub labels: Vec<(String, String)>,
}

/// A column header: its label, the link that sorts by it, and its
/// `aria-sort` value.
pub struct Column {
    pub label: &'static str,
    pub link: String,
    pub aria_sort: &'static str,
}

#[derive(Template)]
#[template(path = "console/jobs.html")]
pub struct JobsPage {
    pub frame: Frame,
    pub q: String,
    pub labels: String,
    pub state: String,
    /// The namespace shown (empty: all).
    pub namespace: String,
    /// The namespace can be chosen (not for a team's session).
    pub chooses_namespace: bool,
    /// The namespaces to choose from (those of the jobs held).
    pub namespaces: Vec<String>,
    pub rows: Vec<Row>,
    pub columns: Vec<Column>,
    pub matched: usize,
    pub total: usize,
    pub first: usize,
    pub last: usize,
    pub prev_link: String,
    pub next_link: String,
    pub loading: bool,
    pub figures_error: String,
    pub problem: String,
}

/// A label selector typed as `key=value` pairs separated by commas.
pub(super) fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("{pair:?} is not key=value"))
        })
        .collect()
}

/// The table as the query asks for it: filters, sort and page number.
struct TableView {
    /// The text filter, trimmed.
    text: String,
    /// The label filter as typed.
    labels_text: String,
    labels: BTreeMap<String, String>,
    /// Why the label filter was ignored (empty when it was not).
    problem: String,
    /// `active`, `paused`, `invalid`, or empty.
    state: String,
    /// One namespace, or empty for all.
    namespace: String,
    sort: RowSort,
    descending: bool,
    /// 1-based.
    page_number: usize,
}

impl TableView {
    /// The table `query` asks for; `own` is the one namespace a team's
    /// session sees, whatever the query says.
    fn of(query: &JobsQuery, shown: Option<&str>) -> Self {
        let (labels, problem) = match parse_labels(&query.labels) {
            Ok(labels) => (labels, String::new()),
            Err(why) => (BTreeMap::new(), format!("label filter {why}")),
        };
        Self {
            text: query.q.trim().to_string(),
            labels_text: query.labels.clone(),
            labels,
            problem,
            state: match query.state.as_str() {
                s @ ("active" | "paused" | "invalid") => s.to_string(),
                _ => String::new(),
            },
            namespace: shown.unwrap_or_default().to_string(),
            sort: RowSort::parse(&query.sort).unwrap_or_default(),
            descending: query.dir == "desc",
            page_number: query.page.unwrap_or(1).max(1),
        }
    }

    /// Rows before this page.
    fn offset(&self) -> usize {
        (self.page_number - 1) * PAGE_SIZE
    }

    fn row_query(&self) -> RowQuery {
        RowQuery {
            namespace: (!self.namespace.is_empty()).then(|| self.namespace.clone()),
            labels: self.labels.clone(),
            text: self.text.clone(),
            state: self.state.clone(),
            sort: self.sort,
            descending: self.descending,
            offset: self.offset(),
            limit: PAGE_SIZE,
        }
    }

    /// The link to this table sorted by `sort` and showing page `page`.
    fn link(&self, sort: RowSort, descending: bool, page: usize) -> String {
        let mut url = format!(
            "/ui/jobs?q={}&labels={}&state={}&namespace={}&sort={}",
            url_escape(&self.text),
            url_escape(&self.labels_text),
            url_escape(&self.state),
            url_escape(&self.namespace),
            sort.name()
        );
        if descending {
            url.push_str("&dir=desc");
        }
        if page > 1 {
            url.push_str(&format!("&page={page}"));
        }
        url
    }

    /// The sortable column headers; a click on the sorted one reverses it.
    fn columns(&self) -> Vec<Column> {
        [
            ("Job", RowSort::Id),
            ("Schedule", RowSort::Schedule),
            ("Zone", RowSort::Timezone),
            ("State", RowSort::State),
            ("Changed", RowSort::Updated),
        ]
        .into_iter()
        .map(|(label, column)| Column {
            label,
            link: self.link(column, column == self.sort && !self.descending, 1),
            aria_sort: match (column == self.sort, self.descending) {
                (false, _) => "none",
                (true, false) => "ascending",
                (true, true) => "descending",
            },
        })
        .collect()
    }

    /// The links to the pages before and after this one (empty at the ends).
    fn page_links(&self, shown: usize, matched: usize) -> (String, String) {
        let prev = match self.page_number > 1 {
            true => self.link(self.sort, self.descending, self.page_number - 1),
            false => String::new(),
        };
        let next = match self.offset() + shown < matched {
            true => self.link(self.sort, self.descending, self.page_number + 1),
            false => String::new(),
        };
        (prev, next)
    }
}

pub async fn show(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Query(query): Query<JobsQuery>,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::of(&state, &headers).await;
    viewer.may_read("/ui/jobs")?;
    let caller = viewer.caller();
    let chosen = namespace_choice::choose(&caller.grants, Role::Viewer, &query.namespace)?;
    let table = TableView::of(&query, chosen.shown());
    let page = state.catalog.page(&table.row_query());
    let now = state.clock.now();
    let valid = valid_jobs(&state, &page.rows).await;
    let request = GetRowFigures {
        jobs: page.rows.iter().map(|r| r.id.clone()).collect(),
        patience: Patience::Glance,
    };
    let (figures, figures_error) = match figures::row_figures(&state, request).await {
        Ok(f) => (f, String::new()),
        Err(e) => (
            RowFigures::default(),
            format!("Run figures are unavailable: {e}"),
        ),
    };
    let rows = page
        .rows
        .iter()
        .map(|row| {
            let valid = valid.get(&row.id).and_then(Option::as_ref);
            table_row(row, valid, &figures, now)
        })
        .collect();
    let first = table.offset();
    let (prev_link, next_link) = table.page_links(page.rows.len(), page.matched);
    let page_html = JobsPage {
        frame: match chosen.shown() {
            Some(namespace) => viewer.frame_for("Jobs", namespace),
            None => viewer.frame("Jobs"),
        }
        .with_done(query.done.as_deref()),
        q: query.q.clone(),
        labels: query.labels.clone(),
        state: table.state.clone(),
        namespace: table.namespace.clone(),
        chooses_namespace: chosen.picks(),
        namespaces: chosen.offered(|| state.catalog.namespaces()),
        columns: table.columns(),
        matched: page.matched,
        total: page.total,
        first: (first + 1).min(page.matched),
        last: (first + page.rows.len()).min(page.matched),
        prev_link,
        next_link,
        loading: !state.catalog.synced(),
        rows,
        figures_error,
        problem: table.problem,
    };
    Ok(render(&page_html).into_response())
}

/// The valid definitions of `rows` from the bucket (for their next fires),
/// [`READS_IN_FLIGHT`] at a time; `None` for one that is invalid or gone.
async fn valid_jobs(
    state: &Arc<GatewayState>,
    rows: &[JobRow],
) -> BTreeMap<String, Option<ValidJob>> {
    let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
    futures::stream::iter(ids)
        .map(|id| {
            let state = state.clone();
            async move {
                let valid = state
                    .jobs
                    .get(&id)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|(_, v)| v);
                (id, valid)
            }
        })
        .buffered(READS_IN_FLIGHT)
        .collect()
        .await
}

/// One row of the table: the catalog's `row`, its definition when valid,
/// and its run figures.
fn table_row(
    row: &JobRow,
    valid: Option<&ValidJob>,
    figures: &RowFigures,
    now: DateTime<Utc>,
) -> Row {
    let last = figures.last.get(&row.id);
    let day = figures.day.get(&row.id).cloned().unwrap_or_default();
    let (succeeded_24h, failed_24h) = day.totals();
    Row {
        id: row.id.clone(),
        link: format!("/ui/jobs/{}", url_escape(&row.id)),
        schedule: row.schedule.clone(),
        words: valid
            .map(|job| schedule_words(job, row))
            .unwrap_or_default(),
        timezone: if row.timezone.is_empty() {
            "UTC".into()
        } else {
            row.timezone.clone()
        },
        state: row.state(),
        updated: when(row.updated_at),
        next_fire: next_fire(valid, now),
        last_status: last.map(|l| l.status.clone()).unwrap_or_default(),
        last_class: last.map_or("", |l| status_class(&l.status)),
        last_when: last
            .and_then(|l| DateTime::from_timestamp_millis(l.scheduled_ms))
            .map(when)
            .unwrap_or_default(),
        last_duration: last
            .filter(|l| l.duration_ms > 0)
            .map(|l| duration_ms(l.duration_ms))
            .unwrap_or_default(),
        last_link: last
            .map(|l| format!("/ui/runs/{}", l.run_id))
            .unwrap_or_default(),
        succeeded_24h,
        failed_24h,
        sparkline: charts::sparkline(&day),
        labels: row
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

/// The next fire of a valid job (`paused` for a paused one), `—` otherwise.
fn next_fire(valid: Option<&ValidJob>, now: DateTime<Utc>) -> String {
    match valid {
        Some(job) if job.spec.paused => "paused".to_string(),
        Some(job) => job
            .next_scheduled(now)
            .map(when)
            .unwrap_or_else(|| "none".into()),
        None => "—".into(),
    }
}

/// When a valid job runs, in words: its schedule line, and the parents it
/// runs after.
fn schedule_words(job: &ValidJob, row: &JobRow) -> String {
    let parents: Vec<&str> = row.after.iter().map(|l| l.job.as_str()).collect();
    let timed = jetcron_core::schedule_preview::describe(
        job.spec.schedule_line(),
        &job.schedule,
        job.timezone,
        &[],
    )
    .description;
    match (parents.is_empty(), &job.spec.schedule) {
        (true, _) => timed,
        (false, None) => format!("after {}", parents.join(", ")),
        (false, Some(_)) => format!("{timed}; and after {}", parents.join(", ")),
    }
}
