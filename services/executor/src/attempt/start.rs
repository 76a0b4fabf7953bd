//! The start stage of an attempt: its slot, a last look for a kill
//! request, the overlap claim of `forbid` / `replace`, and its `started`
//! event recorded before the target is called ([`record_start`]). A held
//! fire of a job that allows overlap with a `nats` target books its call
//! for its instant and records its start just ahead of it
//! ([`crate::instant_calls`]), so that at the instant only the call is left.

use std::future::Future;
use std::pin::Pin;

use chrono::{DateTime, Utc};
use jetcron_core::events::{DueEvent, RunEvent, RunEventKind};
use jetcron_core::job::{self, ConcurrencyPolicy, NatsTarget, Target, ValidJob};
use tracing::{info, warn};

use super::elsewhere::{ended_already, RunEnd, Since};
use super::settle::release;
use super::{
    hand_back, hand_back_for_silence, notify_of, overlap, refuse_for_good, store_budget, Attempt,
    RunSlot, Slot, When, STARTED_WAIT, START_AHEAD,
};
use crate::claims::{self, ClaimHandle};
use crate::fair_slots::FairSlots;
use crate::lease::Delivery;
use crate::run_events::{RunEventPublisher, Stored};
use crate::running::Registration;
use crate::stages::{self, Stage};
use crate::targets::{self, RunContext};
use crate::ExecutorContext;

/// The storing of an attempt's `started` event, which may go on beside its
/// call.
pub(super) type StoreStart<'a> = Pin<Box<dyn Future<Output = anyhow::Result<Stored>> + Send + 'a>>;

/// An attempt that started: what its call and its settling need.
pub(super) struct Started<'a> {
    /// Its place among `--max-in-flight` attempts, given back when its
    /// target returns.
    pub permit: Option<super::CallSlot>,
    /// Its call, booked for the instant.
    pub booked: Option<BookedCall<'a>>,
    /// The overlap claim it holds.
    pub claim: Option<ClaimHandle>,
    /// When it started (the instant of a booked call).
    pub at: DateTime<Utc>,
    /// Its `started` event.
    pub event: RunEvent,
    /// The storing of `event`, when it was not stored in time
    /// ([`STARTED_WAIT`]): it goes on beside the call.
    pub store: Option<StoreStart<'a>>,
}

/// Start the attempt with `slot`; `None` when the delivery is done with.
pub(super) async fn start<'a>(
    attempt: &Attempt<'a>,
    run: &RunContext,
    slot: Slot,
    registration: &Registration,
) -> Option<Started<'a>> {
    if let Some(started) = start_ahead(attempt, run, &slot, registration).await? {
        return Some(started);
    }
    let Attempt {
        ctx,
        message,
        due,
        job,
        publisher,
        ..
    } = *attempt;
    // At its instant a held fire looks for a kill request (in memory,
    // [`crate::kill_markers`]): a job paused or deleted while the fire was
    // held (the ticker marks such fires killed) is caught then. A fire of a
    // job that allows overlap looks once it has its slot; a `forbid` or
    // `replace` fire before its claim, which it takes before its slots
    // ([`overlap`]). (A booked call's kill request is looked for by the
    // dispatcher.)
    let (permit, mut claim) = match job.concurrency {
        ConcurrencyPolicy::Allow => {
            let permit = slot.taken(ctx, message, due, RunSlot::First).await?;
            stages::reached(Stage::SlotTaken);
            if killed_before_start(ctx, message, due, job, publisher).await {
                return None;
            }
            (permit, None)
        }
        // The claim before the slots ([`overlap`]).
        policy => {
            let ready = slot.at_instant(ctx, message).await?;
            if killed_before_start(ctx, message, due, job, publisher).await {
                return None;
            }
            let claim = Box::pin(overlap::take_claim(attempt, policy, registration)).await?;
            let slots = overlap::slots_beside_claim(attempt, claim, ready, registration);
            let (permit, claim) = Box::pin(slots).await?;
            stages::reached(Stage::SlotTaken);
            (permit, Some(claim))
        }
    };
    registration.activate();
    let event = publisher.started(ctx.clock.now(), job.max_attempts);
    let mut store = store_start(attempt, event.clone());
    let start = record_start(attempt, &mut store, &mut claim, &mut None).await?;
    stages::reached(Stage::StartRecorded);
    Some(Started {
        permit: Some(permit),
        booked: None,
        claim,
        at: event.at,
        event,
        store: (start == Start::Storing).then_some(store),
    })
}

