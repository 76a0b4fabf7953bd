//! Whether the services of this process are ready, for `/readyz`.
//!
//! A service is *ready* once its NATS topology is verified: every stream,
//! bucket and consumer it uses exists with settings it can work with. Until
//! then it is *waiting* on something it names (a cluster still electing, a
//! stream another process has not created yet). The gateway's `/readyz` and
//! the `--metrics-addr` server both read the one registry `jetcron` passes to
//! every service of the process, so `jetcron all` is ready only when all four
//! are.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The names the services report readiness under: each service's own
/// topology step and the process that names them before they begin
/// (`jetcron`) must agree, or `/readyz` would wait for a name nobody readies.
pub const GATEWAY: &str = "gateway";
pub const PROJECTOR: &str = "projector";
pub const EXECUTOR: &str = "executor";
pub const TICKER: &str = "ticker";

/// The state of one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceState {
    /// Not ready yet; what it is waiting for.
    Waiting(String),
    Ready,
}

/// Shared by the services of one process.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    services: Arc<Mutex<BTreeMap<String, ServiceState>>>,
}

impl Readiness {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ServiceState>> {
        self.services.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `service` is not ready: it waits for `what`.
    pub fn waiting(&self, service: &str, what: impl Into<String>) {
        self.lock()
            .insert(service.to_string(), ServiceState::Waiting(what.into()));
    }

    /// `service` is ready.
    pub fn ready(&self, service: &str) {
        self.lock().insert(service.to_string(), ServiceState::Ready);
    }

    /// Every service registered, and at least one.
    pub fn all_ready(&self) -> bool {
        let services = self.lock();
        !services.is_empty() && services.values().all(|s| *s == ServiceState::Ready)
    }

    /// Each service with `None` when ready, or what it waits for.
    pub fn snapshot(&self) -> BTreeMap<String, Option<String>> {
        self.lock()
            .iter()
            .map(|(name, state)| {
                let waiting = match state {
                    ServiceState::Ready => None,
                    ServiceState::Waiting(what) => Some(what.clone()),
                };
                (name.clone(), waiting)
            })
            .collect()
    }

    /// `{"ticker": "ready", "executor": "waiting: stream JETCRON_DUE …"}`, for `/readyz`.
    pub fn report(&self) -> serde_json::Value {
        self.snapshot()
            .into_iter()
            .map(|(name, waiting)| {
                let state =
                    waiting.map_or_else(|| "ready".to_string(), |w| format!("waiting: {w}"));
                (name, serde_json::Value::String(state))
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_service_is() {
        let readiness = Readiness::default();
        assert!(!readiness.all_ready(), "nothing registered yet");
        readiness.waiting("ticker", "stream JETCRON_DUE");
        readiness.ready("gateway");
        assert!(!readiness.all_ready());
        assert_eq!(
            readiness.snapshot().get("ticker"),
            Some(&Some("stream JETCRON_DUE".to_string()))
        );
        readiness.ready("ticker");
        assert!(readiness.all_ready());
    }
}
