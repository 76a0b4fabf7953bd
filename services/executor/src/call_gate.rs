//! Whether a target may be called from this executor now.
//!
//! Two things outside the executor make a call go wrong although the
//! delivery is ours:
//! - **This host's clock is off** from the NATS servers' (`--max-clock-offset`):
//!   its instants are not the servers' instants, and a call at one may be
//!   early ([`jetcron_io::clock_check`]).
//! - **The calls' NATS server does not answer** (it hangs, or the
//!   connection is away): a request written to it goes nowhere now and is
//!   delivered when the server wakes, after another delivery of the same
//!   fire has called the target (issue 39: a node hung for 15 s delivered
//!   the calls of its last seconds at its resume, as stale attempts). A call
//!   goes out only through a server that answered within
//!   [`SERVER_SILENT_AFTER`] (`jetcron executor` pings it every 100 ms,
//!   [`jetcron_io::nats_failover::Failover::ping_every`]).
//!
//! Closed, nothing is pulled, a held fire whose instant comes is handed
//! back unrecorded as a try, and another executor calls it.

use std::time::Duration;

use crate::ExecutorContext;

/// How long the calls' server may be silent before no call goes through it:
/// three pings.
pub const SERVER_SILENT_AFTER: Duration = Duration::from_millis(350);

/// Why no call may go out now, if none may.
pub fn closed(ctx: &ExecutorContext) -> Option<String> {
    if !ctx.config.clock_check.trusted() {
        return Some("this host's clock is not trusted (--max-clock-offset)".into());
    }
    if !ctx
        .config
        .calls_health
        .server_answered_within(SERVER_SILENT_AFTER)
    {
        return Some(format!(
            "the NATS server of the calls' connection has not answered for {} ms",
            SERVER_SILENT_AFTER.as_millis()
        ));
    }
    None
}
