//! Moving a connection off a NATS server that can no longer serve it.
//!
//! Two faults leave a client connected to a server that is no use to it:
//! - **The server hangs** (a stopped process, a frozen VM) with its
//!   connections open. The client notices only when its pings go
//!   unanswered, and async-nats pings every 60 s and gives up after two
//!   more: two to three minutes. Every jetcron connection pings every
//!   `--nats-ping-interval` (2 s) instead, so a hung server is left within
//!   about three of them.
//! - **The server is cut off from the rest of its cluster** while its
//!   clients still reach it: it answers pings, but JetStream through it has
//!   no meta leader and no stream leader (issue 39: first calls up to
//!   24.5 s late while one node's routes were cut for 25 s). Every
//!   connection asks JetStream for its account info twice a second; when
//!   that has failed for [`CUT_OFF_AFTER`] while the connection is up, the
//!   server is shunned for a while and the connection moves to another.
//!   A meta leader election (after a node dies) fails the same question
//!   for a few seconds everywhere: the wait is longer than those, so a
//!   healthy server is rarely left, and leaving one costs a reconnect.
//!   Meanwhile an executor calls no target whose start it cannot record
//!   ([`ConnectionHealth`]), and the nodes' own route pings
//!   (`cluster { ping_interval: 1s }`, docs/operations.md) drop the cut
//!   node's subscribers within seconds.
//!
//! Which server a connection goes to is chosen here too (async-nats'
//! `reconnect_to_server_callback`): any that is not shunned, fewest failed
//! attempts first, at random among equals.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::{Client, ReconnectToServer, Server, ServerInfo};
use tokio::time::Instant;
use tracing::{debug, warn};

/// How long JetStream may fail to answer through a connected server
/// before the connection leaves it: longer than a meta leader's election,
/// which fails the question on every server for a few seconds. (At 5 s,
/// connections to the healthy majority left it while the meta leader was
/// on a node cut off, some for that very node, whose stale consumer leader
/// then handed them fires the majority had handed out too.)
pub const CUT_OFF_AFTER: Duration = Duration::from_secs(10);

/// How often JetStream is asked through each connection.
const ASK_EVERY: Duration = Duration::from_millis(500);

/// How long one question may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// How long a server left for being cut off is not chosen again (unless
/// no other can be).
const SHUN_FOR: Duration = Duration::from_secs(30);

/// The default `--nats-ping-interval`.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
struct Choices {
    /// The server the connection went to last (its URL).
    current: Option<String>,
    /// Servers left for being cut off, until when.
    shunned: HashMap<String, Instant>,
}

/// What the watch of a connection last heard from its server, for those
/// who must not act through a server that hangs or is cut off: an
/// executor calls a target only through a connection whose server
/// answered a moment ago, and calls one whose start it could not record
/// only while JetStream answers (a partitioned server answers, JetStream
/// through it does not). Cheap to clone.
#[derive(Debug, Clone)]
pub struct ConnectionHealth {
    inner: Option<Arc<HealthTimes>>,
}

#[derive(Debug)]
struct HealthTimes {
    since: Instant,
    /// Milliseconds after `since` of the last answer of any kind (0: none).
    answered: AtomicU64,
    /// Milliseconds after `since` of the last answer from JetStream (0: none).
    jetstream: AtomicU64,
}

impl Default for ConnectionHealth {
    /// Unwatched: taken to be healthy (in-process tests).
    fn default() -> Self {
        Self { inner: None }
    }
}

impl ConnectionHealth {
    fn watched() -> Self {
        Self {
            inner: Some(Arc::new(HealthTimes {
                since: Instant::now(),
                answered: AtomicU64::new(0),
                jetstream: AtomicU64::new(0),
            })),
        }
    }

    fn heard(&self, jetstream_answered: bool) {
        let Some(times) = &self.inner else {
            return;
        };
        let at = times.since.elapsed().as_millis() as u64 + 1;
        times.answered.store(at, Ordering::Release);
        if jetstream_answered {
            times.jetstream.store(at, Ordering::Release);
        }
    }

