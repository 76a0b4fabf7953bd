//! One delivery of a due event: one attempt of its run (or of one shard).
//!
//! An attempt is a pipeline of stages around one `Attempt`:
//! `admit` (decode and check, the namespace's target policy, split a sharded fire into its parts, read
//! the retry budget, refuse deliveries beyond `max_attempts` or of a run
//! that ended elsewhere) → register (so kills reach us) → `start` (honour
//! an earlier kill request, take the overlap claim of `forbid` / `replace`,
//! record `started`) → `call` (run the target under the job's timeout,
//! keeping the message and claim alive) → `settle` (record the outcome,
//! then ack on success, nak with the backoff delay for a retry, or term).
//! `elsewhere` answers, for a redelivery, whether another delivery of its
//! run ran it; `checks` what a due event must hold before anything runs.
//! The attempt number in events is JetStream's delivery count, so an attempt
//! lost with a crashed executor shows as its own attempt; what counts against
//! `max_attempts` is the retry budget of [`crate::tries`], in which only
//! attempts that failed or timed out count.
//!
//! Steps a usual run does not take (claims, kill-request reads, hand-backs,
//! notifications, refusals) are boxed: an attempt's future is as large as
//! its deepest step, and at 10,000 runs a second the copies of a 24 KB
//! future showed in the profile (docs/benchmarks.md, issue 16's sixth
//! round). A rare step boxes its own I/O (`hand_back`, `ended_already`,
//! `ran_elsewhere`, `refuse_for_good`), so its callers await it plainly;
//! steps of other modules are boxed where awaited.

mod admit;
mod call;
mod checks;
mod elsewhere;
mod overlap;
mod settle;
mod start;

use async_nats::jetstream::message::AckKind;
use chrono::{DateTime, Utc};
use jetcron_core::events::{DueEvent, RunEvent};
use jetcron_core::job::{self, ValidJob};
use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;
use tracing::{debug, warn, Instrument as _};

use crate::fair_slots::{FairSlots, SlotPermit};
use crate::lease::Delivery;
use crate::namespace_slots::HeldSlot;
use crate::run_events::RunEventPublisher;
use crate::stages::Stage;
use crate::targets::RunContext;
use crate::{tries, ExecutorContext};
use settle::{finish, Close};

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

/// When an attempt may start and where its call slot comes from: now (its
/// pull loop's intake permit in hand), or at the instant of a due event
/// stored ahead of its time ([`crate::hold`]). Either takes a call slot of
/// [`FairSlots`] for its namespace before it calls, waiting its turn (kept
/// alive) while none is free to it. A held attempt reads its retry ledger
/// when pulled; at the instant it takes its slot and looks for a kill
/// request (in memory; a `forbid` or `replace` fire looks first and takes
/// its claim before its slot, see [`overlap`]), records its start and
/// calls.
pub struct Slot {
    pub when: When,
    pub slots: Arc<FairSlots>,
    /// Cancelled at a shutdown once this executor pulls no more (so that
    /// no fire it hands back comes to it again).
    pub hand_back: tokio_util::sync::CancellationToken,
}

/// When an attempt may start.
pub enum When {
    /// Now, holding its intake permit (`--max-pulled`).
    Now(OwnedSemaphorePermit),
    /// At this instant, held without an intake permit.
    At(DateTime<Utc>),
}

/// What a call holds while its target is called: its place among the
/// executor's call slots (with its intake permit) and, where its
/// namespace's policy sets `max_concurrent_runs`, one of the namespace's
/// run slots. Dropped when the target returns.
pub struct CallSlot {
    _local: SlotPermit,
    _run_slot: Option<HeldSlot>,
}

/// When a fire takes its namespace's run slot (`max_concurrent_runs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunSlot {
    /// Before its call slot, so that waiting for it holds no call slot (a
    /// `forbid` or `replace` fire, after its job's overlap claim: see
    /// [`overlap`]).
    First,
    /// Never: the split of a sharded fire calls nothing.
    Never,
}

impl Slot {
    /// The call slot of `due`, at its instant (with the namespace's run
    /// slot first when `run_slot` says so; waiting for it holds no call
    /// slot, nor the intake permit); `None` when the delivery was handed
    /// back meanwhile (a shutdown) or its lease lost.
    async fn taken(
        self,
        ctx: &ExecutorContext,
        message: &Delivery,
        due: &DueEvent,
        run_slot: RunSlot,
    ) -> Option<CallSlot> {
        let ready = self.at_instant(ctx, message).await?;
        ready.call_slot(ctx, message, due, run_slot).await
    }

