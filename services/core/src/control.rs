//! Messages that steer runs in progress: kill requests and the completions of
//! asynchronous targets.
//!
//! Sending and recording them is `jetcron_io::control`.
//!
//! A kill is recorded twice on purpose. The marker `kill.<run_id>` in
//! `jetcron_running` is durable: an attempt that starts later (a retry waiting
//! in `JETCRON_DUE`, a redelivery) sees it and records `killed` without
//! running. The core-NATS request on `jetcron.control.kill.<run_id>` reaches
//! the executors running the run right now; each answers with what it stopped.

use serde::{Deserialize, Serialize};

use crate::events::{RunEvent, RunEventKind};

/// Body of `jetcron.api.runs.kill`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KillRequest {
    pub run_id: String,
    /// Recorded in the `killed` event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Value of `kill.<run_id>` in `jetcron_running`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillMarker {
    pub run_id: String,
    pub requested_at_ms: i64,
    pub reason: String,
}

/// An executor's answer to a kill request: it stopped `attempts` attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KillReply {
    pub executor_id: String,
    pub attempts: u32,
}

/// Longest kill reason kept.
pub const MAX_REASON_BYTES: usize = 1024;

/// Whether `run_id` is a run id as jetcron writes them (lowercase hyphenated UUID).
pub fn is_run_id(run_id: &str) -> bool {
    uuid::Uuid::parse_str(run_id).is_ok_and(|u| u.hyphenated().to_string() == run_id)
}

/// What an asynchronous target reports on `jetcron.runs.<run_id>.complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Completion {
    pub status: CompletionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The attempt this completes (from the `Jetcron-Attempt` header); any
    /// attempt of the run when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The shard this completes (from `Jetcron-Shard`), for sharded runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompletionStatus {
    Succeeded,
    Failed,
}

impl Completion {
    /// Parse a completion, with a message that says what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                e.inner().to_string()
            } else {
                format!("{path}: {}", e.inner())
            }
        })
    }

    /// Whether this completion is for the given attempt (and shard).
    pub fn matches(&self, attempt: u32, shard: Option<u32>) -> bool {
        self.attempt.is_none_or(|a| a == attempt) && self.shard == shard
    }
}

/// The JSON body POSTed to a job's `notify.webhook` when a run ends badly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FailureNotice {
    /// `failed`, `timed_out` or `killed`.
    pub status: RunEventKind,
    /// The event that ended the run (without output).
    pub run: RunEvent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_parse_strictly_and_match_their_attempt() {
        let c = Completion::parse(br#"{"status":"failed","error":"disk full","attempt":2}"#)
            .expect("valid");
        assert!(c.matches(2, None));
        assert!(!c.matches(1, None));
        assert!(!c.matches(2, Some(0)));
        let err = Completion::parse(br#"{"status":"done"}"#).expect_err("bad status");
        assert!(err.starts_with("status:"), "{err}");
        assert!(Completion::parse(br#"{"status":"succeeded","colour":1}"#).is_err());
    }

    #[test]
    fn run_ids_are_canonical_uuids() {
        assert!(is_run_id("6a1c3f0e-9b7d-4e52-8c1a-5d2f7e90b3c4"));
        assert!(!is_run_id("6A1C3F0E-9B7D-4E52-8C1A-5D2F7E90B3C4"));
        assert!(!is_run_id("x.y"));
    }
}
