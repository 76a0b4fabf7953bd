//! Alert channels, the gateway's third noun: where alerts go, defined once
//! in the `jetcron_channels` bucket (key = name) and named by jobs.
//!
//! - [`store`]: the bucket with the channel operations on it, as typed
//!   requests and answers shared by NATS and HTTP.

pub mod store;
