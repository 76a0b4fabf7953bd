//! The executor: pulls due events from `JETCRON_DUE` (durable consumer
//! `executor-default`), runs their target, and records every step as a run
//! event in `JETCRON_RUNS`.
//!
//! Executors are stateless: any number may share the consumer, JetStream hands
//! each due event to one of them, and retries are JetStream redeliveries (a nak
//! with a delay), so a crashed executor's work comes back after `ack_wait`.
//! In-flight work is bounded by a semaphore; shutdown stops pulling and lets
//! in-flight attempts finish within a grace period.
//!
//! Each executor serves the pools it is started with (durable consumer
//! `executor-<pool>` on `jetcron.due.<pool>.>`), hears kill requests on
//! `jetcron.control.kill.*`, takes overlap claims in `jetcron_running`, and
//! delivers failure notifications from `JETCRON_NOTIFY`.
//!
//! Layout, by what each part does (every module is named here):
//! - a delivery: [`attempt`] runs one as a pipeline of stages (admit, start,
//!   call, settle), [`hold`] keeps one stored ahead until its instant,
//!   [`instant_calls`] sends the calls of an instant together (with
//!   `instant_replies` pairing their answers), [`fanout`] splits a sharded
//!   fire, [`stages`] marks its way for a trace of where a late call's
//!   time went;
//! - how long a delivery is ours: [`lease`] (its lease, checked before every
//!   act), [`ack_deadlines`] (the ack wait of first deliveries and
//!   redeliveries), [`ack_replies`] (which keep-alives a consumer leader
//!   took), `kept_alive` (keep-alives while it waits), [`tries`]
//!   (which attempts count against `max_attempts`);
//! - whether to call: [`call_gate`] (no call through a server that stopped
//!   answering), [`run_end_lookup`] (did the run already end?),
//!   [`runs_pulse`] (is `JETCRON_RUNS` storing at all), [`kill_markers`]
//!   (kill requests followed in memory), [`claims`] with the pure
//!   `claim_rules` (`concurrency: forbid | replace`), [`running`]
//!   (attempts registered so kills and probes reach them);
//! - what follows a call: [`targets`] runs the three target types,
//!   [`completion_reports`] hears asynchronous completions,
//!   [`end_decision`] decides what follows an attempt's end (a pure
//!   function), [`run_events`] publishes run events;
//! - after a run: [`alerting`] (the job's webhook and its alert channels:
//!   notifications, incidents, mail), [`chains`] starts the jobs that follow
//!   a run's job when the run ends; both take their work queues through
//!   `consumer_loop`.
//!
//! The service itself: `service` ([`run`]: served pools, topology, the
//! attempts' context, helpers, drain) and `pulling` (one pull loop per
//! pool); its topology declared as data
//! ([`jetcron_io::topology::Need`]), its tasks by what stopping means
//! ([`jetcron_io::tasks`]): attempts drained within the grace, helpers
//! stopped after them.

pub mod ack_deadlines;
pub mod ack_replies;
pub mod alerting;
pub mod attempt;
pub mod call_gate;
pub mod chains;
mod claim_rules;
pub mod claims;
pub mod completion_reports;
mod consumer_loop;
pub mod end_decision;
pub mod fair_slots;
pub mod fanout;
pub mod hold;
pub mod instant_calls;
mod instant_replies;
mod kept_alive;
pub mod kill_markers;
pub mod lease;
pub mod namespace_slots;
mod pulling;
pub mod run_end_lookup;
pub mod run_events;
pub mod running;
pub mod runs_pulse;
mod service;
pub mod stages;
pub mod targets;
pub mod tries;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv;
use async_nats::jetstream::{self};
use jetcron_core::clock::Clock;
use jetcron_core::subjects;
use jetcron_io::readiness::Readiness;
use jetcron_io::topology::TopologyOptions;
use tokio_util::sync::CancellationToken;

pub use service::run;
pub use targets::shell::ShellOptions;

use running::RunningAttempts;

