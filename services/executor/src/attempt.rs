//! One delivery of a due event: one attempt of its run (or of one shard).
//!
//! Steps: decode and check → split a sharded fire into its parts → refuse
//! deliveries beyond `max_attempts` → register (so kills reach us) and honour
//! an earlier kill request → take the overlap claim (`forbid` / `replace`) →
//! publish `started` → run the target under the job's timeout, keeping the
//! message (and claim) alive → publish the outcome → ack (success), nak with
//! the backoff delay (a retry: JetStream redelivers it), or term (the end).
//! The attempt number in events is JetStream's delivery count, so an attempt
//! lost with a crashed executor shows as its own attempt; what counts against
//! `max_attempts` is the retry budget of [`crate::tries`], in which only
//! attempts that failed or timed out count.
//!
//! Steps a usual run does not take (claims, kill-request reads, hand-backs,
//! notifications, refusals) are boxed: an attempt's future is as large as
//! its deepest step, and at 10,000 runs a second the copies of a 24 KB
//! future showed in the profile (docs/benchmarks.md, issue 16's sixth
//! round). A rare step of this module boxes its own I/O (`hand_back`,
//! `ended_already`, `ran_elsewhere`, `refuse_for_good`), so its callers
//! await it plainly; steps of other modules are boxed where awaited.

use async_nats::jetstream::message::AckKind;
use chrono::{DateTime, Utc};
use jetcron_core::events::{AttemptOutcome, DueEvent, RunEvent, RunEventKind};
use jetcron_core::job::{self, ConcurrencyPolicy, NatsTarget, Target, ValidJob};
use tokio::sync::OwnedSemaphorePermit;
use tracing::{debug, info, warn, Instrument as _};

use crate::claims::{self, ClaimHandle, Overlap};
use crate::ended::{self, Since};
use crate::ending::{self, ClaimStep, Decision, Ending, LedgerWrite, Policy, Settle};
use crate::lease::Delivery;
use crate::run_events::RunEventPublisher;
use crate::running::Registration;
use crate::targets::{self, Outcome, RunContext};
use crate::tries::{self, Budget, Ledger, Recorded};
use crate::{fanout, notify, ExecutorContext};

/// Which delivery of which stored due event a message is.
#[derive(Debug, Clone, Copy)]
struct DeliveryNumbers {
    /// JetStream's delivery count: the attempt number of events.
    number: u32,
    /// Stream sequence of the due event (names its retry ledger).
    due_sequence: u64,
}

/// One delivery whose job is known: what the steps after validation share.
struct Attempt<'a> {
    ctx: &'a ExecutorContext,
    message: &'a Delivery,
    due: &'a DueEvent,
    job: &'a ValidJob,
    publisher: &'a RunEventPublisher<'a>,
    /// JetStream's delivery count: the attempt number of events.
    number: u32,
}

/// When an attempt may start: now, with its in-flight slot, or at the
/// instant of a due event stored ahead of its time ([`crate::hold`]), with a
/// slot taken then. A held attempt reads its retry ledger when pulled; at
/// the instant it takes its slot, looks for a kill request (in memory),
/// records its start and calls.
pub enum Slot {
    Now(OwnedSemaphorePermit),
    At {
        fire_at: DateTime<Utc>,
        permits: std::sync::Arc<tokio::sync::Semaphore>,
        /// Cancelled at a shutdown once this executor pulls no more (so
        /// that no fire it hands back comes to it again).
        hand_back: tokio_util::sync::CancellationToken,
    },
}

/// Handle one due-event message to the end (ack, nak or term). `slot` says
/// when it may start; its permit is
/// its place among `--max-in-flight` attempts: it bounds the targets being
/// called, so it is given back when the target returns, and the storing of
/// the outcome and the settling of the message (which wait out leader
/// elections) do not keep other fires from their targets.
pub async fn handle(ctx: &ExecutorContext, message: Delivery, slot: Slot) {
    let numbers = match message.message().info() {
        Ok(info) => DeliveryNumbers {
            number: u32::try_from(info.delivered).unwrap_or(u32::MAX).max(1),
            due_sequence: info.stream_sequence,
        },
        Err(e) => {
            warn!(error = %e, "due message without JetStream metadata, dropping");
            return;
        }
    };
    let due: DueEvent = match serde_json::from_slice(&message.message().payload) {
        Ok(due) => due,
        Err(e) => {
            warn!(subject = %message.message().subject, error = %e, "undecodable due event, terminating it");
            message.settle(AckKind::Term).await;
            return;
        }
    };
    if let Err(why) = check_due_event(&due, &message.message().subject) {
        warn!(subject = %message.message().subject, why, "malformed due event, terminating it");
        message.settle(AckKind::Term).await;
        return;
    }
    let span = tracing::info_span!("run", job_id = %due.job_id, run_id = %due.run_id, shard = due.shard, attempt = numbers.number);
    run_attempt(ctx, message, due, numbers, slot)
        .instrument(span)
        .await;
}