/// A held fire of a job that allows overlap, with a `nats` target, books
/// its call and records its start just before its instant, so that at the
/// instant only the call is left. `Some(None)` when it goes on the usual
/// way instead (another kind of fire, or no free slot to book the call
/// with: it then waits for one at the instant); `None` when the delivery
/// is done with.
async fn start_ahead<'a>(
    attempt: &Attempt<'a>,
    run: &RunContext,
    slot: &Slot,
    registration: &Registration,
) -> Option<Option<Started<'a>>> {
    let Attempt {
        ctx,
        message,
        due,
        job,
        publisher,
        ..
    } = *attempt;
    let Slot {
        when: When::At(fire_at),
        slots,
        hand_back,
    } = slot
    else {
        return Some(None);
    };
    let (ConcurrencyPolicy::Allow, Target::Nats(target)) = (job.concurrency, &job.spec.target)
    else {
        return Some(None);
    };
    // A namespace's run slot is taken at the instant, not ahead of it.
    if ctx
        .policies
        .max_concurrent_runs(job::name::namespace_of(&due.job_id))
        .is_some()
    {
        return Some(None);
    }
    if !crate::hold::hold_until(ctx, message, *fire_at - START_AHEAD, hand_back).await
        || killed_before_start(ctx, message, due, job, publisher).await
    {
        return None;
    }
    stages::reached(Stage::Woke);
    let Some((permit, call)) = book_call(ctx, message, target, run, *fire_at, slots) else {
        return Some(None);
    };
    stages::reached(Stage::SlotTaken);
    registration.activate();
    let event = publisher.started(*fire_at, job.max_attempts);
    let mut store = store_start(attempt, event.clone());
    // Not going on withdraws the booking (dropped before the instant).
    let mut booked = Some(call);
    let start = record_start(attempt, &mut store, &mut None, &mut booked).await?;
    stages::reached(Stage::StartRecorded);
    Some(Some(Started {
        permit: Some(permit),
        booked,
        claim: None,
        at: event.at,
        event,
        store: (start == Start::Storing).then_some(store),
    }))
}

/// The storing of `event`, the attempt's `started`.
fn store_start<'a>(attempt: &Attempt<'a>, event: RunEvent) -> StoreStart<'a> {
    let Attempt {
        ctx,
        message,
        publisher,
        ..
    } = *attempt;
    Box::pin(async move { publisher.publish(&event, store_budget(ctx), message).await })
}

/// A held attempt's call booked with [`crate::instant_calls`].
pub(super) struct BookedCall<'a> {
    pub target: &'a NatsTarget,
    pub at: DateTime<Utc>,
    pub booking: crate::instant_calls::Booking,
    /// Completion reports are expected from before the call is sent.
    pub reports: crate::completion_reports::Expected,
}

/// Book the call of a held fire's `nats` target for its instant, with its
/// in-flight slot taken now; `None` when no slot is free now (the attempt
/// then waits for one at the instant and calls itself).
fn book_call<'a>(
    ctx: &ExecutorContext,
    message: &Delivery,
    target: &'a NatsTarget,
    run: &RunContext,
    fire_at: DateTime<Utc>,
    slots: &std::sync::Arc<FairSlots>,
) -> Option<(super::CallSlot, BookedCall<'a>)> {
    let permit = slots.try_take(job::name::namespace_of(&run.job_id))?;
    let reports = ctx.completions.expect(run.run_id.as_str());
    let (headers, payload) = targets::nats::prepare(target, run);
    let request = crate::instant_calls::CallRequest {
        subject: target.subject.clone().into(),
        headers,
        payload,
    };
    let lease = message.lease().clone();
    let booking = ctx
        .instant_calls
        .book(fire_at, run.run_id.as_str(), request, lease)?;
    Some((
        permit.into(),
        BookedCall {
            target,
            at: fire_at,
            booking,
            reports,
        },
    ))
}

/// How an attempt's start was recorded, before its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Stored within [`STARTED_WAIT`].
    Stored,
    /// Not stored yet: the call goes out meanwhile, and the start is stored
    /// beside it.
    Storing,
}