/// Executor settings.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Name recorded in run events.
    pub executor_id: String,
    /// Most targets being called at once in this process: the call slots.
    pub max_in_flight: usize,
    /// Most due events pulled and not yet called to their end (not counting
    /// those held until their instants); `None`: twice `max_in_flight`.
    pub max_pulled: Option<usize>,
    /// How the call slots are shared among namespaces ([`fair_slots`]).
    pub slot_sharing: fair_slots::Sharing,
    /// The slots a namespace that holds as many as are free leaves to
    /// others ([`fair_slots`]); `None`: an eighth of `max_in_flight`.
    pub slot_reserve: Option<usize>,
    /// Largest output kept per attempt, in bytes.
    pub output_limit: usize,
    pub shell: ShellOptions,
    /// Consumer `ack_wait`: how long a silent executor keeps a due event
    /// delivered the first time.
    pub ack_wait: Duration,
    /// How long it keeps one delivered again (the consumer's `backoff`,
    /// [`ack_deadlines`]); at most `ack_wait`.
    pub redelivery_ack_wait: Duration,
    /// How often a running attempt tells JetStream it is still alive.
    pub progress_interval: Duration,
    /// How long shutdown waits for in-flight attempts before handing them back.
    pub shutdown_grace: Duration,
    /// Pools served (one durable consumer each).
    pub pools: Vec<String>,
    /// Delay before the second try of a failed notification, doubled per try.
    pub notify_backoff: Duration,
    /// Tries of a notification before it is recorded as `notify_failed`.
    pub notify_max_attempts: u32,
    /// Base URL of the console, for the run link in alerts
    /// (`<url>/ui/runs/<run id>`); none: alerts carry no link.
    pub console_url: Option<String>,
    /// A PEM file of CA certificates trusted for SMTP besides the public
    /// roots (a mail relay with a private CA).
    pub smtp_ca_file: Option<std::path::PathBuf>,
    pub topology: TopologyOptions,
    /// Told when the topology is verified (`/readyz`).
    pub readiness: Readiness,
    /// The connection `nats` targets are called on (the executor's own when
    /// `None`); `jetcron executor` opens a second one, so that calls never
    /// queue behind run events and acks.
    pub calls_client: Option<async_nats::Client>,
    /// Parsed schedule lines, shared with the other services of the
    /// process (`jetcron all`). Every due event carries its job's
    /// definition, validated before anything runs; parsing its cron line
    /// again for every run was about 7 % of the executor's CPU at 10,000
    /// runs/s (perf), while jobs share few distinct lines.
    pub lines: jetcron_core::schedule_lines::SharedLines,
    /// The read of the jobs bucket the chain index follows (by default its
    /// own, which decodes only chained jobs; in `jetcron all` shared with
    /// the catalog, after the ticker's).
    pub jobs_feed: jetcron_io::job_feed::JobFeed,
    /// What the watch of the calls' connection hears: a call goes out only
    /// through a server that answered a moment ago (a hung server would
    /// deliver it when it wakes, after another attempt's).
    pub calls_health: jetcron_io::nats_failover::ConnectionHealth,
    /// What the watch of the executor's own connection hears: a target
    /// whose start could not be recorded in time is not called meanwhile
    /// while its server has been cut off from JetStream for seconds.
    pub jetstream_health: jetcron_io::nats_failover::ConnectionHealth,
    /// Whether jetcron connections on other servers still answer through the
    /// executor's own connection: not called meanwhile either once they
    /// stopped answering (its server is cut off; unwatched by default).
    pub peer_reach: jetcron_io::peer_reach::PeerReach,
    /// This host's clock against the NATS servers': while it is not
    /// trusted the executor pulls nothing and calls no held fire (off by
    /// default, for tests that drive time by hand).
    pub clock_check: jetcron_io::clock_check::ClockCheck,
}

/// Default of the most attempts running at once. A held `nats` call books
/// its slot 600 ms before its instant ([`instant_calls`]), so every fire of
/// a second's burst needs one at once: with 2,048 a burst of 5,000 booked
/// 2,048 calls and the rest waited for slots at the instant, calls p99
/// 428 ms after it where 16,384 gave 43.5 ms (docs/benchmarks.md, issue
/// 44). A slot is a count, not a resource: the fire it is for is held in
/// memory either way. Each HTTP call holds a socket and each shell call a
/// process: `jetcron executor` raises its open-file limit to the hard one
/// and warns when that is below the slots (`services/jetcron/src/open_files.rs`).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 16_384;

/// Most messages one pull asks for: the slots a pull reserves for messages
/// still to come are not free for held fires to book their calls with.
const PULL_BATCH: usize = 256;

