//! What travels between the services.
//!
//! A [`DueEvent`] says "job X is due for scheduled time T": the ticker publishes
//! it on `jetcron.due.<pool>.<job>` with `Nats-Msg-Id` = its run id, so JetStream
//! drops a second publish of the same fire. It carries the job definition as it
//! was when the fire was decided, so executors need no other lookup and a fire
//! already emitted still runs after its job is edited or deleted.
//!
//! A [`RunEvent`] records one step of a run on `jetcron.runs.<job>.<kind>`; the
//! projector stores them in ClickHouse. Its `event_id` is unique per
//! (run, attempt, kind), which makes both its publish (as `Nats-Msg-Id`) and its
//! projection idempotent.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::job::JobSpec;
use crate::time_format::{self, rfc3339_millis};

/// Stable identity of one run: derived from (job id, scheduled time), so every
/// replica that decides the same fire names it the same.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct RunId(pub String);

/// Namespace of run ids (a fixed, random UUID).
const RUN_ID_NAMESPACE: Uuid = Uuid::from_u128(0x6a1c_3f0e_9b7d_4e52_8c1a_5d2f_7e90_b3c4);

impl RunId {
    /// The run of the scheduled fire of `job_id` at `scheduled_at`.
    pub fn for_fire(job_id: &str, scheduled_at: DateTime<Utc>) -> Self {
        let uuid = Self::fire_uuid(job_id, scheduled_at);
        RunId(
            uuid.hyphenated()
                .encode_lower(&mut Uuid::encode_buffer())
                .to_owned(),
        )
    }

    /// The UUID [`RunId::for_fire`] spells out, for those who need its
    /// bits (a fire's jitter) rather than its text.
    pub fn fire_uuid(job_id: &str, scheduled_at: DateTime<Utc>) -> Uuid {
        let mut name = String::with_capacity(job_id.len() + 32);
        name.push_str(job_id);
        name.push('\n');
        time_format::push_rfc3339_millis(&mut name, scheduled_at);
        Uuid::new_v5(&RUN_ID_NAMESPACE, name.as_bytes())
    }