/// Wait up to [`STARTED_WAIT`] for `store`, the storing of the attempt's
/// `started` event: the start is recorded before the target is called, but
/// the call does not wait longer for it while JetStream answers through
/// this executor's connection (while `JETCRON_RUNS` elects a leader the
/// event is stored later, before the outcome, and the fire still reaches
/// its target on time). Through a server cut off from its cluster it could
/// never be stored, and the call would be made again by the delivery that
/// comes after the ack wait: then the target is not called from here.
/// `None` when this delivery is done with: another delivery started this
/// very attempt, the start cannot be recorded (handed back), or JetStream
/// did not answer. A `booked` call is withdrawn then, before anything else
/// is awaited: left booked while the hand-back's nak waited 2 s for a hung
/// server, the call went out at its instant, and the fire was called again
/// when it came back (the hang of the network test, 14 fires twice).
async fn record_start(
    attempt: &Attempt<'_>,
    store: &mut StoreStart<'_>,
    claim: &mut Option<ClaimHandle>,
    booked: &mut Option<BookedCall<'_>>,
) -> Option<Start> {
    match tokio::time::timeout(STARTED_WAIT, store.as_mut()).await {
        Ok(stored) => start_recorded(attempt, stored, claim, booked, Start::Stored).await,
        Err(_) if !cut_off(attempt.ctx) => {
            info!("start not stored yet, calling the target meanwhile");
            Some(Start::Storing)
        }
        // This delivery may be a stale consumer leader's on a server cut off
        // from its cluster, which hands out what the majority's leader hands
        // out too (the partition test: such calls, made once the start was
        // stored, came after another delivery's of the same fire). It is
        // handed back, still within its lease: where JetStream was only
        // electing a meta leader, the consumer's leader hands it out again a
        // second later. (Left to the ack wait, which the start's store had
        // just renewed, such fires came 13-24 s late in the leader-kill
        // test.) Through a cut server the nak reaches no leader of the
        // majority, which hands the fire out after the ack wait if nobody
        // else has it. (Its start may still be stored: the attempt then
        // shows as lost.)
        Err(_) => {
            warn!("start not stored and JetStream does not answer through this executor's NATS server: not calling, handing the fire back");
            drop(booked.take());
            hand_back_for_silence(attempt.message).await;
            None
        }
    }
}

/// Whether the executor's connection goes to a server cut off from its
/// cluster, or one that hangs, or JetStream is electing where a consumer's
/// new leader may hand out what this executor holds: JetStream through this
/// connection has not answered for [`CUT_OFF_SIGN`]; or for
/// [`CUT_OFF_WITH_PEERS`] where jetcron connections on other servers that
/// answered before (`jetcron_io::peer_reach`) have stopped for
/// [`PEERS_SILENT`]. Shorter than the time a cut node's stale consumer
/// leader takes to hand its own clients a fire the majority's leader hands
/// out too (its ack wait). Not on the peers' silence alone: the other
/// processes killed together (or their node) are silent too, and the fires
/// of the seconds after such a kill, left to the ack wait, came 15-19 s
/// late.
///
/// Tried and undone (2026-12-06): JetStream's silence only together with
/// the peers' where any were heard, since an election silences JetStream
/// on every server while the others answer. The leader-kill runs' p99 fell
/// from 11.0 s to 4.2-5.7 s, but where a node hung, the calls of its
/// seconds 3-4, made without a stored start, were made again by the
/// deliveries the consumer's new leader handed out (13 and 14 fires twice
/// in two runs, none in the run before): a fire late is better than a
/// fire twice. The connection itself leaves a server whose peers stay
/// silent 3 s, or 2 s with JetStream silent too (`jetcron_io::nats_failover`).
fn cut_off(ctx: &ExecutorContext) -> bool {
    let peers = &ctx.config.peer_reach;
    cut_off_by(peers.cut_off(PEERS_SILENT), |window| {
        ctx.config.jetstream_health.jetstream_silent_for(window)
    })
}

/// [`cut_off`] from what it reads: whether connections on other servers
/// have been silent [`PEERS_SILENT`] (after answering), and how long
/// JetStream has been silent.
fn cut_off_by(
    peers_silent: bool,
    jetstream_silent_for: impl Fn(std::time::Duration) -> bool,
) -> bool {
    jetstream_silent_for(CUT_OFF_SIGN) || (peers_silent && jetstream_silent_for(CUT_OFF_WITH_PEERS))
}

