//! How jetcron's services talk to NATS and ClickHouse, the same way in
//! every process: what is here must agree between services, so it is
//! written once.
//!
//! - [`topology`]: creates the NATS streams and buckets idempotently,
//!   verifies existing ones and waits while a cluster forms.
//! - [`authors`]: the author a bucket message's headers name (who
//!   changed what).
//! - [`bucket_follow`]: keeps a view of a KV bucket in memory (watch,
//!   catch-up, reopen).
//! - [`job_feed`]: reads of `jetcron_jobs`, each decoded once for the
//!   services of a process that share it.
//! - [`policy_book`]: the namespaces' target policies, followed in memory
//!   (gateway, ticker, executor).
//! - [`due`]: publishes a due event with its dedup header (ticker, gateway).
//! - [`control`]: records and broadcasts kill requests.
//! - [`job_events`]: publishes `job.rejected` and `fire.missed`.
//! - [`notify`]: stores a notification in `JETCRON_NOTIFY` for the
//!   executors' notifier (the gateway's missed fires).
//! - [`stream_pass`]: reads every message of a stream on a filter, at the
//!   reader's pace (one consumer, flow control, no message dropped).
//! - [`clickhouse_schema`]: the rows jetcron writes to ClickHouse and the
//!   DDL of `schemas/clickhouse/`, applied at start.
//! - [`nats_connect`]: server lists, credentials and TLS as connect options.
//! - [`nats_failover`]: leaves a NATS server that hangs or is cut off from
//!   its cluster (fast pings, a JetStream question twice a second, hellos).
//! - [`peer_reach`]: whether a connection's server still reaches the
//!   others (every jetcron connection answers the others over core NATS).
//! - [`last_heard`]: when a watch last heard an answer, without a lock.
//! - [`retry`]: how every loop waits between tries (jittered, growing) and
//!   how often it says so.
//! - [`clock_check`]: whether this host's wall clock agrees with the NATS
//!   servers' (a skewed host takes no shard and calls no fire).
//! - [`readiness`]: which services of a process have verified their
//!   topology, for `/readyz`.
//! - [`stages`]: the services of one process and the order they stop in
//!   (`jetcron all` and the testkit's stack).
//! - [`tasks`]: a service's tasks by what stopping means for each (drain,
//!   background, abort).
//! - [`telemetry`] sets up `tracing`, [`prometheus`] the metrics registry.
//!
//! The messages themselves (events, requests, names) are `jetcron-core`,
//! which does no I/O.

pub mod authors;
pub mod bucket_follow;
pub mod clickhouse_schema;
pub mod clock_check;
pub mod control;
pub mod due;
pub mod job_events;
pub mod job_feed;
pub mod kv_entry;
pub mod last_heard;
pub mod nats_connect;
pub mod nats_failover;
pub mod notify;
pub mod peer_reach;
pub mod policy_book;
pub mod prometheus;
pub mod readiness;
pub mod retry;
pub mod stages;
pub mod stream_pass;
pub mod tasks;
pub mod telemetry;
pub mod topology;
