//! Waiting for the topology while a cluster forms, one part at a time.

use std::future::Future;
use std::time::Instant;

use async_nats::jetstream;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::needs::{Ensured, Need};
use super::{Result, TopologyError, TopologyOptions};
use crate::readiness::Readiness;
use crate::retry::{LogLimiter, RetryDelay};

/// A service waiting for its topology, one stream, bucket or consumer at a
/// time: each [`Converging::ensure`] is retried on its own (100 ms doubling
/// to 5 s, jittered) until it succeeds, returns a mismatch, or `shutdown` is
/// cancelled, so what is already there is not asked again while another
/// stream is still electing. Meanwhile `readiness` says what the service
/// waits for and why; [`Converging::ready`] marks it ready and logs it.
pub struct Converging<'a> {
    service: &'a str,
    readiness: &'a Readiness,
    shutdown: &'a CancellationToken,
    started: Instant,
    log: LogLimiter,
}

impl<'a> Converging<'a> {
    pub fn start(
        service: &'a str,
        readiness: &'a Readiness,
        shutdown: &'a CancellationToken,
    ) -> Self {
        readiness.waiting(service, "NATS topology");
        Self {
            service,
            readiness,
            shutdown,
            started: Instant::now(),
            log: LogLimiter::per_10s(),
        }
    }

    /// Retry `ensure` until it succeeds (`Some`), returns a mismatch
    /// (`Err`), or shutdown is asked for (`None`).
    pub async fn ensure<T, F, Fut>(&mut self, mut ensure: F) -> anyhow::Result<Option<T>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut delay = RetryDelay::nats();
        loop {
            match ensure().await {
                Ok(value) => return Ok(Some(value)),
                Err(TopologyError::Mismatch(message)) => {
                    self.readiness.waiting(self.service, message.clone());
                    return Err(anyhow::anyhow!(message));
                }
                Err(e) => {
                    self.readiness
                        .waiting(self.service, format!("NATS topology: {e}"));
                    if let Some(failures) = self.log.admit() {
                        warn!(
                            service = self.service,
                            failures,
                            waited_ms = self.started.elapsed().as_millis() as u64,
                            error = %e,
                            "NATS topology not available yet, retrying (a cluster electing, \
                             or a stream only an admin may create)"
                        );
                    }
                }
            }
            if delay.sleep(self.shutdown).await {
                return Ok(None);
            }
        }
    }

    /// Make or verify every part of `needs` in turn, each retried like
    /// [`Converging::ensure`]; `None` when shutdown is asked for first.
    pub async fn ensure_needs(
        &mut self,
        js: &jetstream::Context,
        options: &TopologyOptions,
        needs: &[Need],
    ) -> anyhow::Result<Option<Ensured>> {
        let mut ensured = Ensured::default();
        for need in needs {
            match self.ensure(|| need.ensure(js, options)).await? {
                Some(part) => ensured.add(*need, part),
                None => return Ok(None),
            }
        }
        Ok(Some(ensured))
    }

    /// Everything is there: say so.
    pub fn ready(self) {
        self.readiness.ready(self.service);
        info!(
            service = self.service,
            waited_ms = self.started.elapsed().as_millis() as u64,
            "ready: NATS topology verified"
        );
    }
}