    /// Wait for the instant of a fire stored ahead (at once for one due
    /// now); `None` when the delivery was handed back meanwhile or its
    /// lease lost.
    async fn at_instant(self, ctx: &ExecutorContext, message: &Delivery) -> Option<Ready> {
        let intake = match self.when {
            When::Now(intake) => Some(intake),
            When::At(fire_at) => {
                if !crate::hold::held_until(ctx, message, fire_at, &self.hand_back).await {
                    return None;
                }
                None
            }
        };
        Some(Ready {
            intake,
            slots: self.slots,
            hand_back: self.hand_back,
        })
    }
}

/// A fire whose instant came, before it takes its call slot: what
/// [`Ready::call_slot`] takes it with.
struct Ready {
    /// The pull loop's intake permit, for a fire pulled when due.
    intake: Option<OwnedSemaphorePermit>,
    slots: Arc<FairSlots>,
    hand_back: tokio_util::sync::CancellationToken,
}

impl Ready {
    /// The call slot of `due` (with the namespace's run slot first when
    /// `run_slot` says so; waiting for that holds no call slot, nor the
    /// intake permit); `None` when the delivery was handed back meanwhile
    /// (a shutdown) or its lease lost.
    async fn call_slot(
        self,
        ctx: &ExecutorContext,
        message: &Delivery,
        due: &DueEvent,
        run_slot: RunSlot,
    ) -> Option<CallSlot> {
        let namespace = job::name::namespace_of(&due.job_id);
        let mut intake = self.intake;
        let limited =
            run_slot == RunSlot::First && ctx.policies.max_concurrent_runs(namespace).is_some();
        let run_slot = match limited {
            false => None,
            true => {
                // A namespace's backlog beyond its limit does not hold the
                // pull back for other namespaces.
                intake = None;
                let taking = ctx.namespace_slots.take(
                    ctx,
                    message,
                    namespace,
                    due.run_id.as_str(),
                    &self.hand_back,
                );
                Box::pin(taking).await?
            }
        };
        let local =
            crate::hold::free_slot(ctx, message, &self.slots, namespace, &self.hand_back).await?;
        Some(CallSlot {
            _local: local.with_intake(intake),
            _run_slot: run_slot,
        })
    }
}

impl From<SlotPermit> for CallSlot {
    fn from(local: SlotPermit) -> Self {
        Self {
            _local: local,
            _run_slot: None,
        }
    }
}