/// Record why a delivery is not run and end it for good (term), telling
/// `notify` when given. Boxed like every step a usual run does not take, so
/// that an attempt's future stays small.
async fn refuse_for_good(
    ctx: &ExecutorContext,
    publisher: &RunEventPublisher<'_>,
    message: &Delivery,
    event: RunEvent,
    notify: Option<(&job::NotifyPolicy, &str)>,
) {
    Box::pin(finish(
        ctx,
        publisher,
        message,
        event,
        AckKind::Term,
        notify,
        None,
    ))
    .await;
}

/// A due event can come from anyone allowed to publish on `jetcron.due.>`:
/// check what the executor relies on before running anything.
fn check_due_event(due: &DueEvent, subject: &str) -> Result<(), String> {
    let canonical = uuid::Uuid::parse_str(due.run_id.as_str())
        .map(|u| u.hyphenated().to_string())
        .map_err(|_| format!("run_id {:?} is not a UUID", due.run_id.as_str()))?;
    if canonical != due.run_id.as_str() {
        return Err(format!(
            "run_id {:?} is not in lowercase hyphenated form",
            due.run_id.as_str()
        ));
    }
    job::validate_id(&due.job_id).map_err(|e| format!("job_id: {}", e.message))?;
    job::validate_id(&due.pool).map_err(|e| format!("pool: {}", e.message))?;
    if due.job.id != due.job_id {
        return Err(format!(
            "job.id {:?} differs from job_id {:?}",
            due.job.id, due.job_id
        ));
    }
    let expected = jetcron_core::subjects::due_subject(&due.pool, &due.job_id);
    if subject != expected {
        return Err(format!("published on {subject:?}, expected {expected:?}"));
    }
    Ok(())
}