    /// A run requested by hand at `requested_at`; never equal to a scheduled fire's id.
    pub fn for_manual(job_id: &str, requested_at: DateTime<Utc>) -> Self {
        let name = format!("{job_id}\n{}\nmanual", rfc3339_millis(requested_at));
        RunId(Uuid::new_v5(&RUN_ID_NAMESPACE, name.as_bytes()).to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a run exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The schedule said so.
    Schedule,
    /// Someone asked for it now.
    Manual,
    /// Someone asked to replay past scheduled times.
    Backfill,
    /// A parent job's run ended (the job's `after`).
    Chain,
}

impl Trigger {
    pub const ALL: [Trigger; 4] = [
        Trigger::Schedule,
        Trigger::Manual,
        Trigger::Backfill,
        Trigger::Chain,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Manual => "manual",
            Trigger::Backfill => "backfill",
            Trigger::Chain => "chain",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

/// "Job X is due for scheduled time T."
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DueEvent {
    pub run_id: RunId,
    pub job_id: String,
    #[schemars(with = "String")]
    #[serde(with = "time_format::millis")]
    pub scheduled_at: DateTime<Utc>,
    pub trigger: Trigger,
    pub pool: String,
    /// KV revision of the definition this fire was decided from.
    pub job_revision: u64,
    /// The definition itself.
    pub job: JobSpec,
    /// Which part of a sharded run this is (0-based). Absent on the fire
    /// itself: the executor that receives it splits it into `job.shards` parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    /// The parent run whose end started this one (a chained run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRun>,
}

/// The run of a parent job whose end started a chained run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ParentRun {
    pub job_id: String,
    pub run_id: RunId,
    /// The parent run's scheduled time.
    #[schemars(with = "String")]
    #[serde(with = "time_format::millis")]
    pub scheduled_at: DateTime<Utc>,
    /// How it ended: `succeeded`, `failed`, `timed_out` or `killed`.
    pub status: RunEventKind,
}

impl DueEvent {
    /// `Nats-Msg-Id` of this event: the run id, and the shard index for a part.
    pub fn msg_id(&self) -> String {
        due_msg_id(&self.run_id, self.shard)
    }
}

/// `Nats-Msg-Id` of a due event: `<run_id>` or `<run_id>/<shard>`.
pub fn due_msg_id(run_id: &RunId, shard: Option<u32>) -> String {
    let mut id = String::with_capacity(run_id.0.len() + 4);
    push_due_msg_id(&mut id, run_id, shard);
    id
}

/// Append [`due_msg_id`] to `out` (run event ids start with it).
fn push_due_msg_id(out: &mut String, run_id: &RunId, shard: Option<u32>) {
    use std::fmt::Write as _;
    out.push_str(&run_id.0);
    if let Some(k) = shard {
        let _ = write!(out, "/{k}");
    }
}

/// The job definition a [`DueEventRef`] carries: the parsed spec, or its
/// JSON encoded once before (the ticker keeps the definitions of jobs that
/// fire soon encoded: serde's escaping of the same spec on every fire showed
/// in its profile).
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(untagged)]
pub enum JobRef<'a> {
    Spec(&'a JobSpec),
    Encoded(&'a serde_json::value::RawValue),
}

/// A [`DueEvent`] borrowed from its parts: the ticker publishes tens of
/// thousands a second and this serializes the same JSON without copying the
/// job definition.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DueEventRef<'a> {
    pub run_id: &'a RunId,
    pub job_id: &'a str,
    #[serde(with = "time_format::millis")]
    pub scheduled_at: DateTime<Utc>,
    pub trigger: Trigger,
    pub pool: &'a str,
    pub job_revision: u64,
    pub job: JobRef<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<&'a ParentRun>,
}

impl DueEvent {
    pub fn as_ref(&self) -> DueEventRef<'_> {
        DueEventRef {
            run_id: &self.run_id,
            job_id: &self.job_id,
            scheduled_at: self.scheduled_at,
            trigger: self.trigger,
            pool: &self.pool,
            job_revision: self.job_revision,
            job: JobRef::Spec(&self.job),
            shard: self.shard,
            parent: self.parent.as_ref(),
        }
    }
}

/// One step of a run.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RunEventKind {
    /// An attempt began on an executor: the run is `running`.
    Started,
    /// The attempt failed (or timed out, or was interrupted) and another one
    /// is scheduled after a delay; `outcome` says how it ended.
    Retrying,
    /// The run ended well.
    Succeeded,
    /// The last attempt failed.
    Failed,
    /// The last attempt ran past the job's timeout.
    TimedOut,
    /// Someone (or a `replace` fire) killed the run; it is not retried.
    Killed,
    /// The fire was declined (`concurrency: forbid` while the previous run
    /// was going); nothing ran.
    Skipped,
    /// The failure notification was delivered.
    Notified,
    /// The failure notification could not be delivered after every try.
    NotifyFailed,
}