    fn within(&self, field: impl Fn(&HealthTimes) -> &AtomicU64, window: Duration) -> bool {
        let Some(times) = &self.inner else {
            return true;
        };
        let at = field(times).load(Ordering::Acquire);
        let now = times.since.elapsed().as_millis() as u64;
        at > 0 && now < at + window.as_millis() as u64
    }

    /// Whether the server answered anything (even "JetStream unavailable")
    /// within `window`: it is alive and reads this connection.
    pub fn server_answered_within(&self, window: Duration) -> bool {
        self.within(|t| &t.answered, window)
    }

    /// Whether JetStream answered through this connection within `window`.
    pub fn jetstream_answered_within(&self, window: Duration) -> bool {
        self.within(|t| &t.jetstream, window)
    }

    /// Whether JetStream has not answered through this connection for
    /// longer than `window`: its server is cut off from its cluster or
    /// hangs (or the cluster has been electing a meta leader that long).
    pub fn jetstream_silent_for(&self, window: Duration) -> bool {
        self.inner.is_some() && !self.jetstream_answered_within(window)
    }
}

/// Where one connection goes; shared by its reconnect callback and its
/// watch. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Failover {
    choices: Arc<Mutex<Choices>>,
    health: ConnectionHealth,
}

impl Default for Failover {
    fn default() -> Self {
        Self {
            choices: Arc::default(),
            health: ConnectionHealth::watched(),
        }
    }
}

impl Failover {
    fn lock(&self) -> std::sync::MutexGuard<'_, Choices> {
        self.choices.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the watch hears through this connection.
    pub fn health(&self) -> ConnectionHealth {
        self.health.clone()
    }

    /// `options` with this failover's choice of server and `ping_interval`.
    pub fn apply(
        &self,
        options: async_nats::ConnectOptions,
        ping_interval: Duration,
    ) -> async_nats::ConnectOptions {
        let failover = self.clone();
        options
            .ping_interval(ping_interval)
            .reconnect_to_server_callback(move |servers, info| {
                let choice = failover.choose(&servers, &info);
                async move { choice }
            })
    }

    /// The server to connect to: not shunned, fewest failed attempts, at
    /// random among equals.
    fn choose(&self, servers: &[Server], _last: &ServerInfo) -> Option<ReconnectToServer> {
        let mut choices = self.lock();
        let now = Instant::now();
        choices.shunned.retain(|_, until| *until > now);
        let open: Vec<&Server> = servers
            .iter()
            .filter(|s| !choices.shunned.contains_key(s.addr.as_url_str()))
            .collect();
        let pool = if open.is_empty() {
            servers.iter().collect()
        } else {
            open
        };
        let fewest = pool.iter().map(|s| s.failed_attempts).min()?;
        let best: Vec<&&Server> = pool
            .iter()
            .filter(|s| s.failed_attempts == fewest)
            .collect();
        let chosen = best[fastrand::usize(..best.len())];
        choices.current = Some(chosen.addr.as_url_str().to_string());
        Some(ReconnectToServer {
            addr: chosen.addr.clone(),
            delay: None,
        })
    }

    /// Leave the current server: shun it and reconnect elsewhere.
    async fn leave_current(&self, client: &Client) {
        let left = {
            let mut choices = self.lock();
            let current = choices.current.clone();
            if let Some(current) = &current {
                choices
                    .shunned
                    .insert(current.clone(), Instant::now() + SHUN_FOR);
            }
            current
        };
        warn!(
            server = left.as_deref().unwrap_or("?"),
            after_ms = CUT_OFF_AFTER.as_millis() as u64,
            "JetStream does not answer through this NATS server while the connection is up (cut off from its cluster, or hung): moving to another server"
        );
        metrics::counter!("jetcron_nats_server_left_total").increment(1);
        if let Err(e) = client.force_reconnect().await {
            warn!(error = %e, "cannot reconnect");
        }
    }