async fn run_attempt(
    ctx: &ExecutorContext,
    message: Delivery,
    due: DueEvent,
    numbers: DeliveryNumbers,
    slot: Slot,
) {
    let attempt = numbers.number;
    let publisher = RunEventPublisher::new(ctx, &due, attempt);
    let job = match job::validate_with(due.job.clone(), &mut |line| ctx.config.lines.parse(line)) {
        Ok(job) => job,
        Err(problems) => {
            let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
            let event = publisher.declined(
                RunEventKind::Failed,
                ctx.clock.now(),
                format!("invalid job in due event: {}", text.join("; ")),
                job::DEFAULT_MAX_ATTEMPTS,
            );
            refuse_for_good(ctx, &publisher, &message, event, None).await;
            return;
        }
    };
    // A sharded fire splits at its instant: its parts run when stored.
    let slot = match slot {
        Slot::At {
            fire_at,
            permits,
            hand_back,
        } if job.shards > 1 && due.shard.is_none() => {
            match crate::hold::wait(ctx, &message, fire_at, &permits, &hand_back).await {
                Some(permit) => Slot::Now(permit),
                None => return,
            }
        }
        slot => slot,
    };
    if job.shards > 1 && due.shard.is_none() {
        match Box::pin(fanout::split(ctx, &due, job.shards)).await {
            Ok(()) => {
                info!(shards = job.shards, "fire split into shards");
                message.settle(AckKind::Ack).await;
            }
            Err(e) => {
                warn!(error = %format!("{e:#}"), "cannot split fire into shards, handing it back");
                hand_back(&message).await;
            }
        }
        return;
    }
    let max_attempts = job.max_attempts;
    let refuse =
        |why: String| publisher.declined(RunEventKind::Failed, ctx.clock.now(), why, max_attempts);
    if let Some(index) = due.shard {
        if index >= job.shards {
            let event = refuse(format!(
                "shard {index} is out of range for {} shards",
                job.shards
            ));
            refuse_for_good(ctx, &publisher, &message, event, None).await;
            return;
        }
    }
    let ledger = Ledger::new(&ctx.running, &due, numbers.due_sequence);
    let budget = match Box::pin(crate::kept_alive::through_elections(
        ctx,
        &message,
        "retry ledger",
        || ledger.read(attempt),
    ))
    .await
    {
        Ok(Recorded {
            ended: Some(event), ..
        }) => {
            // The run ended, but its outcome event was not stored before its
            // executor went away: store it now, never call the target again.
            info!(
                ended = event.kind.as_str(),
                "run already ended (recorded in its ledger), settling without running it"
            );
            let settle = if event.kind == RunEventKind::Succeeded {
                AckKind::Ack
            } else {
                AckKind::Term
            };
            Box::pin(finish(ctx, &publisher, &message, event, settle, None, None)).await;
            return;
        }
        Ok(recorded) => recorded.budget,
        Err(e) => {
            warn!(error = %format!("{e:#}"), "cannot read the retry budget, handing the run back");
            hand_back(&message).await;
            return;
        }
    };
    let exhausted = if budget.try_number > max_attempts {
        // The last try failed and was recorded, but its message was not
        // settled: never run again.
        Some(format!(
            "delivery {attempt}: all {max_attempts} attempts already failed"
        ))
    } else if budget.uncounted > tries::MAX_UNCOUNTED_DELIVERIES {
        Some(format!(
            "delivery {attempt}: {} earlier deliveries were lost or handed back \
             (executor crashes, shutdowns or NATS errors), more than {}; giving up",
            budget.uncounted,
            tries::MAX_UNCOUNTED_DELIVERIES
        ))
    } else {
        None
    };
    // A redelivery may come after its run ended (an ack lost with a consumer
    // leader). A job with an overlap claim learns that from its claim; the
    // others look at `JETCRON_RUNS`.
    // ... or while an earlier delivery still records it: one whose
    // keep-alives went nowhere (its NATS server hung) made its call, and its
    // outcome is on its way (the hung-node test: such runs were called again
    // the moment the consumer's new leader handed them out).
    if attempt > 1
        && job.concurrency == ConcurrencyPolicy::Allow
        && ran_elsewhere(ctx, &message, &due).await != Elsewhere::No
    {
        return;
    }
    if let Some(why) = exhausted {
        let event = refuse(why);
        refuse_for_good(ctx, &publisher, &message, event, notify_of(&job.spec)).await;
        return;
    }
    // Register before looking for a kill request: a kill sent in between
    // reaches either the marker check or the registration.
    let registration = ctx.attempts.register(due.run_id.as_str());
    let view = Attempt {
        ctx,
        message: &message,
        due: &due,
        job: &job,
        publisher: &publisher,
        number: attempt,
    };
    let run = RunContext {
        run_id: due.run_id.clone(),
        job_id: due.job_id.clone(),
        scheduled_at: due.scheduled_at,
        attempt,
        shard: due.shard.map(|index| (index, job.shards)),
        parent: due.parent.clone(),
    };
    // The storing of `started`, owning its copy of the event (it may go on
    // beside the call).
    let store_start = |event: RunEvent| {
        let (message, publisher) = (&message, &publisher);
        Box::pin(async move { publisher.publish(&event, store_budget(ctx), message).await })
    };
    // A held fire of a job that allows overlap, with a `nats` target, books
    // its call and records its start just before its instant, so that at the
    // instant only the call is left ([`crate::instant_calls`]). Without a
    // free slot then it goes on the usual way at the instant.
    let mut ahead = None;
    if let (
        Slot::At {
            fire_at,
            permits,
            hand_back,
        },
        ConcurrencyPolicy::Allow,
        Target::Nats(target),
    ) = (&slot, job.concurrency, &job.spec.target)
    {
        if !crate::hold::hold_until(ctx, &message, *fire_at - START_AHEAD, hand_back).await
            || killed_before_start(ctx, &message, &due, &job, &publisher).await
        {
            return;
        }
        if let Some((permit, call)) = book_call(ctx, &message, target, &run, *fire_at, permits) {
            registration.activate();
            let started = publisher.started(*fire_at, max_attempts);
            let mut store = store_start(started.clone());
            // Not going on withdraws the booking (dropped before the instant).
            let mut booked = Some(call);
            let Some(start) = record_start(&view, &mut store, &mut None, &mut booked).await else {
                return;
            };
            ahead = Some((permit, booked, started, store, start != Start::Storing));
        }
    }
    let (permit, booked, mut claim, started_at, started, mut store_started, stored_in_time) =
        match ahead {
            Some((permit, call, started, store, stored_in_time)) => {
                let at = started.at;
                (permit, call, None, at, started, store, stored_in_time)
            }
            None => {
                // A held fire takes its slot at its instant and then looks
                // for a kill request (in memory, [`crate::kill_markers`]): a
                // job paused or deleted while the fire was held (the ticker
                // marks such fires killed) is caught then. (A booked call's
                // kill request is looked for by the dispatcher.)
                let permit = match slot {
                    Slot::Now(permit) => permit,
                    Slot::At {
                        fire_at,
                        permits,
                        hand_back,
                    } => {
                        match crate::hold::wait(ctx, &message, fire_at, &permits, &hand_back).await
                        {
                            Some(permit) => permit,
                            None => return,
                        }
                    }
                };
                if killed_before_start(ctx, &message, &due, &job, &publisher).await {
                    return;
                }
                let mut claim = match job.concurrency {
                    ConcurrencyPolicy::Allow => None,
                    policy => match Box::pin(take_claim(&view, policy)).await {
                        Some(claim) => Some(claim),
                        None => return,
                    },
                };
                registration.activate();
                let started_at = ctx.clock.now();
                let started = publisher.started(started_at, max_attempts);
                let mut store = store_start(started.clone());
                let Some(start) = record_start(&view, &mut store, &mut claim, &mut None).await
                else {
                    return;
                };
                let stored_in_time = start != Start::Storing;
                (
                    permit,
                    None,
                    claim,
                    started_at,
                    started,
                    store,
                    stored_in_time,
                )
            }
        };
    // Per-run lines at debug: every run is in `JETCRON_RUNS` and ClickHouse,
    // and two info lines per run cost about 5 % of the CPU at 10,000 runs/s.
    debug!(target_type = job.spec.target.kind(), "attempt started");
    // An attempt running longer than `notify.running_longer_than` is told
    // to the job's alert channels, and so is its end.
    let alarm = job.spec.notify.as_ref().and_then(|n| {
        n.long_running_after()
            .map(|after| (n, after, started.clone()))
    });
    // The attempt stops counting as running (kills, `forbid` probes) as soon
    // as its target returns, not when its events are stored.
    let work = async {
        let supervised = supervise(
            ctx,
            &message,
            &job,
            &run,
            &registration,
            claim.as_mut(),
            booked,
        );
        let (ending, alarmed) = match &alarm {
            None => (supervised.await, false),
            Some((notify, after, started)) => {
                tokio::pin!(supervised);
                tokio::select! {
                    ending = &mut supervised => (ending, false),
                    _ = tokio::time::sleep(*after) => {
                        info!(after_ms = after.as_millis() as u64, "attempt running long, alerting");
                        if let Err(e) = Box::pin(notify::enqueue_long_running(&ctx.js, notify, job.spec.schedule_line(), started, false)).await {
                            warn!(error = %format!("{e:#}"), "cannot queue the long-running alert");
                        }
                        (supervised.await, true)
                    }
                }
            }
        };
        registration.recording();
        drop(permit);
        (ending, alarmed)
    };
    let (ending, alarmed) = if stored_in_time {
        work.await
    } else {
        let (ending, stored) = tokio::join!(work, &mut store_started);
        match stored {
            Ok(stored) if stored.duplicate => {
                warn!("another delivery started this attempt too (its start was stored first)")
            }
            Ok(_) => {}
            Err(e) => warn!(error = %format!("{e:#}"), "start of the attempt never stored"),
        }
        ending
    };
    drop(store_started);
    settle(&view, &ledger, budget, started_at, ending, claim).await;
    if let (true, Some((notify, _, started))) = (alarmed, &alarm) {
        if let Err(e) = Box::pin(notify::enqueue_long_running(
            &ctx.js,
            notify,
            job.spec.schedule_line(),
            started,
            true,
        ))
        .await
        {
            warn!(error = %format!("{e:#}"), "cannot queue the end of a long-running alert");
        }
    }
}

