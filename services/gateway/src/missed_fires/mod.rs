//! Missed fires: scheduled times of a job's current definition, older than
//! a grace period, with no run at all. Computed from the definitions (NATS)
//! and the run events (ClickHouse), recorded as `fire.missed` job events by
//! a periodic scan, and counted for the `jetcron_missed_fires` gauge. Their
//! own room because three users share one computation: `/v1/stats`, the
//! scan and the gauge.
//!
//! - [`count`]: which expected fires have no run;
//! - [`scan`]: the periodic scan that records them;
//! - [`gauge`]: the counts of the last hour, for `/metrics`.

pub mod count;
pub mod gauge;
pub mod scan;