    /// Ping `client`'s server every `every`, for the rest of the process
    /// (attempts still call through it during a stop's grace): a request to a
    /// subject nobody serves, which the server itself answers at once ("no
    /// responders"). For a connection that must not carry a message to a
    /// server that stopped reading a moment ago (an executor's calls:
    /// [`ConnectionHealth::server_answered_within`]).
    pub async fn ping_every(&self, client: Client, every: Duration) {
        let subject = format!("{}.liveness", client.new_inbox());
        loop {
            let asked = client.request(subject.clone(), bytes::Bytes::new());
            match tokio::time::timeout(every * 3, asked).await {
                Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                    self.health.heard(false)
                }
                Ok(Ok(_)) => self.health.heard(false),
                Ok(Err(_)) | Err(_) => {}
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Ask JetStream through `client` every second, for the rest of the
    /// process (the services still use the connection while they stop in
    /// order), and move the connection when it has not answered for
    /// [`CUT_OFF_AFTER`] while connected.
    pub async fn watch(&self, client: Client) {
        let js = async_nats::jetstream::new(client.clone());
        let mut failing_since: Option<Instant> = None;
        loop {
            tokio::time::sleep(ASK_EVERY).await;
            if client.connection_state() != async_nats::connection::State::Connected {
                failing_since = None;
                continue;
            }
            let asked = Instant::now();
            let answer = tokio::time::timeout(ANSWER_WITHIN, js.query_account()).await;
            let heard = Heard::of(answer);
            match heard {
                Heard::JetStream => self.health.heard(true),
                Heard::ServerOnly => self.health.heard(false),
                Heard::Nothing => {}
            }
            if heard == Heard::JetStream {
                failing_since = None;
                continue;
            }
            let since = *failing_since.get_or_insert(asked);
            if since.elapsed() >= CUT_OFF_AFTER {
                failing_since = None;
                self.leave_current(&client).await;
            }
        }
    }
}

/// What one question heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    /// JetStream answered (its account info, or a refusal for this account).
    JetStream,
    /// The server answered, without JetStream behind it (no meta leader, no
    /// responders): alive, but cut off from its cluster or electing.
    ServerOnly,
    /// No answer in time.
    Nothing,
}

impl Heard {
    fn of(
        answer: Result<
            Result<
                async_nats::jetstream::account::Account,
                async_nats::jetstream::context::AccountError,
            >,
            tokio::time::error::Elapsed,
        >,
    ) -> Self {
        use async_nats::jetstream::context::AccountErrorKind;
        let error = match answer {
            Err(_) => return Heard::Nothing,
            Ok(Ok(_)) => return Heard::JetStream,
            Ok(Err(error)) => error,
        };
        match error.kind() {
            AccountErrorKind::TimedOut => Heard::Nothing,
            AccountErrorKind::JetStreamUnavailable => Heard::ServerOnly,
            AccountErrorKind::JetStream(e)
                if e.error_code() == async_nats::jetstream::ErrorCode::CLUSTER_NOT_AVAILABLE =>
            {
                Heard::ServerOnly
            }
            _ => {
                debug!(error = %error, "JetStream account info refused (not a sign of a cut-off server)");
                Heard::JetStream
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(url: &str, failed: usize) -> Server {
        Server {
            addr: url.parse().expect("address"),
            failed_attempts: failed,
            did_connect: false,
            is_discovered: false,
            last_error: None,
        }
    }

    #[test]
    fn a_shunned_server_is_not_chosen_while_another_can_be() {
        let failover = Failover::default();
        let servers = [server("nats://a:4222", 0), server("nats://b:4222", 0)];
        failover
            .lock()
            .shunned
            .insert("nats://a:4222".into(), Instant::now() + SHUN_FOR);
        for _ in 0..20 {
            let chosen = failover
                .choose(&servers, &ServerInfo::default())
                .expect("a server");
            assert_eq!(chosen.addr.as_url_str(), "nats://b:4222");
        }
        // Every server shunned: one of them still.
        failover
            .lock()
            .shunned
            .insert("nats://b:4222".into(), Instant::now() + SHUN_FOR);
        assert!(failover.choose(&servers, &ServerInfo::default()).is_some());
    }

    #[test]
    fn the_server_with_fewest_failed_attempts_is_chosen() {
        let failover = Failover::default();
        let servers = [server("nats://a:4222", 3), server("nats://b:4222", 1)];
        let chosen = failover
            .choose(&servers, &ServerInfo::default())
            .expect("a server");
        assert_eq!(chosen.addr.as_url_str(), "nats://b:4222");
        assert_eq!(failover.lock().current.as_deref(), Some("nats://b:4222"));
    }
}
