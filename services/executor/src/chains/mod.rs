//! Chains: when a run ends, the jobs that follow its job (`after`) start.
//!
//! Every executor shares the durable consumer `chains` on `JETCRON_RUNS`,
//! filtered to the events that end a run (`succeeded`, `failed`,
//! `timed_out`, `killed`). For each, the [`index::ChainIndex`] (a watch of
//! `jetcron_jobs` holding the chained jobs) says which jobs follow; each one
//! whose `on` matches gets a due event, exactly as a scheduled fire does,
//! with trigger `chain`, the parent run in `parent`, and a run id derived
//! from (child, parent run) ([`chain::chained_run_id`]). Only once every
//! child's event is stored is the run event acknowledged.
//!
//! The consumer is made only once some job names a parent (before that
//! every run's end would be delivered to the executors and acked for
//! nothing: a message out and one in per run, about an eighth of what a
//! run costs nats-server). The executor that first holds a chained job
//! makes it, starting at the run events stored from two seconds before the
//! oldest chained job it holds was written (at most ten minutes back, the
//! due stream's duplicate window): a parent run that ends after its child
//! was written is not missed for the moment the consumer took to be made,
//! nor for a retry of its making. Once made it stays, and an executor that
//! holds no chained job looks for it every 5 s and reads it once it is
//! there, so run endings do not pile up unread while executors run.
//!
//! Exactly once per parent run: a run event handed out again (an executor
//! died, an ack was lost) publishes the same due events again with the same
//! `Nats-Msg-Id`, and `JETCRON_DUE` keeps one within its duplicate window
//! (10 minutes; redelivery comes after 30 s). From there a chained run is a
//! run like any other: retries, claims, alerts.
//!
//! A sharded parent run ends when its last shard does, or as soon as one
//! fails; the run's events are read back and folded the way the gateway
//! does ([`run_summary::summarize`]) to tell. A paused child is not started
//! (its chained run is not kept for later); a child the executor's index
//! does not know yet (created a moment before the parent ended) is not
//! started either.

pub mod index;

use std::time::Duration;

use async_nats::jetstream::context::{ConsumerInfoError, ConsumerInfoErrorKind};
use async_nats::jetstream::{
    self, consumer::pull, consumer::DeliverPolicy, message::AckKind, Message,
};
use chrono::{DateTime, Utc};
use jetcron_core::chain;
use jetcron_core::events::{DueEvent, ParentRun, RunEvent, RunEventKind, Trigger};
use jetcron_core::run_summary;
use jetcron_core::subjects;
use jetcron_io::due;
use jetcron_io::retry::RetryDelay;
use jetcron_io::topology;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::run_end_lookup::{self, Since};
use crate::ExecutorContext;
use index::{ChainIndex, ChainedJob};

/// How far back the consumer made for the first chained job may start: the
/// due stream's duplicate window (by default), within which a parent's end
/// handled twice starts its child once.
const REACH_BACK_AT_MOST: Duration = Duration::from_secs(600);
/// How much earlier than the oldest chained job's write it starts: run
/// events and definitions are stored by different stream leaders, whose
/// clocks may differ a little.
const START_EARLIER: Duration = Duration::from_secs(2);
/// While it holds no chained job, how often an executor looks whether
/// another one made the consumer (it then reads it too, so that run endings
/// never pile up unread while executors run).
const LOOK_FOR_THE_CONSUMER_EVERY: Duration = Duration::from_secs(5);

/// The durable consumer `chains` on `JETCRON_RUNS`, shared by every
/// executor, if one made it already (see the module docs).
pub async fn existing_chains_consumer(
    stream: &jetstream::stream::Stream,
) -> topology::Result<Option<jetstream::consumer::PullConsumer>> {
    match stream
        .get_consumer::<pull::Config>(subjects::CHAINS_CONSUMER)
        .await
    {
        Ok(consumer) => Ok(Some(with_current_filters(stream, consumer).await?)),
        Err(e)
            if e.downcast_ref::<ConsumerInfoError>()
                .is_some_and(|e| e.kind() == ConsumerInfoErrorKind::NotFound) =>
        {
            Ok(None)
        }
        Err(e) => Err(topology::TopologyError::unavailable(
            format!(
                "consumer {} on stream {}",
                subjects::CHAINS_CONSUMER,
                subjects::RUNS_STREAM
            ),
            anyhow::anyhow!(e),
        )),
    }
}

