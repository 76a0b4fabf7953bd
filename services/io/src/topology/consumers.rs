//! The durable pull consumers of the services, made or changed to what
//! they ask for.

use async_nats::jetstream::{self, stream};

use super::{Result, TopologyError};

/// Get the durable pull consumer `config.durable_name` of `stream`, or create it.
pub async fn ensure_consumer(
    stream: &stream::Stream,
    config: jetstream::consumer::pull::Config,
) -> Result<jetstream::consumer::PullConsumer> {
    let name = config.durable_name.clone().unwrap_or_default();
    stream
        .get_or_create_consumer(&name, config)
        .await
        .map_err(|e| {
            TopologyError::unavailable(
                format!(
                    "consumer {name} on stream {}",
                    stream.cached_info().config.name
                ),
                e,
            )
        })
}

/// A durable pull consumer with `config`, whose ack wait and `backoff` are
/// changed to `config`'s when it exists with others (jetcron's defaults
/// became shorter: they bound how late work lost with a process comes
/// back).
pub async fn ensure_consumer_acking_within(
    stream: &stream::Stream,
    config: jetstream::consumer::pull::Config,
) -> Result<jetstream::consumer::PullConsumer> {
    let mut consumer = ensure_consumer(stream, config.clone()).await?;
    let had = &consumer.cached_info().config;
    let (had_wait, had_backoff) = (had.ack_wait, had.backoff.clone());
    if had_wait != config.ack_wait || had_backoff != config.backoff {
        let (wanted, wanted_backoff) = (config.ack_wait, config.backoff.clone());
        let name = config.durable_name.clone().unwrap_or_default();
        consumer = update_consumer(stream, config).await?;
        tracing::info!(
            consumer = %name,
            from_ms = had_wait.as_millis() as u64,
            to_ms = wanted.as_millis() as u64,
            from_backoff = ?had_backoff,
            to_backoff = ?wanted_backoff,
            "changed the consumer's ack wait"
        );
    }
    Ok(consumer)
}

/// Change the settings of an existing durable pull consumer.
pub async fn update_consumer(
    stream: &stream::Stream,
    config: jetstream::consumer::pull::Config,
) -> Result<jetstream::consumer::PullConsumer> {
    let name = config.durable_name.clone().unwrap_or_default();
    stream.update_consumer(config).await.map_err(|e| {
        TopologyError::unavailable(
            format!(
                "update consumer {name} on stream {}",
                stream.cached_info().config.name
            ),
            e,
        )
    })
}