impl RunEventKind {
    pub const ALL: [RunEventKind; 9] = [
        RunEventKind::Started,
        RunEventKind::Retrying,
        RunEventKind::Succeeded,
        RunEventKind::Failed,
        RunEventKind::TimedOut,
        RunEventKind::Killed,
        RunEventKind::Skipped,
        RunEventKind::Notified,
        RunEventKind::NotifyFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunEventKind::Started => "started",
            RunEventKind::Retrying => "retrying",
            RunEventKind::Succeeded => "succeeded",
            RunEventKind::Failed => "failed",
            RunEventKind::TimedOut => "timed_out",
            RunEventKind::Killed => "killed",
            RunEventKind::Skipped => "skipped",
            RunEventKind::Notified => "notified",
            RunEventKind::NotifyFailed => "notify_failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// Order of events within one attempt: `started` first, then its outcome,
    /// then what the notifier said.
    pub fn rank_in_attempt(self) -> u8 {
        match self {
            RunEventKind::Started => 0,
            RunEventKind::Notified | RunEventKind::NotifyFailed => 2,
            _ => 1,
        }
    }

    /// Whether the run (or its shard) is over after this event.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunEventKind::Succeeded
                | RunEventKind::Failed
                | RunEventKind::TimedOut
                | RunEventKind::Killed
                | RunEventKind::Skipped
        )
    }

    /// Whether the event is about the notification rather than the run's state.
    pub fn is_notification(self) -> bool {
        matches!(self, RunEventKind::Notified | RunEventKind::NotifyFailed)
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    Succeeded,
    Failed,
    TimedOut,
    Killed,
    /// The executor shut down before the attempt finished and handed it back.
    Interrupted,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::TimedOut => "timed_out",
            AttemptOutcome::Killed => "killed",
            AttemptOutcome::Interrupted => "interrupted",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            AttemptOutcome::Succeeded,
            AttemptOutcome::Failed,
            AttemptOutcome::TimedOut,
            AttemptOutcome::Killed,
            AttemptOutcome::Interrupted,
        ]
        .into_iter()
        .find(|o| o.as_str() == text)
    }
}

/// One step of a run, as published on `jetcron.runs.<job>.<kind>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunEvent {
    /// `<run_id>:<attempt>:<kind>` (`<run_id>/<shard>:<attempt>:<kind>` for a
    /// shard), unique per step; the dedup key end to end.
    pub event_id: String,
    pub run_id: RunId,
    pub job_id: String,
    pub kind: RunEventKind,
    pub trigger: Trigger,
    #[schemars(with = "String")]
    #[serde(with = "time_format::millis")]
    pub scheduled_at: DateTime<Utc>,
    /// 1 for the first attempt.
    pub attempt: u32,
    pub max_attempts: u32,
    pub executor_id: String,
    pub target_type: String,
    pub pool: String,
    /// When this event happened.
    #[schemars(with = "String")]
    #[serde(with = "time_format::millis")]
    pub at: DateTime<Utc>,
    /// When the attempt started (on outcome events).
    #[schemars(with = "Option<String>")]
    #[serde(
        default,
        with = "time_format::millis_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub started_at: Option<DateTime<Utc>>,
    #[schemars(with = "Option<String>")]
    #[serde(
        default,
        with = "time_format::millis_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub finished_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
    /// HTTP status of an `http` target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<i32>,
    /// Exit status of a `shell` target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Output (response body, reply, stdout+stderr), truncated to the executor's limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the next attempt is due (on `retrying`).
    #[schemars(with = "Option<String>")]
    #[serde(
        default,
        with = "time_format::millis_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub retry_at: Option<DateTime<Utc>>,
    /// How the attempt ended (on outcome events; on `retrying` it tells a
    /// failure from a timeout or an interruption).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<AttemptOutcome>,
    /// Shard index (0-based) of a sharded run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    /// Number of shards of a sharded run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// The run whose end started this one (a chained run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<RunId>,
    /// The job of `parent_run_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_job_id: Option<String>,
}

