//! Whether another delivery of a run ran it: a redelivery can come after
//! its run ended (an ack lost with a consumer leader) or while an earlier
//! delivery still calls or records it. `JETCRON_RUNS` tells the first, a
//! probe of the executors ([`crate::running`]) the second.

use async_nats::jetstream::message::AckKind;
use jetcron_core::events::DueEvent;
use tracing::{info, warn};

use super::hand_back;
use super::START_AHEAD;
use crate::claims;
use crate::lease::Delivery;
use crate::run_end_lookup;
pub(super) use crate::run_end_lookup::Since;
use crate::running::{Registration, Stage};
use crate::ExecutorContext;

/// Whether another delivery of this run ran it, for a delivery the claim
/// cannot vouch for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Elsewhere {
    /// Not ended, and nobody calls it: this delivery may run it.
    No,
    /// It ended: the message is settled.
    Ended,
    /// Another delivery calls or records it (the message is left to it),
    /// or nobody could tell (the message is handed back).
    Maybe,
}

/// Whether another delivery ran this one's run. `registration` shows this
/// delivery as deciding from its look at `JETCRON_RUNS` to its decision:
/// two deliveries of one run out at once (a consumer's old and new leader,
/// 100 ms apart in the leader-kill test) each probed while the other was
/// not yet registered, found nobody, and both called. Shown as deciding
/// before it probes, at least one of two such deliveries sees the other,
/// and one that sees another deciding leaves the fire to it (where both
/// see each other, both leave, and the fire comes again after the ack
/// wait: late, not twice). Once it decides to run, it answers as calling.
///
/// Not deciding during the look itself: that look is tried through
/// elections for up to 15 s, and every later delivery that probed
/// meanwhile left the fire to one that then handed it back (the
/// leader-kill test: fires first called by their fifth delivery, 33-35 s
/// late). The price: a delivery whose look took long may miss another
/// that ran the run meanwhile and call it again (a second look, shown as
/// deciding, was tried and not kept: it is retried through elections as
/// well, and fires came 63 s late behind it).
pub(super) async fn ran_elsewhere(
    ctx: &ExecutorContext,
    message: &Delivery,
    due: &DueEvent,
    registration: &Registration,
) -> Elsewhere {
    match ended_already(ctx, message, due, fire_since(message, due)).await {
        RunEnd::NotYet => {}
        RunEnd::Ended => return Elsewhere::Ended,
        RunEnd::Unknown => return Elsewhere::Maybe,
    }
    registration.deciding();
    let asker = registration.probe_asker(&ctx.config.executor_id);
    let stage = Box::pin(claims::probe_run(
        &ctx.nats,
        due.run_id.as_str(),
        Some(asker),
    ))
    .await;
    // (An executor that runs or records the run answers within
    // milliseconds; the wait is for when none does.)
    if stage != Stage::Waiting {
        // That delivery settles the message; a nak from here would hand
        // its run out a third time (the server takes it from anyone).
        info!(
            other = stage.as_str(),
            "another delivery of this run calls its target, records it or decides to, leaving the fire to it"
        );
        return Elsewhere::Maybe;
    }
    registration.activate();
    Elsewhere::No
}

/// What a look at `JETCRON_RUNS` found about the run of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RunEnd {
    /// No terminal event: the run has not ended.
    NotYet,
    /// It ended: the message was settled here without running anything.
    Ended,
    /// The lookup failed: the message was handed back.
    Unknown,
}

impl RunEnd {
    /// Whether this delivery is done with (settled or handed back).
    pub(super) fn settled(self) -> bool {
        self != RunEnd::NotYet
    }
}

/// Where the events of `due`'s run can start (see [`Since::fire`]).
pub(super) fn fire_since(message: &Delivery, due: &DueEvent) -> Since {
    Since::fire(
        due.scheduled_at,
        message.message().info().ok().map(|i| i.published),
        START_AHEAD,
    )
}

/// Whether the run of `due` already ended (a late redelivery): then the
/// message is settled here without running anything. A failed lookup hands
/// the message back.
pub(super) async fn ended_already(
    ctx: &ExecutorContext,
    message: &Delivery,
    due: &DueEvent,
    since: Since,
) -> RunEnd {
    // A long search (a backfilled fire of a busy job reads much of its
    // history) must not let the message go to another executor meanwhile,
    // nor one that waits out an election of `JETCRON_RUNS`.
    let ended = crate::kept_alive::through_elections(ctx, message, "run's end", || {
        run_end_lookup::run_ended(&ctx.js, &due.job_id, due.run_id.as_str(), due.shard, since)
    });
    match Box::pin(ended).await {
        Ok(None) => RunEnd::NotYet,
        Ok(Some(kind)) => {
            info!(
                ended = kind.as_str(),
                "run already ended, settling a late delivery without running it"
            );
            metrics::counter!("jetcron_executor_late_deliveries_total").increment(1);
            Box::pin(message.settle(AckKind::Ack)).await;
            RunEnd::Ended
        }
        Err(e) => {
            warn!(error = %format!("{e:#}"), "cannot tell whether the run already ended, handing it back");
            hand_back(message).await;
            RunEnd::Unknown
        }
    }
}
