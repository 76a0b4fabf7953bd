//! How far the run history in ClickHouse is complete, read from the
//! projector's durable consumer on the runs stream: its backlog (`/readyz`,
//! `/metrics`, the console's overview) and the time up to which every run
//! event is stored. Missed fires are judged only up to that time: behind a
//! slow or stopped projector, a fire that ran would look missed.

use crate::GatewayState;

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
