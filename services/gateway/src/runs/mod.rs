//! Runs, the gateway's second noun: what happened when jobs fired, read from
//! ClickHouse (the history the projector keeps from the runs stream), and
//! what is about to happen or happens now, read from and written to NATS
//! (the due events waiting in pools, manual runs, kills).
//!
//! - [`history`]: runs from their events (a run, a job's runs, which exist);
//! - [`listing`]: runs across jobs, filtered, with a cursor;
//! - [`stats`]: figures per job over a range;
//! - [`manual`]: runs asked for by hand (trigger, backfill);
//! - [`control`]: steering runs in progress (kill, completion reports);
//! - [`pools`]: where due events wait, and how far the projector got.

pub mod control;
pub mod history;
pub mod listing;
pub mod manual;
pub mod pools;
pub mod stats;