/// The consumer `chains`: bound if it exists, else made starting at `start`.
pub async fn chains_consumer(
    stream: &jetstream::stream::Stream,
    start: DeliverPolicy,
) -> topology::Result<jetstream::consumer::PullConsumer> {
    let consumer = topology::ensure_consumer(stream, chains_config(start)).await?;
    with_current_filters(stream, consumer).await
}

/// The settings of the consumer `chains`, starting at `start`.
fn chains_config(start: DeliverPolicy) -> pull::Config {
    pull::Config {
        durable_name: Some(subjects::CHAINS_CONSUMER.to_string()),
        description: Some("jetcron executors starting chained jobs when a run ends".into()),
        filter_subjects: subjects::chain_filter_subjects(),
        deliver_policy: start,
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_secs(30),
        max_deliver: -1,
        ..Default::default()
    }
}

/// `consumer` (`chains`) with the filters of
/// [`subjects::chain_filter_subjects`]: one made before namespaces heard
/// only one-token job names, and is given [`chains_config`] again, its
/// place in the stream (and where it started) kept.
async fn with_current_filters(
    stream: &jetstream::stream::Stream,
    consumer: jetstream::consumer::PullConsumer,
) -> topology::Result<jetstream::consumer::PullConsumer> {
    let had = &consumer.cached_info().config;
    let wanted = chains_config(had.deliver_policy);
    if had.filter_subjects == wanted.filter_subjects {
        return Ok(consumer);
    }
    info!(from = ?had.filter_subjects, to = ?wanted.filter_subjects, "the chains consumer hears two-token job names from now on");
    topology::update_consumer(stream, wanted).await
}

/// Where the consumer made for the first chained job starts, worked out
/// once when this executor first holds one: [`START_EARLIER`] before the
/// oldest chained job it holds was written, but not more than
/// [`REACH_BACK_AT_MOST`] before `now`, nor after it.
fn start_for_chains(oldest_chain: Option<DateTime<Utc>>, now: DateTime<Utc>) -> DeliverPolicy {
    let span = |d: Duration| chrono::Duration::from_std(d).unwrap_or_default();
    let from = oldest_chain.map_or(now, |at| at - span(START_EARLIER));
    DeliverPolicy::ByStartTime {
        start_time: from.clamp(now - span(REACH_BACK_AT_MOST), now),
    }
}

/// The consumer `chains` once there is a reason to read it: bound as soon
/// as another executor made it, or made by this one when it first holds a
/// chained job. `None` at `shutdown` first.
async fn found_or_made(
    index: &ChainIndex,
    runs: &jetstream::stream::Stream,
    clock: &dyn jetcron_core::clock::Clock,
    shutdown: &CancellationToken,
) -> Option<jetstream::consumer::PullConsumer> {
    loop {
        tokio::select! {
            chained = index.wait_for_a_chain(shutdown) => {
                if !chained {
                    return None;
                }
                break;
            }
            _ = tokio::time::sleep(LOOK_FOR_THE_CONSUMER_EVERY) => {
                match existing_chains_consumer(runs).await {
                    Ok(Some(consumer)) => {
                        info!("another executor made the consumer chains: reading run endings from it");
                        return Some(consumer);
                    }
                    Ok(None) => {}
                    Err(e) => debug!(error = %format!("{e:#}"), "cannot look for the consumer chains"),
                }
            }
        }
    }
    // Worked out once: retried later, a start from the clock then would
    // skip the endings stored meanwhile.
    let start = start_for_chains(index.oldest_chain_written_at(), clock.now());
    let mut delay = RetryDelay::nats();
    loop {
        // Two executors making it at once with different starts: the
        // server refuses the second, which binds it at its next try.
        match chains_consumer(runs, start).await {
            Ok(consumer) => {
                info!(
                    ?start,
                    "a job names a parent: reading run endings from the consumer chains"
                );
                return Some(consumer);
            }
            Err(e) => {
                warn!(error = %format!("{e:#}"), "cannot make or bind the consumer chains, retrying");
                if delay.sleep(shutdown).await {
                    return None;
                }
            }
        }
    }
}