/// See [`cut_off`]: JetStream's silence alone.
const CUT_OFF_SIGN: std::time::Duration = std::time::Duration::from_secs(3);

/// See [`cut_off`]: two of the JetStream watch's questions unanswered.
const CUT_OFF_WITH_PEERS: std::time::Duration = std::time::Duration::from_secs(1);

/// See [`cut_off`]: three of the peer watch's questions unanswered.
const PEERS_SILENT: std::time::Duration = std::time::Duration::from_millis(750);

/// What a stored (or failed) start means for the attempt: `as_stored` to
/// go on, or `None` when the delivery is done with.
async fn start_recorded(
    attempt: &Attempt<'_>,
    stored: anyhow::Result<crate::run_events::Stored>,
    claim: &mut Option<ClaimHandle>,
    booked: &mut Option<BookedCall<'_>>,
    as_stored: Start,
) -> Option<Start> {
    let Attempt {
        ctx, message, due, ..
    } = *attempt;
    if !matches!(&stored, Ok(s) if !s.duplicate) {
        drop(booked.take());
    }
    match stored {
        Ok(stored) if stored.duplicate => {
            // Another delivery started this very attempt: it ran, or runs
            // now, and settles the message (or, gone, leaves it to come
            // again after the ack wait). Not handed back: the server takes a
            // nak from any delivery, and that one's run would be delivered
            // a third time, its target called again (the partition test).
            match ended_already(ctx, message, due, Since::Sequence(stored.sequence)).await {
                RunEnd::NotYet => {
                    info!("another delivery started this attempt, leaving the fire to it")
                }
                RunEnd::Ended => release(claim.take()).await,
                RunEnd::Unknown => {}
            }
            None
        }
        Ok(_) => Some(as_stored),
        Err(e) => {
            warn!(error = %format!("{e:#}"), "cannot record start, handing the run back");
            hand_back(message).await;
            None
        }
    }
}

/// Whether the run was killed before this attempt started (a kill marker in
/// `jetcron_running`): then the attempt is recorded as killed and its
/// message settled (or, when the marker cannot be read, handed back), and
/// `true` says the delivery is done with.
async fn killed_before_start(
    ctx: &ExecutorContext,
    message: &Delivery,
    due: &DueEvent,
    job: &ValidJob,
    publisher: &RunEventPublisher<'_>,
) -> bool {
    match Box::pin(crate::kept_alive::through_elections(
        ctx,
        message,
        "kill request",
        || {
            ctx.kill_markers
                .requested(&ctx.running, due.run_id.as_str())
        },
    ))
    .await
    {
        Ok(None) => false,
        Ok(Some(marker)) => {
            info!(reason = %marker.reason, "run was killed before this attempt, not running it");
            let event = publisher.declined(
                RunEventKind::Killed,
                ctx.clock.now(),
                format!("killed: {}", marker.reason),
                job.max_attempts,
            );
            refuse_for_good(ctx, publisher, message, event, notify_of(&job.spec)).await;
            if job.concurrency != ConcurrencyPolicy::Allow && message.is_ours() {
                // A run killed while it waited for a retry still held the claim.
                let key = jetcron_core::subjects::claim_key(&job.spec.id, due.shard);
                Box::pin(claims::release_if_held_by(
                    &ctx.running,
                    &key,
                    due.run_id.as_str(),
                ))
                .await;
            }
            true
        }
        Err(e) => {
            warn!(error = %format!("{e:#}"), "cannot check for a kill request, handing the run back");
            hand_back(message).await;
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_is_jetstreams_silence_and_sooner_with_the_peers_silence() {
        let silent = |secs: f64| move |w: std::time::Duration| w.as_secs_f64() <= secs;
        // A cut or a hang: the peers silent too, after a second.
        assert!(cut_off_by(true, silent(1.0)));
        assert!(!cut_off_by(true, silent(0.5)), "JetStream just answered");
        // The others killed while JetStream answers: no cut.
        assert!(!cut_off_by(true, silent(0.0)));
        // JetStream alone: an election or a cut, after 3 s.
        assert!(!cut_off_by(false, silent(2.0)));
        assert!(cut_off_by(false, silent(3.0)));
    }
}