/// Handle one due-event message to the end (ack, nak or term). `slot` says
/// when it may start and where its call slot comes from: its place among
/// `--max-in-flight` calls. It bounds the targets being called, so it is
/// given back when the target returns, and the storing of the outcome and
/// the settling of the message (which wait out leader elections) do not
/// keep other fires from their targets.
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
    if let Err(why) = checks::check_due_event(&due, &message.message().subject) {
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
    let close = Close {
        settle: AckKind::Term,
        notify,
        called: None,
    };
    Box::pin(finish(ctx, publisher, message, event, close)).await;
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

/// The stages of one attempt, in turn; each returns `None` (or ends the
/// attempt itself) when the delivery is done with.
async fn run_attempt(
    ctx: &ExecutorContext,
    message: Delivery,
    due: DueEvent,
    numbers: DeliveryNumbers,
    slot: Slot,
) {
    crate::stages::reached(Stage::Pulled);
    let publisher = RunEventPublisher::new(ctx, &due, numbers.number);
    // Register before looking for a kill request (a kill sent in between
    // reaches either the marker check or the registration), and before a
    // redelivery probes for other deliveries of its run (`elsewhere.rs`).
    let registration = ctx.attempts.register(due.run_id.as_str());
    let Some(admit::Admitted {
        job,
        slot,
        ledger,
        budget,
    }) = admit::admit(
        ctx,
        &message,
        &due,
        admit::Delivered { numbers, slot },
        &publisher,
        &registration,
    )
    .await
    else {
        return;
    };
    let attempt = Attempt {
        ctx,
        message: &message,
        due: &due,
        job: &job,
        publisher: &publisher,
        number: numbers.number,
    };
    let run = RunContext {
        run_id: due.run_id.clone(),
        job_id: due.job_id.clone(),
        scheduled_at: due.scheduled_at,
        attempt: numbers.number,
        shard: due.shard.map(|index| (index, job.shards)),
        parent: due.parent.clone(),
    };
    let Some(mut started) = start::start(&attempt, &run, slot, &registration).await else {
        return;
    };
    // Per-run lines at debug: every run is in `JETCRON_RUNS` and ClickHouse,
    // and two info lines per run cost about 5 % of the CPU at 10,000 runs/s.
    debug!(target_type = job.spec.target.kind(), "attempt started");
    let called = call::call(&attempt, &run, &registration, &mut started).await;
    let claim = started.claim.take();
    settle::settle(&attempt, &ledger, budget, started.at, called.ending, claim).await;
    crate::stages::reached(Stage::Settled);
    if called.alarmed {
        call::alert_long_run_ended(&attempt, &started.event).await;
    }
}

/// A job's notification policy with its schedule line, if it has one.
fn notify_of(spec: &job::JobSpec) -> Option<(&job::NotifyPolicy, &str)> {
    spec.notify.as_ref().map(|n| (n, spec.schedule_line()))
}

/// Hand the due event back because NATS failed us (not the target): it
/// comes again after [`tries::handback_delay`], growing with each delivery.
async fn hand_back(message: &Delivery) {
    hand_back_after(message, tries::handback_delay).await;
}

/// Hand the due event back because JetStream does not answer through this
/// executor's server: it comes again after
/// [`tries::silence_handback_delay`], which grows by a second a delivery.
async fn hand_back_for_silence(message: &Delivery) {
    hand_back_after(message, tries::silence_handback_delay).await;
}

/// Nak the due event with the delay `delay_of` gives its delivery number.
async fn hand_back_after(message: &Delivery, delay_of: fn(u32) -> std::time::Duration) {
    let delivery = message
        .message()
        .info()
        .map(|i| u32::try_from(i.delivered).unwrap_or(u32::MAX))
        .unwrap_or(1);
    Box::pin(message.settle(AckKind::Nak(Some(delay_of(delivery))))).await;
}

/// How long a run event may take to be stored before the attempt gives up
/// and hands its run back: longer than an election (4-9 s); the delivery is
/// kept alive meanwhile, and nothing is stored once its lease is gone.
fn store_budget(ctx: &ExecutorContext) -> std::time::Duration {
    ctx.config.ack_wait.max(std::time::Duration::from_secs(15))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::running::Registration;
    use crate::tries::{Budget, Ledger};

    /// The size of the future a function of one argument list returns,
    /// without calling it (`'static` stands for every lifetime).
    macro_rules! future_size {
        ($function:expr, $($argument:ty),*) => {{
            fn size<F: std::future::Future>(_: impl FnOnce($($argument),*) -> F) -> usize {
                std::mem::size_of::<F>()
            }
            size($function)
        }};
    }

    /// Every attempt's future is moved into its task; at 10,000 runs a
    /// second the copies of a 24 KB future showed in the profile, and the
    /// pipeline of stages first made it 32 KB (21 KB before it), with 5-13 %
    /// more CPU per run at saturation (docs/benchmarks.md): the target's
    /// call, passed on by value through the alerting and a join, was laid
    /// out more than once. Boxed, it is 19 KB; each stage's share is
    /// printed, and the whole is held under 20 KB.
    #[test]
    fn an_attempts_future_stays_small() {
        let stages = [
            (
                "handle",
                future_size!(handle, &'static ExecutorContext, Delivery, Slot),
            ),
            (
                "admit",
                future_size!(
                    admit::admit,
                    &'static ExecutorContext,
                    &'static Delivery,
                    &'static DueEvent,
                    admit::Delivered,
                    &'static RunEventPublisher<'static>,
                    &'static Registration
                ),
            ),
            (
                "start",
                future_size!(
                    start::start,
                    &'static Attempt<'static>,
                    &'static RunContext,
                    Slot,
                    &'static Registration
                ),
            ),
            (
                "call",
                future_size!(
                    call::call,
                    &'static Attempt<'static>,
                    &'static RunContext,
                    &'static Registration,
                    &'static mut start::Started<'static>
                ),
            ),
            (
                "settle",
                future_size!(
                    settle::settle,
                    &'static Attempt<'static>,
                    &'static Ledger<'static>,
                    Budget,
                    DateTime<Utc>,
                    crate::end_decision::Ending,
                    Option<crate::claims::ClaimHandle>
                ),
            ),
        ];
        for (stage, size) in stages {
            println!("{stage}: {size} bytes");
        }
        let whole = stages[0].1;
        assert!(
            whole < 20_480,
            "an attempt's future is {whole} bytes: box the stage that grew"
        );
    }
}