impl RunEvent {
    /// Step `kind` of `attempt` of `run_id` (a run of `job_id` scheduled at
    /// `scheduled_at`), happening `at`, with its event id, a scheduled
    /// trigger and every optional part empty: the one place that lists them
    /// all, so callers set only what they know.
    pub fn step(
        run_id: RunId,
        job_id: String,
        kind: RunEventKind,
        attempt: u32,
        scheduled_at: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            event_id: Self::event_id_for(&run_id, None, attempt, kind),
            run_id,
            job_id,
            kind,
            trigger: Trigger::Schedule,
            scheduled_at,
            attempt,
            max_attempts: attempt,
            executor_id: String::new(),
            target_type: String::new(),
            pool: String::new(),
            at,
            started_at: None,
            finished_at: None,
            duration_ms: None,
            status_code: None,
            exit_code: None,
            output: None,
            output_truncated: false,
            error: None,
            retry_at: None,
            outcome: None,
            shard: None,
            shards: None,
            parent_run_id: None,
            parent_job_id: None,
        }
    }

    /// The event id of step `kind` of `attempt` of `run_id` (of its `shard`).
    pub fn event_id_for(
        run_id: &RunId,
        shard: Option<u32>,
        attempt: u32,
        kind: RunEventKind,
    ) -> String {
        use std::fmt::Write as _;
        // One allocation: this runs for every run event.
        let mut id = String::with_capacity(run_id.0.len() + 24);
        push_due_msg_id(&mut id, run_id, shard);
        let _ = write!(id, ":{attempt}:{}", kind.as_str());
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn an_event_id_is_the_due_message_id_then_attempt_and_step() {
        let t = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 2)
            .single()
            .expect("instant");
        let run = RunId::for_fire("hello", t);
        for shard in [None, Some(3)] {
            assert_eq!(
                RunEvent::event_id_for(&run, shard, 2, RunEventKind::Started),
                format!("{}:2:started", due_msg_id(&run, shard))
            );
        }
    }

    #[test]
    fn run_ids_are_stable_and_distinct() {
        let t = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 2)
            .single()
            .expect("instant");
        let a = RunId::for_fire("hello", t);
        assert_eq!(a, RunId::for_fire("hello", t));
        assert_ne!(
            a,
            RunId::for_fire("hello", t + chrono::Duration::seconds(2))
        );
        assert_ne!(a, RunId::for_fire("hello2", t));
        assert_ne!(a, RunId::for_manual("hello", t));
        assert_eq!(a.as_str().len(), 36);
    }

    /// Replicas of two versions decide the same fire during a rolling
    /// upgrade: its run id (the due event's `Nats-Msg-Id`) must not change
    /// with how it is computed.
    #[test]
    fn run_ids_are_named_as_they_always_were() {
        let named_before = |job_id: &str, at: DateTime<Utc>| {
            let name = format!(
                "{job_id}\n{}",
                at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            );
            Uuid::new_v5(&RUN_ID_NAMESPACE, name.as_bytes()).to_string()
        };
        let t = Utc
            .timestamp_millis_opt(1_796_000_000_123)
            .single()
            .expect("instant");
        for (job_id, at) in [
            ("hello", t),
            ("team-a.nightly", t + chrono::Duration::milliseconds(877)),
            ("ünïcode", t + chrono::Duration::days(400)),
            ("", Utc.timestamp_opt(0, 0).single().expect("epoch")),
        ] {
            assert_eq!(
                RunId::for_fire(job_id, at).as_str(),
                named_before(job_id, at)
            );
        }
    }

    #[test]
    fn borrowed_due_events_serialize_like_owned_ones() {
        let job = crate::job::parse_job(
            br#"{"id":"j","schedule":"@daily","target":{"type":"shell","command":"true"}}"#,
            None,
        )
        .expect("job");
        let t = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("t");
        let owned = DueEvent {
            run_id: RunId::for_fire("j", t),
            job_id: "j".into(),
            scheduled_at: t,
            trigger: Trigger::Schedule,
            pool: "default".into(),
            job_revision: 7,
            job: job.spec,
            shard: Some(2),
            parent: None,
        };
        let json = serde_json::to_string(&owned).expect("owned");
        assert_eq!(
            json,
            serde_json::to_string(&owned.as_ref()).expect("borrowed")
        );
        let encoded = serde_json::value::to_raw_value(&owned.job).expect("encode");
        let with_encoded = DueEventRef {
            job: JobRef::Encoded(&encoded),
            ..owned.as_ref()
        };
        assert_eq!(json, serde_json::to_string(&with_encoded).expect("encoded"));
    }

    #[test]
    fn kinds_round_trip() {
        for kind in RunEventKind::ALL {
            assert_eq!(RunEventKind::parse(kind.as_str()), Some(kind));
            let json = serde_json::to_string(&kind).expect("serialize");
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
        assert_eq!(RunEventKind::parse("exploded"), None);
    }
}
