//! Sharded runs: one fire becomes `shards` parts, each a due event of its own.
//!
//! The executor that receives the fire (a due event without a shard index)
//! publishes one due event per shard on the same subject, each with
//! `Nats-Msg-Id` = `<run_id>/<shard>`, and only then acks the fire. If it dies
//! half way, the fire is redelivered and published again; JetStream drops the
//! parts it already has. Parts are ordinary due events: any executor of the
//! pool runs them, in parallel, each with its own attempts and retries.

use anyhow::Context as _;
use jetcron_core::events::DueEvent;
use jetcron_io::due;

use crate::ExecutorContext;

/// Publish the `shards` parts of `fire` and wait until all are stored.
pub async fn split(ctx: &ExecutorContext, fire: &DueEvent, shards: u32) -> anyhow::Result<()> {
    let mut pending = Vec::with_capacity(shards as usize);
    for index in 0..shards {
        let mut part = fire.as_ref();
        part.shard = Some(index);
        pending.push(due::send_due_event(&ctx.js, part, None).await?);
    }
    for (index, ack) in pending.into_iter().enumerate() {
        ack.await
            .with_context(|| format!("store shard {index} of run {}", fire.run_id))?;
    }
    Ok(())
}