/// A held attempt's call booked with [`crate::instant_calls`].
struct BookedCall<'a> {
    target: &'a NatsTarget,
    at: DateTime<Utc>,
    booking: crate::instant_calls::Booking,
    /// Completion reports are expected from before the call is sent.
    reports: crate::completion_reports::Expected,
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
    permits: &std::sync::Arc<tokio::sync::Semaphore>,
) -> Option<(OwnedSemaphorePermit, BookedCall<'a>)> {
    let permit = permits.clone().try_acquire_owned().ok()?;
    let reports = ctx.completions.expect(run.run_id.as_str());
    let (headers, payload) = targets::nats::prepare(target, run);
    let booking = ctx.instant_calls.book(
        fire_at,
        run.run_id.as_str(),
        target.subject.clone().into(),
        headers,
        payload,
        message.lease().clone(),
    )?;
    Some((
        permit,
        BookedCall {
            target,
            at: fire_at,
            booking,
            reports,
        },
    ))
}

/// The outcome of a booked call, or why it was not sent. A kill request
/// found at the instant stops the attempt the way a kill during the call
/// does (through its registration), so it is recorded as killed.
async fn booked_outcome(
    ctx: &ExecutorContext,
    mut booking: crate::instant_calls::Booking,
    target: &NatsTarget,
    run: &RunContext,
) -> Result<Outcome, String> {
    use crate::instant_calls::Dispatched;
    match booking.answer().await {
        Some(Dispatched::Reply(reply)) => Ok(targets::nats::outcome(
            reply,
            target,
            ctx.config.output_limit,
        )),
        Some(Dispatched::Killed(marker)) => {
            info!(reason = %marker.reason, "run was killed before its instant, not calling it");
            ctx.attempts.kill(run.run_id.as_str(), &marker.reason);
            std::future::pending().await
        }
        Some(Dispatched::Unchecked(error)) => {
            Err(format!("cannot check for a kill request ({error})"))
        }
        Some(Dispatched::Withheld(why)) => Err(why),
        None => Err("the executor stopped before the fire's instant".into()),
    }
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
async fn record_start<F>(
    attempt: &Attempt<'_>,
    store: &mut std::pin::Pin<Box<F>>,
    claim: &mut Option<ClaimHandle>,
    booked: &mut Option<BookedCall<'_>>,
) -> Option<Start>
where
    F: std::future::Future<Output = anyhow::Result<crate::run_events::Stored>>,
{
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
            hand_back(attempt.message).await;
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

/// Take the overlap claim of `due`'s job under `policy` (`forbid` or
/// `replace`). `None` when this delivery is done with: skipped, a late
/// delivery of a run that ended, or handed back.
///
/// When the claim cannot vouch that no other delivery of this run ran it
/// (see [`crate::claim_state`]), `JETCRON_RUNS` says whether the run ended
/// and a probe whether another delivery still calls its target or records it
/// (which `JETCRON_RUNS` cannot show yet); only then is the claim taken, so
/// the job is not held while those answers come. A delivery that waited while
/// another delivery of its run held the claim checks the same once it holds it.
async fn take_claim(attempt: &Attempt<'_>, policy: ConcurrencyPolicy) -> Option<ClaimHandle> {
    let Attempt {
        ctx,
        message,
        due,
        job,
        publisher,
        number,
    } = *attempt;
    let max_attempts = job.max_attempts;
    let mut checked = false;
    loop {
        let overlap = Box::pin(claims::claim_for_run(
            ctx, message, job, due, number, policy, checked,
        ))
        .await;
        let claim = match overlap {
            Ok(Overlap::Claimed(handle)) => *handle,
            Ok(Overlap::Uncertain) => {
                if ran_elsewhere(ctx, message, due).await != Elsewhere::No {
                    return None;
                }
                checked = true;
                continue;
            }
            Ok(Overlap::RanAlready) => {
                info!("run already ended (its claim says so), settling a late delivery without running it");
                metrics::counter!("jetcron_executor_late_deliveries_total").increment(1);
                message.settle(AckKind::Ack).await;
                return None;
            }
            Ok(Overlap::Declined(holder)) => {
                // A later delivery of a fire skipped already (its ack lost
                // while the holder still runs) must not record a second skip.
                if number > 1
                    && ended_already(ctx, message, due, fire_since(message, due))
                        .await
                        .settled()
                {
                    return None;
                }
                info!(holder = %holder, "previous run still going, skipping this fire");
                let event = publisher.declined(
                    RunEventKind::Skipped,
                    ctx.clock.now(),
                    format!("run {holder} of this job is still going (concurrency: forbid)"),
                    max_attempts,
                );
                Box::pin(finish(
                    ctx,
                    publisher,
                    message,
                    event,
                    AckKind::Ack,
                    None,
                    None,
                ))
                .await;
                return None;
            }
            Err(e) => {
                warn!(error = %format!("{e:#}"), "cannot take the overlap claim, handing the run back");
                hand_back(message).await;
                return None;
            }
        };
        if claim.after_other_delivery() {
            match ran_elsewhere(ctx, message, due).await {
                Elsewhere::No => {}
                // Its outcome is stored: the claim can say so.
                Elsewhere::Ended => {
                    Box::pin(claim.release()).await;
                    return None;
                }
                // The claim stays as it is, for the delivery that refreshes it.
                Elsewhere::Maybe => return None,
            }
        }
        return Some(claim);
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

/// Whether another delivery of this run ran it, for a delivery the claim
/// cannot vouch for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Elsewhere {
    /// Not ended, and nobody calls it: this delivery may run it.
    No,
    /// It ended: the message is settled.
    Ended,
    /// Another delivery calls or records it (the message is left to it),
    /// or nobody could tell (the message is handed back).
    Maybe,
}

async fn ran_elsewhere(ctx: &ExecutorContext, message: &Delivery, due: &DueEvent) -> Elsewhere {
    match ended_already(ctx, message, due, fire_since(message, due)).await {
        RunEnd::NotYet => {}
        RunEnd::Ended => return Elsewhere::Ended,
        RunEnd::Unknown => return Elsewhere::Maybe,
    }
    let stage = Box::pin(claims::probe_run(&ctx.nats, due.run_id.as_str())).await;
    // (An executor that runs or records the run answers within
    // milliseconds; the wait is for when none does.)
    if stage != crate::running::Stage::Waiting {
        // That delivery settles the message; a nak from here would hand
        // its run out a third time (the server takes it from anyone).
        info!(
            "another delivery of this run calls its target or records it, leaving the fire to it"
        );
        return Elsewhere::Maybe;
    }
    Elsewhere::No
}

/// Run the target until it ends, times out, is killed or the executor shuts
/// down, keeping the delivery (and the claim) alive every
/// `progress_interval`, so a long run is not redelivered after `ack_wait`.
/// A delivery whose lease ran out before the call is not called: the fire
/// may be another delivery's by now.
async fn supervise(
    ctx: &ExecutorContext,
    message: &Delivery,
    job: &ValidJob,
    run: &RunContext,
    registration: &Registration,
    claim: Option<&mut ClaimHandle>,
    booked: Option<BookedCall<'_>>,
) -> Ending {
    if booked.is_none() && !message.is_ours() {
        return Ending::NotCalled("the delivery's lease ran out before the call".into());
    }
    if let (None, Some(why)) = (&booked, crate::call_gate::closed(ctx)) {
        return Ending::NotCalled(why);
    }
    let work = match booked {
        // The timeout counts from the instant the call is sent.
        Some(call) => futures::future::Either::Left(tokio::time::timeout(
            job.timeout + (call.at - ctx.clock.now()).to_std().unwrap_or_default(),
            async {
                let outcome = booked_outcome(ctx, call.booking, call.target, run).await?;
                let outcome = std::future::ready(outcome);
                Ok(targets::completion::run_expecting(ctx, run, call.reports, outcome).await)
            },
        )),
        None => futures::future::Either::Right(tokio::time::timeout(job.timeout, async {
            Ok(targets::run(ctx, &job.spec.target, run).await)
        })),
    };
    tokio::pin!(work);
    // Beside the work, not in turn with it: a keep-alive waiting for its
    // confirmation through an election must not hold the ending back.
    let keeping = keep_running(ctx, message, claim);
    tokio::pin!(keeping);
    tokio::select! {
        biased;
        _ = registration.killed.cancelled() => Ending::Killed(registration.reason()),
        _ = ctx.interrupt.cancelled() => Ending::Interrupted,
        result = &mut work => match result {
            Ok(Ok(outcome)) => Ending::Done(outcome),
            Ok(Err(why)) => Ending::NotCalled(why),
            Err(_) => Ending::TimedOut,
        },
        ending = &mut keeping => ending,
    }
}

/// Keep the delivery alive ([`Delivery::keep_alive_every`]) and extend the
/// overlap claim every `progress_interval`; ends only when another run took
/// the claim over.
async fn keep_running(
    ctx: &ExecutorContext,
    message: &Delivery,
    claim: Option<&mut ClaimHandle>,
) -> Ending {
    let keeping = message.keep_alive_every(ctx.config.progress_interval);
    let Some(claim) = claim else {
        match keeping.await {}
    };
    tokio::pin!(keeping);
    let mut ticks = tokio::time::interval(ctx.config.progress_interval);
    ticks.tick().await;
    loop {
        tokio::select! {
            never = &mut keeping => match never {},
            _ = ticks.tick() => {}
        }
        if !message.is_ours() {
            continue;
        }
        let until = ctx.clock.now() + claims::claim_ttl(ctx.config.progress_interval);
        // The claim's store may wait out its own election: the delivery is
        // kept alive meanwhile.
        let taken_over = tokio::select! {
            never = &mut keeping => match never {},
            taken_over = claim_taken_over(claim, until) => taken_over,
        };
        if let Some(holder) = taken_over {
            // Another run holds the job now (a `replace` fire that did not
            // reach us with its kill): stop, never overlap.
            return Ending::Killed(format!("replaced by run {holder} (concurrency: replace)"));
        }
    }
}

/// Extend `claim` to `until`; the run that holds the job instead, when
/// another took it over.
async fn claim_taken_over(claim: &mut ClaimHandle, until: DateTime<Utc>) -> Option<String> {
    if Box::pin(claim.extend(until)).await {
        return None;
    }
    Box::pin(claim.taken_over_by()).await
}

/// Record how the attempt ended and settle its message: [`ending::decide`]
/// says what follows, this carries it out in order (ledger, run event and
/// notification, settle, claim, ledger clean-up).
async fn settle(
    attempt: &Attempt<'_>,
    ledger: &Ledger<'_>,
    budget: Budget,
    started_at: DateTime<Utc>,
    ending: Ending,
    claim: Option<ClaimHandle>,
) {
    let Attempt {
        ctx,
        message,
        due,
        job,
        publisher,
        ..
    } = *attempt;
    let finished_at = ctx.clock.now();
    let try_number = budget.try_number;
    let decision = ending::decide(
        &ending,
        try_number,
        Policy {
            max_attempts: job.max_attempts,
            next_delay: job.retry_delay(try_number + 1, &due.msg_id()),
            timeout: job.timeout,
            notifies: job.spec.notify.is_some(),
        },
    );
    let outcome = match ending {
        Ending::Done(outcome) => outcome,
        _ => Outcome::failed(decision.error.clone().unwrap_or_default()),
    };
    // A delivery whose lease ran out records nothing: its fire may be
    // another delivery's by now ([`crate::lease`]).
    if !message.may_record() {
        return;
    }
    log_decision(&decision, &outcome);
    match decision.ledger_before {
        // Written before the nak: the next delivery must know this try
        // counted. If it cannot be, the retry still waits its backoff; it then
        // counts as a handed-back delivery (bounded), not as a try.
        Some(LedgerWrite::Failure(n)) => {
            if let Err(e) = ledger.record_failure(n).await {
                warn!(error = %format!("{e:#}"), "cannot record the failed try");
            }
        }
        // A redelivery of this message (its term lost) must not run again.
        Some(LedgerWrite::LastFailure(n)) => Box::pin(ledger.record_last_failure(n)).await,
        None => {}
    }
    let mut event = publisher.outcome(
        decision.kind,
        decision.outcome,
        started_at,
        finished_at,
        &outcome,
        job.max_attempts,
    );
    let retry_at = decision
        .retry_in
        .and_then(|d| chrono::Duration::from_std(d).ok())
        .map(|d| finished_at + d);
    event.retry_at = retry_at;
    let settle = match decision.settle {
        Settle::Ack => AckKind::Ack,
        Settle::Nak(delay) => AckKind::Nak(delay),
        Settle::Term => AckKind::Term,
    };
    // Failures notify as the decision says; a success is news for the alert
    // channels only (it may end an open incident).
    let succeeded = event.kind == RunEventKind::Succeeded;
    let notify = notify_of(&job.spec)
        .filter(|(n, _)| decision.notify || (succeeded && !n.channels.is_empty()));
    let called = decision.called_and_over.map(|failed| (ledger, failed));
    finish(ctx, publisher, message, event, settle, notify, called).await;
    if !message.is_ours() {
        return;
    }
    match (decision.claim, claim) {
        (ClaimStep::Release, Some(claim)) => Box::pin(claim.release()).await,
        // Hold the claim through the wait: the run is not over.
        (ClaimStep::HoldForRetry, Some(mut claim)) => {
            if let Some(retry_at) = retry_at {
                Box::pin(claim.extend(retry_at + claims::claim_ttl(ctx.config.progress_interval)))
                    .await;
            }
        }
        _ => {}
    }
    if decision.forget_ledger {
        Box::pin(ledger.forget()).await;
    }
}

/// The log line of a decision.
fn log_decision(decision: &Decision, outcome: &Outcome) {
    let error = outcome.error.as_deref().unwrap_or("");
    let ended = decision.outcome.as_str();
    match (decision.kind, decision.outcome) {
        (RunEventKind::Succeeded, _) => debug!("attempt succeeded"),
        (RunEventKind::Killed, _) => info!(error, "attempt killed"),
        (_, AttemptOutcome::Interrupted) => {
            warn!(error, "attempt not called or interrupted, handing it back")
        }
        (RunEventKind::Retrying, _) => warn!(
            error,
            outcome = ended,
            delay_ms = decision.retry_in.unwrap_or_default().as_millis() as u64,
            "attempt failed, will retry"
        ),
        _ => warn!(error, outcome = ended, "last attempt failed"),
    }
}

async fn release(claim: Option<ClaimHandle>) {
    if let Some(claim) = claim {
        Box::pin(claim.release()).await;
    }
}

/// Publish the outcome event (and queue the failure notification), then
/// settle the message. If the event cannot be stored, the message is handed
/// back so the run is not silently lost.
async fn finish(
    ctx: &ExecutorContext,
    publisher: &RunEventPublisher<'_>,
    message: &Delivery,
    event: RunEvent,
    settle: AckKind,
    notify: Option<(&job::NotifyPolicy, &str)>,
    called: Option<(&Ledger<'_>, u32)>,
) {
    if !message.may_record() {
        return;
    }
    let store = publisher.publish(&event, store_budget(ctx), message);
    let stored = match called {
        // The target was called: if the event is slow to be stored, write the
        // run's end in its ledger meanwhile, so that a redelivery (this
        // executor dying before the store) does not call it again; and if
        // it cannot be stored, before the run is handed back.
        Some((ledger, failed)) => {
            tokio::pin!(store);
            let mut waited = std::time::Duration::ZERO;
            let mut in_ledger = false;
            let stored = loop {
                match tokio::time::timeout(STARTED_WAIT, &mut store).await {
                    Ok(stored) => break stored,
                    Err(_) => waited += STARTED_WAIT,
                }
                if ctx
                    .runs_pulse
                    .outcome_is_slow(waited, tokio::time::Instant::now())
                    && message.may_record()
                {
                    in_ledger = record_end(ledger, failed, &event).await;
                    break store.await;
                }
            };
            if stored.is_err() && !in_ledger && message.may_record() {
                record_end(ledger, failed, &event).await;
            }
            stored
        }
        None => store.await,
    };
    if let Err(e) = stored {
        warn!(error = %format!("{e:#}"), "cannot record outcome, handing the run back");
        hand_back(message).await;
        return;
    }
    if !message.may_record() {
        return;
    }
    if let Some((notify, schedule)) = notify {
        if let Err(e) = Box::pin(notify::enqueue(&ctx.js, notify, schedule, &event)).await {
            warn!(error = %format!("{e:#}"), "cannot queue the failure notification, handing the run back");
            hand_back(message).await;
            return;
        }
    }
    message.settle(settle).await;
}

/// Write the run's end into its ledger; whether it was written.
async fn record_end(ledger: &Ledger<'_>, failed: u32, event: &RunEvent) -> bool {
    match ledger.record_end(failed, event).await {
        Ok(()) => true,
        Err(e) => {
            warn!(error = %format!("{e:#}"), "cannot record the run's end in its ledger");
            false
        }
    }
}

/// A job's notification policy with its schedule line, if it has one.
fn notify_of(spec: &job::JobSpec) -> Option<(&job::NotifyPolicy, &str)> {
    spec.notify.as_ref().map(|n| (n, spec.schedule_line()))
}

/// Hand the due event back because NATS failed us (not the target): it
/// comes again after [`tries::handback_delay`], growing with each delivery.
async fn hand_back(message: &Delivery) {
    let delivery = message
        .message()
        .info()
        .map(|i| u32::try_from(i.delivered).unwrap_or(u32::MAX))
        .unwrap_or(1);
    Box::pin(message.settle(AckKind::Nak(Some(tries::handback_delay(delivery))))).await;
}

/// How long before its instant a held fire of a job that allows overlap
/// records its start (longer than [`STARTED_WAIT`], so that the call at
/// the instant does not wait for it). Far enough that the projector's
/// batch of these `started` events (it waits `--batch-wait`, 200 ms, for
/// more) is in ClickHouse well before the instant: at 250 ms it landed in
/// the last 100 ms before it, and the seconds whose calls were handed over
/// two to three times slower than usual were those (docs/benchmarks.md).
const START_AHEAD: chrono::Duration = chrono::Duration::milliseconds(600);

/// How long the call of the target waits for the `started` event to be
/// stored (it is stored meanwhile, before the outcome, when this is not enough).
const STARTED_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// How long a run event may take to be stored before the attempt gives up
/// and hands its run back: longer than an election (4-9 s); the delivery is
/// kept alive meanwhile, and nothing is stored once its lease is gone.
fn store_budget(ctx: &ExecutorContext) -> std::time::Duration {
    ctx.config.ack_wait.max(std::time::Duration::from_secs(15))
}

/// What a look at `JETCRON_RUNS` found about the run of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunEnd {
    /// No terminal event: the run has not ended.
    NotYet,
    /// It ended: the message was settled here without running anything.
    Ended,
    /// The lookup failed: the message was handed back.
    Unknown,
}

impl RunEnd {
    /// Whether this delivery is done with (settled or handed back).
    fn settled(self) -> bool {
        self != RunEnd::NotYet
    }
}

/// Where the events of `due`'s run can start (see [`Since::fire`]).
fn fire_since(message: &Delivery, due: &DueEvent) -> Since {
    Since::fire(
        due.scheduled_at,
        message.message().info().ok().map(|i| i.published),
        START_AHEAD,
    )
}

/// Whether the run of `due` already ended (a late redelivery): then the
/// message is settled here without running anything. A failed lookup hands
/// the message back.
async fn ended_already(
    ctx: &ExecutorContext,
    message: &Delivery,
    due: &DueEvent,
    since: Since,
) -> RunEnd {
    // A long search (a backfilled fire of a busy job reads much of its
    // history) must not let the message go to another executor meanwhile,
    // nor one that waits out an election of `JETCRON_RUNS`.
    let ended = crate::kept_alive::through_elections(ctx, message, "run's end", || {
        ended::run_ended(&ctx.js, &due.job_id, due.run_id.as_str(), due.shard, since)
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use jetcron_core::events::{RunId, Trigger};

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

    fn due() -> DueEvent {
        let job = job::parse_job(
            br#"{"id":"j1","schedule":"@daily","target":{"type":"shell","command":"true"}}"#,
            None,
        )
        .expect("job");
        let at = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("t");
        DueEvent {
            run_id: RunId::for_fire("j1", at),
            job_id: "j1".into(),
            scheduled_at: at,
            trigger: Trigger::Schedule,
            pool: "default".into(),
            job_revision: 1,
            job: job.spec,
            shard: None,
            parent: None,
        }
    }

    const SUBJECT: &str = "jetcron.due.default.j1";

    #[test]
    fn well_formed_due_events_pass() {
        assert_eq!(check_due_event(&due(), SUBJECT), Ok(()));
    }

    #[test]
    fn malformed_due_events_are_refused() {
        let mut bad_run_id = due();
        bad_run_id.run_id = RunId("r\r\nX: 1".into());
        let mut uppercase_run_id = due();
        uppercase_run_id.run_id = RunId(due().run_id.as_str().to_uppercase());
        let mut bad_job_id = due();
        bad_job_id.job_id = "evil x".into();
        let mut mismatched = due();
        mismatched.job.id = "other".into();
        let mut bad_pool = due();
        bad_pool.pool = "a.b".into();
        for (event, subject, needle) in [
            (bad_run_id, SUBJECT, "not a UUID"),
            (uppercase_run_id, SUBJECT, "lowercase"),
            (bad_job_id, SUBJECT, "job_id"),
            (mismatched, SUBJECT, "differs from job_id"),
            (bad_pool, SUBJECT, "pool"),
            (due(), "jetcron.due.default.other", "expected"),
        ] {
            let why = check_due_event(&event, subject).expect_err(needle);
            assert!(why.contains(needle), "{why}");
        }
    }
}
