//! Where due events wait: per pool, how many are queued in `JETCRON_DUE` and
//! whether any executor serves the pool (`GET /v1/pools`, the pool gauges of
//! `/metrics`, the console's overview). A job whose pool nobody serves waits
//! here, visibly.

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

/// The answer of `GET /v1/pools`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PoolsReply {
    pub pools: Vec<PoolState>,
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
