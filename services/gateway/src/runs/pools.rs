//! Where due events wait: per pool, how many are queued in `JETCRON_DUE` and
//! whether any executor serves the pool (`GET /v1/pools`, and the pool gauges
//! of `/metrics`). A job whose pool nobody serves waits here, visibly.

use std::collections::BTreeMap;

use futures::TryStreamExt as _;
use serde::Serialize;

use crate::GatewayState;

/// One pool's queue.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PoolState {
    pub pool: String,
    /// Due events stored for the pool and not yet settled.
    pub pending: u64,
    /// Whether the pool's durable consumer exists (an executor served it once).
    pub consumer: bool,
    /// Pull requests waiting for work: executors that serve the pool now.
    pub waiting_pulls: usize,
    /// Due events handed to an executor and not yet settled.
    pub in_flight: usize,
}

/// Every pool that has due events or a consumer.
pub async fn pools(state: &GatewayState) -> anyhow::Result<Vec<PoolState>> {
    let stream = state
        .js
        .get_stream(jetcron_core::subjects::DUE_STREAM)
        .await?;
    let mut by_pool: BTreeMap<String, PoolState> = BTreeMap::new();
    let info = stream
        .info_with_subjects(jetcron_core::subjects::DUE_SUBJECTS)
        .await?;
    let subjects: Vec<(String, usize)> = info.try_collect().await?;
    for (subject, count) in subjects {
        // jetcron.due.<pool>.<job>
        if let Some(pool) = subject.split('.').nth(2) {
            let entry = by_pool.entry(pool.to_string()).or_default();
            entry.pending += count as u64;
        }
    }
    let consumers: Vec<_> = stream.consumers().try_collect().await?;
    for consumer in consumers {
        if let Some(pool) = consumer.name.strip_prefix("executor-") {
            let entry = by_pool.entry(pool.to_string()).or_default();
            entry.consumer = true;
            entry.waiting_pulls = consumer.num_waiting;
            entry.in_flight = consumer.num_ack_pending;
        }
    }
    Ok(by_pool
        .into_iter()
        .map(|(pool, mut state)| {
            state.pool = pool;
            state
        })
        .collect())
}

/// The pool gauges in the Prometheus text format.
pub fn render_metrics(pools: &[PoolState]) -> String {
    let mut out = String::new();
    out.push_str("# HELP jetcron_pool_pending_due_events Due events stored for the pool and not yet settled.\n");
    out.push_str("# TYPE jetcron_pool_pending_due_events gauge\n");
    for p in pools {
        out.push_str(&format!(
            "jetcron_pool_pending_due_events{{pool=\"{}\"}} {}\n",
            p.pool, p.pending
        ));
    }
    out.push_str("# HELP jetcron_pool_waiting_pulls Pull requests of executors waiting for work in the pool (0: nobody serves it).\n");
    out.push_str("# TYPE jetcron_pool_waiting_pulls gauge\n");
    for p in pools {
        out.push_str(&format!(
            "jetcron_pool_waiting_pulls{{pool=\"{}\"}} {}\n",
            p.pool, p.waiting_pulls
        ));
    }
    out
}

/// The runs stream and the info of the projector's durable consumer on it
/// (`None` before one exists): what the backlog and the projected-until
/// time are read from.
async fn projector_consumer(
    state: &GatewayState,
) -> anyhow::Result<
    Option<(
        async_nats::jetstream::stream::Stream,
        async_nats::jetstream::consumer::Info,
    )>,
> {
    use anyhow::Context as _;
    let stream = state
        .js
        .get_stream(jetcron_core::subjects::RUNS_STREAM)
        .await
        .context("read the runs stream")?;
    let consumer: Result<
        async_nats::jetstream::consumer::Consumer<async_nats::jetstream::consumer::pull::Config>,
        _,
    > = stream
        .get_consumer(jetcron_core::subjects::PROJECTOR_CONSUMER)
        .await;
    let Ok(mut consumer) = consumer else {
        return Ok(None);
    };
    let info = consumer
        .info()
        .await
        .context("read the projector consumer")?
        .clone();
    Ok(Some((stream, info)))
}

/// Run events the projector has not stored yet: not delivered plus
/// delivered and unacked, of its durable consumer (`None` before one exists).
pub async fn projector_backlog(state: &GatewayState) -> anyhow::Result<Option<u64>> {
    Ok(projector_consumer(state)
        .await?
        .map(|(_, info)| info.num_pending + info.num_ack_pending as u64))
}

/// The time up to which every run event is known to be in ClickHouse: `now`
/// when the projector's consumer has nothing pending or unacked, else when the
/// oldest event it has not stored yet was published. `None` when that cannot
/// be told (no projector consumer yet). Missed fires are only judged up to
/// here: a fire whose run events wait behind a slow or stopped projector is
/// late in ClickHouse, not missed.
pub async fn projected_until(
    state: &GatewayState,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<Option<chrono::DateTime<chrono::Utc>>> {
    use anyhow::Context as _;
    let Some((stream, info)) = projector_consumer(state).await? else {
        return Ok(None);
    };
    if info.num_pending == 0 && info.num_ack_pending == 0 {
        return Ok(Some(now));
    }
    let oldest = info.ack_floor.stream_sequence + 1;
    let message = stream
        .get_raw_message(oldest)
        .await
        .with_context(|| format!("read run event {oldest}, the oldest not yet stored"))?;
    Ok(Some(message.time.with_timezone(&chrono::Utc).min(now)))
}
