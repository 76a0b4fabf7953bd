//! Runs, the gateway's second noun: what happened when jobs fired, read from
//! ClickHouse (the history the projector keeps from the runs stream), and
//! what is about to happen or happens now, read from and written to NATS
//! (the due events waiting in pools, manual runs, kills).
//!
//! - [`reads`]: the read operations of runs (a job's runs, a run, runs
//!   across jobs), shared by HTTP and the console;
//! - [`history`]: runs from their events (a run, a job's runs, which exist);
//! - [`listing`]: runs across jobs, filtered, with a cursor;
//! - [`stats`]: figures per job over a range (`/v1/stats`);
//! - [`figures`]: the run figures the console shows beside jobs;
//! - [`manual`]: runs asked for by hand (trigger, backfill);
//! - [`control`]: steering runs in progress (kill, completion reports);
//! - [`pools`]: where due events wait;
//! - [`projection`]: how far the history in ClickHouse is complete.

pub mod control;
pub mod figures;
pub mod history;
pub mod listing;
pub mod manual;
pub mod pools;
pub mod projection;
pub mod reads;
pub mod stats;
