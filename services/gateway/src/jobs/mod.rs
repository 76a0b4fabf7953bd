//! Job definitions, the gateway's first noun: they live in the `jetcron_jobs`
//! bucket (key = id), which is their source of truth; everything here reads
//! or writes them there, or reads what ClickHouse says about them.
//!
//! - [`store`]: the bucket with the API's operations on it (put, delete,
//!   pause, a definition, its history, every definition);
//! - [`stored`]: a definition and its revisions as the API shows them, and
//!   how they hide their secrets;
//! - [`requests`]: the job operations beyond `put` as typed requests and
//!   answers, shared by NATS and HTTP;
//! - [`reads`]: a job's detail and history, shared by HTTP and the console;
//! - [`catalog`]: one small row per job in memory (the console's table, the
//!   job limit, chains), kept by a watch of the bucket;
//! - [`pass`]: one streamed read of every current definition (statistics,
//!   missed fires);
//! - [`rejections`]: definitions that were not applied (`job.rejected`);
//! - [`schedule_preview`]: the next fires of a schedule line.

pub mod catalog;
pub mod pass;
pub mod reads;
pub mod rejections;
pub mod requests;
pub mod schedule_preview;
pub mod store;
pub mod stored;
