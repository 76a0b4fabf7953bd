//! The attempts this executor is running, by run id, so a kill request can
//! reach them.
//!
//! Every attempt registers itself for its lifetime; the kill listener
//! (`jetcron.control.kill.*`, core NATS) cancels the registered attempts of
//! the named run and answers with how many it stopped. The durable half of a
//! kill (the marker in `jetcron_running`) is checked when an attempt starts.
//!
//! The same listener answers probes on `jetcron.control.running.<run_id>`
//! when an attempt of the run is past its claim here, with `calling` (its
//! target is being called) or `recording` (the target returned, its events
//! are being stored). A `forbid` fire that finds the job's claim held asks
//! whether its holder still calls its target, because a claim can outlive
//! the call (its events or release wait for a leader election, or its
//! executor died); a redelivery asks whether another delivery of its own
//! run is calling or recording, because then it must not call again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use jetcron_core::control::{KillMarker, KillReply};
use jetcron_core::subjects;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Attempts in progress on this executor.
#[derive(Debug, Default)]
pub struct RunningAttempts {
    next_id: Mutex<u64>,
    by_run: Mutex<HashMap<String, Vec<Entry>>>,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    kill: CancellationToken,
    reason: Arc<Mutex<Option<String>>>,
    /// Where the attempt stands: what a probe asks about.
    stage: Arc<std::sync::atomic::AtomicU8>,
}

/// Where an attempt stands, as probes see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Registered, not past its claim yet (or not calling anything).
    Waiting = 0,
    /// Calls (or is about to call) its target.
    Calling = 1,
    /// Its target returned; its outcome is being stored.
    Recording = 2,
    /// A redelivery looking whether another delivery of its run ran it
    /// (`attempt/elsewhere.rs`): a second delivery that looks at the same
    /// moment leaves the fire to this one (or both leave it, and it comes
    /// again after the ack wait) rather than both calling.
    Deciding = 3,
}

impl Stage {
    fn from_u8(value: u8) -> Self {
        match value {
            1 => Stage::Calling,
            2 => Stage::Recording,
            3 => Stage::Deciding,
            _ => Stage::Waiting,
        }
    }

    /// The probe's answer.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Waiting => "waiting",
            Stage::Calling => "calling",
            Stage::Recording => "recording",
            Stage::Deciding => "deciding",
        }
    }

    /// Read a probe's answer (older executors answered with their id: calling).
    pub fn from_reply(payload: &[u8]) -> Self {
        match payload {
            b"recording" => Stage::Recording,
            b"waiting" => Stage::Waiting,
            b"deciding" => Stage::Deciding,
            _ => Stage::Calling,
        }
    }
}

/// One attempt's place in [`RunningAttempts`]; removed when dropped.
pub struct Registration {
    attempts: Arc<RunningAttempts>,
    run_id: String,
    id: u64,
    /// Cancelled when the run is killed.
    pub killed: CancellationToken,
    reason: Arc<Mutex<Option<String>>>,
    stage: Arc<std::sync::atomic::AtomicU8>,
}

impl Registration {
    /// The attempt holds what it needs and calls its target now: probes
    /// about its run are answered from here on (not while it waits for a
    /// claim, say).
    pub fn activate(&self) {
        self.set(Stage::Calling);
    }

    /// The target returned; the outcome is being stored.
    pub fn recording(&self) {
        self.set(Stage::Recording);
    }

    /// A redelivery looks whether another delivery of its run ran it.
    pub fn deciding(&self) {
        self.set(Stage::Deciding);
    }

    /// How a probe of this attempt's own run names it, so that its own
    /// executor does not answer about it ([`RunningAttempts::stage`]).
    pub fn probe_asker(&self, executor_id: &str) -> String {
        format!("{}@{executor_id}", self.id)
    }

    fn set(&self, stage: Stage) {
        self.stage
            .store(stage as u8, std::sync::atomic::Ordering::Release);
    }

    /// Why the run was killed.
    pub fn reason(&self) -> String {
        self.reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(|| "killed".into())
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut by_run = self.attempts.lock_runs();
        if let Some(entries) = by_run.get_mut(&self.run_id) {
            entries.retain(|e| e.id != self.id);
            if entries.is_empty() {
                by_run.remove(&self.run_id);
            }
        }
    }
}

impl RunningAttempts {
    fn lock_runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Entry>>> {
        self.by_run.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register an attempt of `run_id`.
    pub fn register(self: &Arc<Self>, run_id: &str) -> Registration {
        let id = {
            let mut next = self.next_id.lock().unwrap_or_else(|e| e.into_inner());
            *next += 1;
            *next
        };
        let killed = CancellationToken::new();
        let reason = Arc::new(Mutex::new(None));
        let stage = Arc::new(std::sync::atomic::AtomicU8::new(Stage::Waiting as u8));
        self.lock_runs()
            .entry(run_id.to_string())
            .or_default()
            .push(Entry {
                id,
                kill: killed.clone(),
                reason: reason.clone(),
                stage: stage.clone(),
            });
        Registration {
            attempts: self.clone(),
            run_id: run_id.to_string(),
            id,
            killed,
            reason,
            stage,
        }
    }

    /// Kill every attempt of `run_id` running here; how many there were.
    pub fn kill(&self, run_id: &str, reason: &str) -> u32 {
        let by_run = self.lock_runs();
        let Some(entries) = by_run.get(run_id) else {
            return 0;
        };
        for entry in entries {
            *entry.reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_string());
            entry.kill.cancel();
        }
        u32::try_from(entries.len()).unwrap_or(u32::MAX)
    }

