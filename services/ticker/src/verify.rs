//! Checking the streams for fires a previous owner may have emitted.
//!
//! `Nats-Msg-Id` dedup only remembers the duplicate window. When a shard is
//! taken over after a longer silence, the fires its last owner published after
//! its last checkpoint cannot be deduplicated any more; they are looked up
//! instead: the last due event of the job still in `JETCRON_DUE` (not yet
//! consumed) and the last `started` run event in `JETCRON_RUNS` (consumed).
//! A fire at or before the later of the two was emitted and is not repeated.

use async_nats::jetstream::{self, stream::Stream};

type Handle = Stream<()>;
use chrono::{DateTime, Utc};
use jetcron_core::events::{DueEvent, RunEvent, Trigger};
use jetcron_core::subjects;

/// Read handles on the two streams.
pub struct EmittedFires {
    due: Handle,
    runs: Handle,
}

impl EmittedFires {
    pub async fn open(js: &jetstream::Context) -> anyhow::Result<Self> {
        Ok(Self {
            due: js.get_stream_no_info(subjects::DUE_STREAM).await?,
            runs: js.get_stream_no_info(subjects::RUNS_STREAM).await?,
        })
    }

    /// The latest scheduled time of `job_id` known to have been emitted by
    /// the schedule, if any.
    pub async fn last_emitted(&self, pool: &str, job_id: &str) -> Option<DateTime<Utc>> {
        let pending = self
            .due
            .get_last_raw_message_by_subject(&subjects::due_subject(pool, job_id))
            .await
            .ok()
            .and_then(|m| serde_json::from_slice::<DueEvent>(&m.payload).ok())
            .filter(|e| e.trigger == Trigger::Schedule)
            .map(|e| e.scheduled_at);
        let started = self
            .runs
            .get_last_raw_message_by_subject(&subjects::run_event_subject(job_id, "started"))
            .await
            .ok()
            .and_then(|m| serde_json::from_slice::<RunEvent>(&m.payload).ok())
            .filter(|e| e.trigger == Trigger::Schedule)
            .map(|e| e.scheduled_at);
        pending.max(started)
    }
}
