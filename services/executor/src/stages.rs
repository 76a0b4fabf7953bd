//! A fire's way through the executor, as debug events one can switch on
//! for some jobs to see where a late call's time went.
//!
//! Each mark is a debug event of this module's target inside the
//! attempt's `run` span, so a filter can pick jobs by name without the
//! others paying for more than a disabled event:
//! `RUST_LOG=info,jetcron_executor::stages[run{job_id=team\.nightly-.*}]=debug`.
//! The log's own timestamp is the time of the stage. The calls booked for
//! an instant are sent together by one task, which logs each instant's
//! hand-over on `jetcron_executor::instant_calls` at debug
//! (`e2e-bench run --trace-jobs N` reads both and prints where the time
//! goes at the load it measures).

use tracing::debug;

/// A point of an attempt's way, in the order it is met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The delivery came to the executor (a held fire is held from here).
    Pulled,
    /// A held fire woke to book its call ahead of its instant.
    Woke,
    /// Its call slot is taken (and a held fire's call booked with it).
    SlotTaken,
    /// Its `started` event is stored, or the call goes on beside its
    /// storing (not stored within 200 ms).
    StartRecorded,
    /// The attempt calls its target itself (a call not booked).
    CallSent,
    /// Its call's answer reached the attempt (a booked call's answer waits
    /// for the end of its instant's burst).
    Answered,
    /// Its outcome is stored and its delivery settled.
    Settled,
}

impl Stage {
    /// The name the trace's readers match.
    pub const fn name(self) -> &'static str {
        match self {
            Stage::Pulled => "pulled",
            Stage::Woke => "woke",
            Stage::SlotTaken => "slot taken",
            Stage::StartRecorded => "start recorded",
            Stage::CallSent => "call sent",
            Stage::Answered => "answered",
            Stage::Settled => "settled",
        }
    }
}

/// The attempt reached `stage` now.
pub fn reached(stage: Stage) {
    debug!(stage = stage.name(), "stage");
}
