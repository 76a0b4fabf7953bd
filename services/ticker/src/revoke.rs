//! Killing fires that were handed out ahead of their time when their job is
//! deleted or paused before they are due (see [`crate::ahead`]).
//!
//! The ticker loop must never wait on this: [`Revoker`] only queues run ids,
//! and [`kill_revoked`] writes their `kill.<run_id>` markers in
//! `jetcron_running`, retrying for about 20 s while the bucket is
//! unavailable (an election of its leader).

use std::time::Duration;

use async_nats::jetstream::kv;
use chrono::{DateTime, Utc};
use jetcron_core::events::RunId;
use jetcron_io::control;
use jetcron_io::retry::{LogLimiter, RetryDelay};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::ahead::AheadFires;
use crate::plan::Fire;

/// A fire to kill before it starts.
#[derive(Debug, Clone)]
pub struct Revocation {
    pub run_id: RunId,
    pub job_id: String,
    pub reason: &'static str,
}

/// What the ticker loop holds: the fires stored ahead, and the queue.
pub struct Revoker {
    ahead: AheadFires,
    queue: mpsc::Sender<Revocation>,
    /// Off without a lookahead: nothing is ever stored ahead then.
    enabled: bool,
    dropped: LogLimiter,
}

impl Revoker {
    pub fn new(queue: mpsc::Sender<Revocation>, enabled: bool) -> Self {
        Self {
            ahead: AheadFires::default(),
            queue,
            enabled,
            dropped: LogLimiter::per_10s(),
        }
    }

    /// Remember the fires of a settled batch that were stored ahead of time.
    pub fn stored(&mut self, fires: &[Fire], stored: &[bool], now: DateTime<Utc>) {
        if !self.enabled {
            return;
        }
        for (fire, ok) in fires.iter().zip(stored) {
            if *ok {
                self.ahead
                    .stored(&fire.job.id, fire.scheduled_at, fire.fire_at, now);
            }
        }
        self.ahead.prune(now);
    }

    /// `job_id` was deleted or paused at `now`: kill its fires stored ahead.
    pub fn revoke(&mut self, job_id: &str, reason: &'static str, now: DateTime<Utc>) {
        if !self.enabled {
            return;
        }
        for scheduled_at in self.ahead.take_job(job_id, now) {
            let revocation = Revocation {
                run_id: RunId::for_fire(job_id, scheduled_at),
                job_id: job_id.to_string(),
                reason,
            };
            if self.queue.try_send(revocation).is_err() {
                if let Some(count) = self.dropped.admit() {
                    warn!(
                        job_id,
                        count, "too many fires to kill at once; a fire stored ahead will still run"
                    );
                }
            }
        }
    }
}

/// Write a kill marker for every revocation until the queue closes.
pub async fn kill_revoked(
    running: kv::Store,
    mut queue: mpsc::Receiver<Revocation>,
    clock: std::sync::Arc<dyn jetcron_core::clock::Clock>,
) {
    let mut failures = LogLimiter::per_10s();
    while let Some(revocation) = queue.recv().await {
        let mut delay = RetryDelay::new(Duration::from_millis(100), Duration::from_secs(1));
        for _ in 0..20 {
            let marked = control::mark_killed(
                &running,
                revocation.run_id.as_str(),
                revocation.reason,
                clock.now(),
            );
            match marked.await {
                Ok(_) => {
                    info!(job_id = %revocation.job_id, run_id = %revocation.run_id, reason = revocation.reason, "fire handed out ahead of time killed");
                    break;
                }
                Err(e) => {
                    if let Some(count) = failures.admit() {
                        warn!(run_id = %revocation.run_id, count, error = %format!("{e:#}"), "cannot kill a fire of a deleted job yet, retrying");
                    }
                    tokio::time::sleep(delay.next_delay()).await;
                }
            }
        }
    }
}
