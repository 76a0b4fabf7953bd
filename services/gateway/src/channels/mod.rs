//! Alert channels, the gateway's third noun: where alerts go, defined once
//! in the `jetcron_channels` bucket (key = name) and named by jobs.
//!
//! - [`requests`]: the operations' typed requests and answers, shared by
//!   NATS, HTTP and the console;
//! - [`store`]: the bucket with the operations on it.

pub mod requests;
pub mod store;
