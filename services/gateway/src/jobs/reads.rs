//! The reads of one job built around its definition: the job with its next
//! fires, chains and last day's figures ([`job_detail`], `GET /v1/jobs/{id}`)
//! and its revisions with its recent rejections ([`job_history`], `GET
//! /v1/jobs/{id}/history`). Each is one function from a typed request to a
//! typed answer or an [`ApiError`]; the HTTP handlers and the console's job
//! page render the same answers.
//!
//! The definition comes from the bucket, the history parts from ClickHouse,
//! which these reads only glance at ([`Patience::Glance`]): a slow or absent
//! ClickHouse leaves those parts out, and the answer says why, rather than
//! holding or hiding the definition.

use chrono::Duration;
use jetcron_core::api::ApiError;
use jetcron_core::job::validate_id;
use jetcron_core::run_summary::RunSummary;
use jetcron_core::schedule_preview::{self, Preview};
use jetcron_core::time_format::rfc3339_millis;
use serde::{Deserialize, Serialize};

use crate::jobs::catalog::{ChainPeer, ChainView};
use crate::jobs::rejections::Rejection;
use crate::jobs::stored::{Revision, StoredJob};
use crate::runs::stats;
use crate::sql::reads::Patience;
use crate::GatewayState;

/// How many upcoming fire times a job answer lists by default.
pub const NEXT_FIRES: usize = 5;
/// How many rejections a history answer lists.
const HISTORY_REJECTIONS: u32 = 20;

/// A job, its next `next` fires (default [`NEXT_FIRES`]).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct GetJobDetail {
    #[serde(default)]
    pub id: String,
    pub next: Option<usize>,
}

/// The answer of [`job_detail`]: the definition, its next fires (a paused
/// job's are the ones a resume would run, and say so) with the preview's
/// wall times and DST notes, the last run and the last day's figures. The
/// run figures are a convenience: a slow or absent ClickHouse leaves them
/// empty rather than holding or hiding the definition, and
/// `history_unavailable` says why.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct JobDetail {
    pub ok: bool,
    pub job: StoredJob,
    pub next_fires: Vec<String>,
    pub next_fires_if_resumed: bool,
    pub schedule_preview: Option<Preview>,
    pub last_run: Option<RunSummary>,
    pub success_rate_24h: Option<f64>,
    pub runs_24h: u64,
    /// Set when the run figures (`last_run`, `success_rate_24h`,
    /// `runs_24h`) are left out: why ClickHouse gave none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_unavailable: Option<String>,
    /// The jobs this one runs after (`after`), each with its state: a
    /// `paused` or `missing` parent starts nothing.
    pub parents: Vec<ChainPeer>,
    /// The jobs that run after this one.
    pub children: Vec<ChainPeer>,
}

impl JobDetail {
    /// This answer with the definition's secrets hidden.
    pub fn redacted(mut self) -> Self {
        self.job = self.job.redacted();
        self
    }
}

pub async fn job_detail(
    state: &GatewayState,
    request: GetJobDetail,
) -> Result<JobDetail, ApiError> {
    let count = request.next.unwrap_or(NEXT_FIRES);
    if !(1..=schedule_preview::MAX_COUNT).contains(&count) {
        return Err(ApiError::invalid_field(
            "next",
            format!("must be 1 to {}, got {count}", schedule_preview::MAX_COUNT),
        ));
    }
    let id = request.id;
    validate_id(&id).map_err(|p| ApiError::invalid_job(vec![p]))?;
    let (stored, valid) = state
        .jobs
        .get(&id)
        .await
        .map_err(ApiError::unavailable)?
        .ok_or_else(|| ApiError::not_found("id", format!("no job {id:?}")))?;
    let now = state.clock.now();
    let (next_fires, schedule_preview, paused) = match &valid {
        Some(job) => {
            let fires = job.upcoming(now, count);
            let preview = schedule_preview::describe(
                job.spec.schedule_line(),
                &job.schedule,
                job.timezone,
                &fires,
            );
            (
                fires.into_iter().map(rfc3339_millis).collect(),
                Some(preview),
                job.spec.paused,
            )
        }
        None => (Vec::new(), None, false),
    };
    let history = state.runs.with(Patience::Glance);
    let (last_run, last_24h) = tokio::join!(
        history.runs_of_job(&id, 1, None),
        stats::run_stats(history.reads(), now - Duration::hours(24), now, Some(&id)),
    );
    let history_unavailable = match (&last_run, &last_24h) {
        (Err(e), _) | (_, Err(e)) => Some(e.to_string()),
        _ => None,
    };
    let last_run = last_run.ok().and_then(|(mut runs, _)| runs.pop());
    let last_24h = last_24h.ok().and_then(|mut by_job| by_job.remove(&id));
    let ChainView { parents, children } = state.catalog.chain_of(&id);
    Ok(JobDetail {
        ok: true,
        job: stored,
        next_fires,
        next_fires_if_resumed: paused,
        schedule_preview,
        last_run,
        success_rate_24h: last_24h.as_ref().and_then(|s| s.success_rate),
        runs_24h: last_24h.as_ref().map_or(0, |s| s.runs),
        history_unavailable,
        parents,
        children,
    })
}

/// The answer of [`job_history`]: every revision the bucket keeps, oldest
/// first, and the newest `job.rejected` events naming the id (left out, with
/// the reason, when ClickHouse is away).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct JobHistory {
    pub ok: bool,
    pub id: String,
    pub revisions: Vec<Revision>,
    pub rejections: Vec<Rejection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejections_unavailable: Option<String>,
}

impl JobHistory {
    /// This answer with every revision's secrets hidden.
    pub fn redacted(mut self) -> Self {
        self.revisions = self.revisions.into_iter().map(Revision::redacted).collect();
        self
    }
}

pub async fn job_history(state: &GatewayState, id: String) -> Result<JobHistory, ApiError> {
    validate_id(&id).map_err(|p| ApiError::invalid_field("id", p.message))?;
    let revisions = state
        .jobs
        .history(&id)
        .await
        .map_err(ApiError::unavailable)?;
    let glance = state.runs.with(Patience::Glance);
    let (rejections, rejections_unavailable) =
        match glance.rejections(Some(&id), HISTORY_REJECTIONS).await {
            Ok(r) => (r, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
    if revisions.is_empty() && rejections.is_empty() && rejections_unavailable.is_none() {
        return Err(ApiError::not_found(
            "id",
            format!("no job {id:?} and no history of one"),
        ));
    }
    Ok(JobHistory {
        ok: true,
        id,
        revisions,
        rejections,
        rejections_unavailable,
    })
}
