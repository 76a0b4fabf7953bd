//! Telling people about runs: a job's `notify` webhook and its alert
//! channels.
//!
//! The flow, in the order it happens:
//! - [`notifications`]: an attempt that ends badly (or a success, which may
//!   close an incident) stores a notification in the `JETCRON_NOTIFY` work
//!   queue before it settles its due event; any executor takes it from the
//!   durable consumer `notifier`, calls the job's webhook, and hands it on;
//! - [`channel_alerts`]: decides whether the job's channels hear of it (one
//!   incident per job and rule, opened, repeated and resolved by
//!   compare-and-swap), and delivers each alert to each channel as its own
//!   message, retried on its own;
//! - a channel's alert leaves as an HTTP request or as mail
//!   ([`jetcron_core::alert::Delivery`]); [`mail`] sends the mail ones.

pub mod channel_alerts;
pub mod mail;
pub mod notifications;