/// Start chained runs until `shutdown`, once `index` has caught up with the
/// bucket (before that, a child could be missed).
pub async fn start_children(
    ctx: std::sync::Arc<ExecutorContext>,
    index: std::sync::Arc<ChainIndex>,
    consumer: Option<jetstream::consumer::PullConsumer>,
    runs: jetstream::stream::Stream,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    while !index.is_synced() {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
    let consumer = match consumer {
        Some(consumer) => consumer,
        None => match found_or_made(&index, &runs, ctx.clock.as_ref(), &shutdown).await {
            Some(consumer) => consumer,
            None => return Ok(()),
        },
    };
    crate::consumer_loop::each_message(&consumer, "run endings", 64, &shutdown, |message| {
        handle(&ctx, &index, message)
    })
    .await;
    Ok(())
}

async fn handle(ctx: &ExecutorContext, index: &ChainIndex, message: Message) {
    // Every run's end comes here; most jobs have no children. The subject
    // says whose end it is, so those are settled without decoding.
    let parent = subjects::run_event_parts(&message.subject).map(|(job, _)| job);
    if !parent.is_some_and(|job| index.has_children(job)) {
        settle(&message, AckKind::Ack).await;
        return;
    }
    let Ok(event) = serde_json::from_slice::<RunEvent>(&message.payload) else {
        warn!(subject = %message.subject, "undecodable run event on the chains consumer, skipping it");
        settle(&message, AckKind::Term).await;
        return;
    };
    let children = index.children_of(&event.job_id);
    if children.is_empty() || chain::parent_ending(event.kind).is_none() {
        settle(&message, AckKind::Ack).await;
        return;
    }
    // A sharded parent's shards ended by this message (not after it: each
    // later shard end comes with its own).
    let through = message.info().ok().map(|info| info.stream_sequence);
    let ending = match parent_ending(ctx, &event, through).await {
        Ok(Some(ending)) => ending,
        // A shard ended, the run goes on: its last shard's event decides.
        Ok(None) => {
            settle(&message, AckKind::Ack).await;
            return;
        }
        Err(e) => {
            warn!(run_id = %event.run_id, error = %format!("{e:#}"), "cannot read the parent run's events, handing its end back");
            hand_back(&message).await;
            return;
        }
    };
    for (child, link) in children {
        if !link.on.starts_after(ending.succeeded) {
            continue;
        }
        if child.spec.paused {
            info!(job_id = %child.id(), parent_run_id = %event.run_id, "chained job is paused, not starting it");
            metrics::counter!("jetcron_chained_runs_total", "result" => "paused").increment(1);
            continue;
        }
        let due = chained_due_event(&child, &event, &ending);
        match due::publish_due_event(&ctx.js, &due).await {
            Ok(duplicate) => {
                let result = if duplicate { "duplicate" } else { "started" };
                info!(job_id = %child.id(), run_id = %due.run_id, parent_run_id = %event.run_id, result, "chained run due");
                metrics::counter!("jetcron_chained_runs_total", "result" => result).increment(1);
            }
            Err(e) => {
                warn!(job_id = %child.id(), parent_run_id = %event.run_id, error = %format!("{e:#}"), "cannot store a chained run's due event, handing the parent's end back");
                hand_back(&message).await;
                return;
            }
        }
    }
    settle(&message, AckKind::Ack).await;
}

/// How a parent run ended, as its children see it.
#[derive(Debug, Clone, Copy)]
struct ParentEnding {
    succeeded: bool,
    status: RunEventKind,
    /// When it ended: the chained run's scheduled time.
    at: DateTime<Utc>,
}

/// The ending of the run `event` ends; `None` while a sharded run goes on.
async fn parent_ending(
    ctx: &ExecutorContext,
    event: &RunEvent,
    through: Option<u64>,
) -> anyhow::Result<Option<ParentEnding>> {
    let ended_at = event.finished_at.unwrap_or(event.at);
    if event.shard.is_none() {
        return Ok(
            chain::parent_ending(event.kind).map(|succeeded| ParentEnding {
                succeeded,
                status: event.kind,
                at: ended_at,
            }),
        );
    }
    let events = run_end_lookup::run_events(
        &ctx.js,
        &event.job_id,
        event.run_id.as_str(),
        Since::fire(event.scheduled_at, None, chrono::Duration::zero()),
        through,
    )
    .await?;
    let Some(summary) = run_summary::summarize(events, false) else {
        return Ok(None);
    };
    let Some(status) = RunEventKind::parse(summary.status) else {
        return Ok(None);
    };
    Ok(chain::parent_ending(status).map(|succeeded| ParentEnding {
        succeeded,
        status,
        at: summary.finished_at.unwrap_or(ended_at),
    }))
}

/// The due event of `child`'s run started by the end of `parent`'s run.
fn chained_due_event(child: &ChainedJob, parent: &RunEvent, ending: &ParentEnding) -> DueEvent {
    DueEvent {
        run_id: chain::chained_run_id(child.id(), &parent.run_id),
        job_id: child.id().to_string(),
        scheduled_at: ending.at,
        trigger: Trigger::Chain,
        pool: child.pool.clone(),
        job_revision: child.revision,
        job: child.spec.clone(),
        shard: None,
        parent: Some(ParentRun {
            job_id: parent.job_id.clone(),
            run_id: parent.run_id.clone(),
            scheduled_at: parent.scheduled_at,
            status: ending.status,
        }),
    }
}

/// Hand a run's end back (NATS failed us): it comes again after a delay
/// growing with each delivery.
async fn hand_back(message: &Message) {
    let delivery = message
        .info()
        .map(|i| u32::try_from(i.delivered).unwrap_or(u32::MAX))
        .unwrap_or(1);
    settle(
        message,
        AckKind::Nak(Some(crate::tries::handback_delay(delivery))),
    )
    .await;
}

async fn settle(message: &Message, kind: AckKind) {
    if let Err(e) = message.ack_with(kind).await {
        warn!(error = %e, "cannot settle a run's end on the chains consumer; it comes again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("instant")
            .with_timezone(&Utc)
    }

    fn start_of(policy: DeliverPolicy) -> DateTime<Utc> {
        match policy {
            DeliverPolicy::ByStartTime { start_time } => start_time,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_consumer_made_for_a_chain_starts_two_seconds_before_it_was_written() {
        let now = at("2026-11-29T12:00:00Z");
        let start = start_for_chains(Some(at("2026-11-29T11:59:59.500Z")), now);
        assert_eq!(start_of(start), at("2026-11-29T11:59:57.500Z"));
    }

    #[test]
    fn it_reaches_back_at_most_ten_minutes_and_never_past_now() {
        let now = at("2026-11-29T12:00:00Z");
        let long_ago = start_for_chains(Some(at("2026-11-28T12:00:00Z")), now);
        assert_eq!(start_of(long_ago), at("2026-11-29T11:50:00Z"));
        // Written "later" than now by this executor's clock (behind the server's).
        let ahead = start_for_chains(Some(at("2026-11-29T12:00:05Z")), now);
        assert_eq!(start_of(ahead), now);
        assert_eq!(start_of(start_for_chains(None, now)), now);
    }
}
