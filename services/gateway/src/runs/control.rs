//! Steering runs in progress: kill (`jetcron.api.runs.kill`,
//! `POST /v1/runs/{run_id}/kill`) and the completion report of an
//! asynchronous target (`POST /v1/runs/{run_id}/complete`, the HTTP twin of
//! publishing to `jetcron.runs.<run_id>.complete`).

use std::time::Duration;

use async_nats::HeaderMap;
use jetcron_core::access::Role;
use jetcron_core::api::ApiError;
use jetcron_core::control::{is_run_id, Completion, KillRequest, MAX_REASON_BYTES};
use jetcron_core::job::namespace_of;
use jetcron_core::subjects;
use jetcron_io::control;

use crate::caller::Caller;
use crate::GatewayState;

/// How long a kill waits for running executors to answer.
const KILL_REPLY_WAIT: Duration = Duration::from_millis(500);

fn check_run_id(run_id: &str) -> Result<(), ApiError> {
    if is_run_id(run_id) {
        return Ok(());
    }
    Err(ApiError::invalid_field(
        "run_id",
        format!(
            "{:?} is not a run id (a lowercase hyphenated UUID)",
            run_id.chars().take(64).collect::<String>()
        ),
    ))
}

/// The answer of a kill.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct KilledReply {
    pub ok: bool,
    pub run_id: String,
    /// Executors that stopped a running attempt; empty when none was running
    /// (a queued or retrying run is killed when it next starts).
    pub stopped: Vec<jetcron_core::control::KillReply>,
}

/// `kill` (`jetcron.api.runs.kill`, `POST /v1/runs/{run_id}/kill`): record
/// the kill and stop the attempts running now.
pub async fn kill(
    state: &GatewayState,
    caller: &Caller,
    request: KillRequest,
) -> Result<KilledReply, ApiError> {
    let run_id = request.run_id.as_str();
    check_run_id(run_id)?;
    require_on_run(state, caller, run_id, Role::Operator).await?;
    let reason = request.reason.as_deref().unwrap_or("killed by request");
    if reason.len() > MAX_REASON_BYTES {
        return Err(ApiError::invalid_field(
            "reason",
            format!("must be at most {} bytes", MAX_REASON_BYTES),
        ));
    }
    let stopped = control::kill_run(
        &state.nats,
        &state.running,
        run_id,
        reason,
        KILL_REPLY_WAIT,
        state.clock.now(),
    )
    .await
    .map_err(ApiError::unavailable)?;
    tracing::info!(run_id, executors = stopped.len(), "run killed");
    Ok(KilledReply {
        ok: true,
        run_id: request.run_id,
        stopped,
    })
}

/// `Ok` when `caller` has `role` in the namespace of run `run_id`'s job. A
/// run id does not name its job: for a caller limited to some namespaces
/// the run is looked up in the history (a run not stored there yet is not
/// found), for one with the role everywhere nothing is looked up.
async fn require_on_run(
    state: &GatewayState,
    caller: &Caller,
    run_id: &str,
    role: Role,
) -> Result<(), ApiError> {
    if caller.grants.allows_everywhere(role) {
        return Ok(());
    }
    caller.grants.require_somewhere(role)?;
    let run = crate::runs::reads::run(state, run_id).await?.run;
    caller.grants.require(role, namespace_of(&run.job_id))
}

/// The answer of a completion report: the run it was stored for.
#[derive(Debug, serde::Serialize)]
pub struct CompletedReply {
    pub ok: bool,
    pub run_id: String,
}

/// Store a completion report of `run_id` where waiting executors hear it.
pub async fn complete(
    state: &GatewayState,
    caller: &Caller,
    run_id: &str,
    body: &[u8],
) -> Result<CompletedReply, ApiError> {
    check_run_id(run_id)?;
    require_on_run(state, caller, run_id, Role::Operator).await?;
    let report = Completion::parse(body)
        .map_err(|why| ApiError::malformed(format!("completion report: {why}")))?;
    let payload = serde_json::to_vec(&report)
        .map_err(|e| ApiError::internal("encode the completion report", e))?;
    state
        .js
        .publish_with_headers(
            subjects::run_complete_subject(run_id),
            HeaderMap::new(),
            payload.into(),
        )
        .await
        .map_err(|e| ApiError::unavailable(format!("publish completion: {e}")))?
        .await
        .map_err(|e| ApiError::unavailable(format!("store completion: {e}")))?;
    Ok(CompletedReply {
        ok: true,
        run_id: run_id.to_string(),
    })
}
