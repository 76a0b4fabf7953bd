//! The process's Prometheus registry.
//!
//! Services record with the `metrics` macros wherever the event happens
//! (fires, run events, projector batches, HTTP requests); this module installs
//! one recorder per process and renders it. The gateway appends the rendering
//! to its `/metrics`; the other services serve it on `--metrics-addr`. Without
//! an installed recorder the macros cost nothing and record nothing.

use std::sync::{Mutex, OnceLock};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
static INSTALL: Mutex<()> = Mutex::new(());

/// Histogram buckets in seconds: 1 ms to 10 min.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0,
];
/// Histogram buckets of batch sizes.
const SIZE_BUCKETS: &[f64] = &[1.0, 10.0, 100.0, 500.0, 1000.0, 5000.0, 10000.0, 50000.0];

/// Install the recorder (once per process; later calls return the same handle).
pub fn install() -> anyhow::Result<&'static PrometheusHandle> {
    let _one_at_a_time = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(handle) = HANDLE.get() {
        return Ok(handle);
    }
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)?
        .set_buckets_for_metric(Matcher::Suffix("_size".into()), SIZE_BUCKETS)?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|_| anyhow::anyhow!("a metrics recorder not from jetcron is installed"))?;
    Ok(HANDLE.get_or_init(|| handle))
}

/// The Prometheus text of everything recorded (empty before [`install`]).
pub fn render() -> String {
    HANDLE
        .get()
        .map(PrometheusHandle::render)
        .unwrap_or_default()
}