/// Default consumer ack wait on one node: the lookahead there (1.5 s) and
/// 3 s (`jetcron executor` takes 13 s on a cluster, `--ack-wait`).
pub const DEFAULT_ACK_WAIT: Duration = Duration::from_millis(4_500);

/// Default wait of a redelivered due event: a redelivery lost on its way
/// costs its fire this much more ([`ack_deadlines`]); keep-alives of a
/// redelivery go out every 2 s.
pub const DEFAULT_REDELIVERY_ACK_WAIT: Duration = Duration::from_secs(4);

/// Default cap on kept output: 64 KiB.
pub const DEFAULT_OUTPUT_LIMIT: usize = 64 * 1024;

impl ExecutorConfig {
    /// The intake limit: `max_pulled`, or twice the call slots.
    pub fn max_pulled(&self) -> usize {
        self.max_pulled
            .unwrap_or(self.max_in_flight.saturating_mul(2))
            .max(1)
    }

    /// The reserve of the call slots ([`fair_slots::default_reserve`]).
    pub fn slot_reserve(&self) -> usize {
        self.slot_reserve
            .unwrap_or_else(|| fair_slots::default_reserve(self.max_in_flight))
    }
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            executor_id: default_executor_id(),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_pulled: None,
            slot_sharing: fair_slots::Sharing::Fair,
            slot_reserve: None,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            shell: ShellOptions::default(),
            ack_wait: DEFAULT_ACK_WAIT,
            redelivery_ack_wait: DEFAULT_REDELIVERY_ACK_WAIT,
            progress_interval: DEFAULT_ACK_WAIT / 3,
            shutdown_grace: Duration::from_secs(30),
            pools: vec![subjects::DEFAULT_POOL.to_string()],
            notify_backoff: Duration::from_secs(1),
            notify_max_attempts: 5,
            console_url: None,
            smtp_ca_file: None,
            topology: TopologyOptions::default(),
            readiness: Readiness::default(),
            calls_client: None,
            lines: Default::default(),
            jobs_feed: jetcron_io::job_feed::JobFeed::chains_only(),
            clock_check: jetcron_io::clock_check::ClockCheck::off(),
            calls_health: Default::default(),
            jetstream_health: Default::default(),
            peer_reach: Default::default(),
        }
    }
}

/// `<hostname>-<pid>`.
pub fn default_executor_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "executor".into());
    format!("{host}-{}", std::process::id())
}

/// What every attempt of this executor shares.
pub struct ExecutorContext {
    pub config: ExecutorConfig,
    pub nats: async_nats::Client,
    /// Where `nats` targets are called ([`ExecutorConfig::calls_client`]).
    pub calls: async_nats::Client,
    pub js: jetstream::Context,
    pub http: reqwest::Client,
    /// `jetcron_running`: overlap claims and kill requests.
    pub running: kv::Store,
    /// `jetcron_incidents`: open alert incidents ([`alerting::channel_alerts`]).
    pub incidents: kv::Store,
    /// `jetcron_channels`: where alerts go.
    pub channels: kv::Store,
    /// Attempts in progress here, for kill requests.
    pub attempts: Arc<RunningAttempts>,
    /// Cancelled when the grace period of a shutdown is over: attempts still
    /// running hand their message back.
    pub interrupt: CancellationToken,
    /// Every "now" of the executor (run event times, claim expiries, holds).
    pub clock: Arc<dyn Clock>,
    /// The kill requests of `jetcron_running`, followed in memory.
    pub kill_markers: kill_markers::KillMarkers,
    /// Completion reports of asynchronous targets, by run.
    pub completions: Arc<completion_reports::CompletionReports>,
    /// Calls of held fires, sent together at their instant.
    pub instant_calls: instant_calls::InstantCalls,
    /// When `JETCRON_RUNS` last stored a run event of this executor.
    pub runs_pulse: runs_pulse::RunsPulse,
    /// The answers of keep-alives sent on `nats`.
    pub ack_replies: Arc<ack_replies::AckReplies>,
    /// The namespaces' target policies, followed in memory: checked
    /// before every call ([`attempt`]'s admission).
    pub policies: Arc<jetcron_io::policy_book::PolicyBook>,
    /// The namespaces' run slots (`max_concurrent_runs`), followed in
    /// memory.
    pub namespace_slots: Arc<namespace_slots::NamespaceSlots>,
}
