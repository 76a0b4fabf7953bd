//! One pull loop per pool: pull due events within the intake limit
//! (`--max-pulled`) and start an attempt for each, or hold one stored ahead
//! until its instant. Attempts take their call slots
//! ([`crate::fair_slots`], `--max-in-flight`) for their namespaces apart from
//! the intake, so that the fires of a namespace that fill every slot do not
//! keep another namespace's fires from being pulled.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull};
use futures::StreamExt as _;
use jetcron_io::retry::{LogLimiter, RetryDelay};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use crate::fair_slots::FairSlots;
use crate::{ack_deadlines, attempt, hold, lease, ExecutorConfig, ExecutorContext};

/// How often a pull loop looks again at a closed call gate.
const CLOCK_RECHECK: Duration = Duration::from_millis(250);

/// How long a pull request waits at the server for due events. A loop
/// that stops reads its open request to its end, so this bounds what a
/// stop waits for; an idle executor asks again this often. (1 s made
/// `executor_failover::an_executor_killed_mid_run_…` fail 2 of 8 runs beside
/// another test, an orphaned shell finishing its command, for a reason not
/// found; it passed 10 of 10 with 5 s.)
const PULL_EXPIRES: Duration = Duration::from_secs(5);

/// How long a pull request waits with leases counted at `ack_wait` (the
/// shortest a delivery has): at most a third of it. A delivery's lease
/// counts from when its request was sent ([`lease`]), so a message that
/// came at the end of a request waiting longer (5 s, with a 3 s ack wait)
/// was born with its lease run out.
fn pull_expires(ack_wait: Duration) -> Duration {
    PULL_EXPIRES.min(ack_wait / 3)
}

/// This executor's waits.
pub(crate) fn deadlines(config: &ExecutorConfig) -> ack_deadlines::AckDeadlines {
    ack_deadlines::AckDeadlines::new(config.ack_wait, config.redelivery_ack_wait)
}

/// What one pull loop pulls: a pool's consumer, at most `max_batch` at a
/// time.
pub(crate) struct PoolPull {
    pub(crate) pool: String,
    pub(crate) consumer: jetstream::consumer::PullConsumer,
    pub(crate) max_batch: usize,
}

/// When a pull loop stops, and when the fires it holds are handed back:
/// only after every pull loop stopped (see [`run`]).
pub(crate) struct PullStops {
    pub(crate) pulling: CancellationToken,
    pub(crate) hand_back: CancellationToken,
}