    /// The furthest an attempt of `run_id` got here, but for the attempt
    /// registered as `except`: calling beats recording beats deciding beats
    /// waiting (or not here at all).
    pub fn stage(&self, run_id: &str, except: Option<u64>) -> Stage {
        let stages: Vec<Stage> = self
            .lock_runs()
            .get(run_id)
            .map(|entries| {
                entries
                    .iter()
                    .filter(|e| Some(e.id) != except)
                    .map(|e| Stage::from_u8(e.stage.load(std::sync::atomic::Ordering::Acquire)))
                    .collect()
            })
            .unwrap_or_default();
        [Stage::Calling, Stage::Recording, Stage::Deciding]
            .into_iter()
            .find(|stage| stages.contains(stage))
            .unwrap_or(Stage::Waiting)
    }

    /// Number of attempts in progress.
    pub fn len(&self) -> usize {
        self.lock_runs().values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Answer kill requests and running probes until `shutdown`.
pub async fn listen_for_kills(
    client: async_nats::Client,
    attempts: Arc<RunningAttempts>,
    executor_id: String,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let kills = client.subscribe(subjects::KILL_CONTROL_FILTER).await?;
    let probes = client.subscribe(subjects::RUNNING_PROBE_FILTER).await?;
    let mut requests = futures::stream::select(kills, probes);
    loop {
        let message = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            message = requests.next() => match message {
                Some(m) => m,
                None => anyhow::bail!("kill subscription closed"),
            },
        };
        let Some(run_id) = message.subject.rsplit('.').next() else {
            continue;
        };
        if message
            .subject
            .starts_with(jetcron_core::subjects::RUNNING_PROBE_PREFIX)
        {
            let except = own_asker(&message.payload, &executor_id);
            let stage = attempts.stage(run_id, except);
            if let (false, Some(reply)) = (stage == Stage::Waiting, message.reply) {
                let _ = client.publish(reply, stage.as_str().into()).await;
            }
            continue;
        }
        let reason = serde_json::from_slice::<KillMarker>(&message.payload)
            .map(|m| m.reason)
            .unwrap_or_else(|_| "killed".into());
        let stopped = attempts.kill(run_id, &reason);
        if stopped == 0 {
            continue;
        }
        info!(run_id, stopped, reason, "kill request: attempts stopped");
        if let Some(reply) = message.reply {
            let answer = KillReply {
                executor_id: executor_id.clone(),
                attempts: stopped,
            };
            let body = serde_json::to_vec(&answer).unwrap_or_default();
            if let Err(e) = client.publish(reply, body.into()).await {
                warn!(error = %e, "cannot answer kill request");
            }
        }
    }
}

/// The registration a probe comes from, when it is one of this executor's
/// (the probe's body is [`Registration::probe_asker`]).
fn own_asker(payload: &[u8], executor_id: &str) -> Option<u64> {
    let (id, executor) = std::str::from_utf8(payload).ok()?.split_once('@')?;
    (executor == executor_id).then(|| id.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_reach_registered_attempts_only_while_registered() {
        let attempts = Arc::new(RunningAttempts::default());
        let a = attempts.register("r1");
        let b = attempts.register("r1");
        let other = attempts.register("r2");
        assert_eq!(attempts.kill("r1", "operator"), 2);
        assert!(a.killed.is_cancelled() && b.killed.is_cancelled());
        assert!(!other.killed.is_cancelled());
        assert_eq!(a.reason(), "operator");
        drop((a, b));
        assert_eq!(attempts.kill("r1", "again"), 0);
        assert_eq!(attempts.len(), 1);
    }

    #[test]
    fn only_attempts_past_their_claim_count_as_running() {
        let attempts = Arc::new(RunningAttempts::default());
        let waiting = attempts.register("r1");
        assert_eq!(
            attempts.stage("r1", None),
            Stage::Waiting,
            "waiting for its claim"
        );
        let running = attempts.register("r1");
        running.activate();
        assert_eq!(attempts.stage("r1", None), Stage::Calling);
        running.recording();
        assert_eq!(attempts.stage("r1", None), Stage::Recording);
        let other = attempts.register("r1");
        other.activate();
        assert_eq!(
            attempts.stage("r1", None),
            Stage::Calling,
            "calling beats recording"
        );
        drop((running, other));
        assert_eq!(attempts.stage("r1", None), Stage::Waiting);
        drop(waiting);
        assert_eq!(Stage::from_reply(b"recording"), Stage::Recording);
        assert_eq!(Stage::from_reply(b"calling"), Stage::Calling);
    }

    #[test]
    fn a_deciding_redelivery_is_seen_by_others_and_not_by_itself() {
        let attempts = Arc::new(RunningAttempts::default());
        let first = attempts.register("r1");
        first.deciding();
        let asker = own_asker(first.probe_asker("exec-a").as_bytes(), "exec-a");
        assert_eq!(asker, Some(first.id));
        assert_eq!(attempts.stage("r1", asker), Stage::Waiting, "not itself");
        assert_eq!(attempts.stage("r1", None), Stage::Deciding);
        let second = attempts.register("r1");
        second.deciding();
        assert_eq!(
            attempts.stage("r1", asker),
            Stage::Deciding,
            "the other one"
        );
        second.activate();
        assert_eq!(attempts.stage("r1", asker), Stage::Calling);
        assert_eq!(own_asker(b"7@exec-b", "exec-a"), None, "another executor's");
        assert_eq!(own_asker(b"", "exec-a"), None, "an older executor's probe");
        assert_eq!(Stage::from_reply(b"deciding"), Stage::Deciding);
    }
}