/// Pull due events of one pool and start an attempt for each, within the
/// executor's intake limit, until `shutdown`.
///
/// A batch asks for exactly as many messages as it holds free intake
/// permits (at most `max_batch`), so a pulled message never waits in a
/// buffer (where its `ack_wait` would run out and JetStream would hand it to
/// another executor); one that waits for a call slot is kept alive
/// ([`hold::free_slot`]). A due event stored ahead of its time ([`hold`])
/// gives its permit back at once and waits without one, until
/// `stops.hand_back` hands it back.
pub(crate) async fn pull_loop(
    ctx: Arc<ExecutorContext>,
    pulled: PoolPull,
    permits: Arc<Semaphore>,
    slots: Arc<FairSlots>,
    tasks: TaskTracker,
    stops: PullStops,
) {
    let PoolPull {
        pool,
        mut consumer,
        max_batch,
    } = pulled;
    let PullStops {
        pulling: shutdown,
        hand_back,
    } = stops;
    let mut delay = RetryDelay::nats();
    let mut failures = LogLimiter::per_10s();
    let waits = pool_waits(&mut consumer, &ctx.config, &pool);
    while !shutdown.is_cancelled() {
        if crate::call_gate::closed(&ctx).is_some() {
            // Nothing is pulled that could not be called: another executor
            // holds the fires meanwhile.
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(CLOCK_RECHECK) => continue,
            }
        }
        let first = tokio::select! {
            _ = shutdown.cancelled() => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let mut reserved = vec![first];
        while reserved.len() < max_batch {
            match permits.clone().try_acquire_owned() {
                Ok(p) => reserved.push(p),
                Err(_) => break,
            }
        }
        // Raced against the stop: sending the request waits for room in
        // the client's command queue, which stays full while the connection
        // is away, and a stop must not wait for NATS to come back. Given up
        // there, the request was not sent (the queue's send is cancel-safe),
        // so no due event goes to a subscription nobody reads.
        // The server hands nothing out for this request before it is sent:
        // the leases of what it brings count from here.
        let requested_at = tokio::time::Instant::now();
        let batch = tokio::select! {
            _ = shutdown.cancelled() => break,
            batch = consumer
                .batch()
                .max_messages(reserved.len())
                .expires(pull_expires(waits.leases.shortest()))
                .messages() => batch,
        };
        let mut messages = match batch {
            Ok(messages) => messages,
            Err(e) => {
                // No leader for the consumer (an election), or NATS away.
                if let Some(failures) = failures.admit() {
                    warn!(pool, failures, error = %e, "cannot pull due events, retrying");
                }
                drop(reserved);
                if delay.sleep(&shutdown).await {
                    break;
                }
                continue;
            }
        };
        // At a shutdown the open request is read to its end (filled or
        // expired): what the server sends it meanwhile is handled as usual
        // (started, or held and handed back once every loop ended). Dropped
        // unread, those messages were lost with this process until
        // `ack_wait`.
        let mut stopping = false;
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled(), if !stopping => {
                    stopping = true;
                    continue;
                }
                next = messages.next() => next,
            };
            match next {
                Some(Ok(message)) => {
                    delay.reset();
                    failures.reset();
                    let message = lease::Delivery::pulled(
                        message,
                        requested_at,
                        waits,
                        ctx.nats.clone(),
                        ctx.ack_replies.clone(),
                    );
                    let Some(permit) = reserved.pop() else {
                        // More than asked for: hand it straight back.
                        message.settle(jetstream::AckKind::Nak(None)).await;
                        continue;
                    };
                    let ctx = ctx.clone();
                    // Stored ahead: held without a permit, prepared meanwhile.
                    let when = match hold::until(&ctx, message.message()) {
                        Some(fire_at) => attempt::When::At(fire_at),
                        None => attempt::When::Now(permit),
                    };
                    let slot = attempt::Slot {
                        when,
                        slots: slots.clone(),
                        hand_back: hand_back.clone(),
                    };
                    // The attempt's future (about 20 KB) is built on the
                    // heap once; spawned by value, it was copied whole two
                    // or three times per fire (perf: `memcpy` under
                    // `tokio::spawn`, docs/benchmarks.md).
                    tasks.spawn(async move {
                        Box::pin(run_attempt(&ctx, message, slot)).await;
                    });
                }
                Some(Err(e)) => {
                    if let Some(failures) = failures.admit() {
                        warn!(pool, failures, error = %e, "pulling due events failed");
                    }
                    if delay.sleep(&shutdown).await {
                        break;
                    }
                    break;
                }
                None => break,
            }
        }
    }
}

/// The waits of `consumer`: its own, for naks, and the ones its deliveries'
/// leases count with, the consumer's (it may have been made by an executor
/// with another `--ack-wait`) or this executor's where those are shorter.
fn pool_waits(
    consumer: &mut jetstream::consumer::Consumer<pull::Config>,
    config: &ExecutorConfig,
    pool: &str,
) -> lease::PoolWaits {
    let info = &consumer.cached_info().config;
    let consumers = ack_deadlines::AckDeadlines::of_consumer(info.ack_wait, &info.backoff);
    let ours = deadlines(config);
    if consumers != ours {
        warn!(
            pool,
            consumer_ack_wait_ms = consumers.first.as_millis() as u64,
            consumer_redelivery_ack_wait_ms = consumers.redelivered.as_millis() as u64,
            ack_wait_ms = ours.first.as_millis() as u64,
            redelivery_ack_wait_ms = ours.redelivered.as_millis() as u64,
            "the pool's consumer has other ack waits than this executor's --ack-wait and --redelivery-ack-wait; give every executor of a pool the same"
        );
    }
    lease::PoolWaits {
        consumer: consumers,
        leases: consumers.min(ours),
    }
}

/// One attempt, counted in `jetcron_executor_in_flight`. Its call slot
/// (and intake permit) is given back as soon as its target returns (see
/// [`attempt::handle`]).
async fn run_attempt(ctx: &ExecutorContext, message: lease::Delivery, slot: attempt::Slot) {
    let in_flight = metrics::gauge!("jetcron_executor_in_flight");
    in_flight.increment(1.0);
    attempt::handle(ctx, message, slot).await;
    in_flight.decrement(1.0);
}
