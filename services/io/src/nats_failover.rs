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
//!   no stream leader that can store anything (issue 39: first calls up to
//!   24.5 s late while one node's routes were cut for 25 s). Every
//!   connection answers the others' hellos and asks them four times a
//!   second ([`peer_reach`]); when those on other servers, heard before,
//!   have been silent for [`PEERS_SILENT_AFTER`], the server is shunned for
//!   a while and the connection moves to another. JetStream's silence
//!   alone is too slow a sign: a meta leader election fails its questions
//!   for seconds everywhere, and a cut meta leader answers them for 10-20 s
//!   more (a ticker on one stored no due event for 24 s of a 25 s cut). It
//!   still moves a connection after [`CUT_OFF_AFTER`], where no other
//!   server's connection was ever heard. Meanwhile an executor calls no
//!   target whose start it cannot record ([`ConnectionHealth`]), and the
//!   nodes' own route pings (`cluster { ping_interval: 1s }`,
//!   docs/operations.md) drop the cut node's subscribers within seconds.
//!
//! Which server a connection goes to is chosen here too (async-nats'
//! `reconnect_to_server_callback`): any that is not shunned, fewest failed
//! attempts first, at random among equals.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::{Client, ReconnectToServer, Server, ServerInfo};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::last_heard::LastHeard;
use crate::peer_reach::{self, PeerReach};

/// How long JetStream may fail to answer through a connected server
/// before the connection leaves it: longer than a meta leader's election,
/// which fails the question on every server for a few seconds. (At 5 s,
/// connections to the healthy majority left it while the meta leader was
/// on a node cut off, some for that very node, whose stale consumer leader
/// then handed them fires the majority had handed out too.)
pub const CUT_OFF_AFTER: Duration = Duration::from_secs(10);

/// How long connections on other servers may be silent to this one's
/// hellos, none of them come to this server meanwhile, before it leaves
/// its server ([`peer_reach`]): twelve of their questions unanswered. A
/// cut server that was the meta leader answers JetStream questions as one
/// for 10-20 s more; a leader election stops no hello. Longer than the
/// others take to leave a server that died or hangs ([`SILENT_AFTER`]) and
/// be heard again from here or elsewhere: at 2 s, connections whose only
/// peers were on a node killed left their healthy server with them.
pub const PEERS_SILENT_AFTER: Duration = Duration::from_secs(3);

/// How long this connection's server may answer nothing to the JetStream
/// question (not even "unavailable", as in an election), the others'
/// hellos unheard as long, before the connection leaves it: it hangs, or
/// is cut off and waits on a meta leader it cannot reach. (async-nats' own
/// pings leave a hung server after three `--nats-ping-interval`s.)
pub const SILENT_AFTER: Duration = Duration::from_secs(2);

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

#[derive(Debug, Default)]
struct HealthTimes {
    /// The last answer of any kind.
    answered: LastHeard,
    /// The last answer from JetStream.
    jetstream: LastHeard,
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
            inner: Some(Arc::default()),
        }
    }

    fn heard(&self, jetstream_answered: bool) {
        let Some(times) = &self.inner else {
            return;
        };
        times.answered.heard();
        if jetstream_answered {
            times.jetstream.heard();
        }
    }

    fn within(&self, field: impl Fn(&HealthTimes) -> &LastHeard, window: Duration) -> bool {
        self.inner
            .as_ref()
            .is_none_or(|times| field(times).within(window))
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
    peers: PeerReach,
}

impl Default for Failover {
    fn default() -> Self {
        Self {
            choices: Arc::default(),
            health: ConnectionHealth::watched(),
            peers: PeerReach::watched(),
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

    /// Whether connections on other servers still answer this one's hellos.
    pub fn peer_reach(&self) -> PeerReach {
        self.peers.clone()
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

    /// Leave the current server (`why`): shun it and reconnect elsewhere.
    async fn leave_current(&self, client: &Client, why: Leaving) {
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
            after_ms = why.after().as_millis() as u64,
            "{}: moving to another server",
            why.describe()
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

    /// Watch `client` for the rest of the process (the services still use
    /// the connection while they stop in order): answer the other
    /// connections' hellos, ask them ([`peer_reach`]) and JetStream twice a
    /// second, and move the connection when connections on other servers
    /// have not answered for [`PEERS_SILENT_AFTER`] ([`SILENT_AFTER`] where the
    /// server answers nothing either) or JetStream has not for
    /// [`CUT_OFF_AFTER`], while connected.
    pub async fn watch(&self, client: Client) {
        tokio::join!(
            peer_reach::answer(client.clone()),
            self.peers.clone().watch(client.clone()),
            self.leave_when_cut_off(client.clone()),
        );
    }

    async fn leave_when_cut_off(&self, client: Client) {
        let js = async_nats::jetstream::new(client.clone());
        let mut failing_since: Option<Instant> = None;
        let mut on_server = OnServer::default();
        loop {
            tokio::time::sleep(ASK_EVERY).await;
            if client.connection_state() != async_nats::connection::State::Connected {
                failing_since = None;
                continue;
            }
            if let Some(why) = self.cut_off_by_peers(on_server.for_how_long(&client)) {
                failing_since = None;
                on_server.left();
                self.leave_current(&client, why).await;
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
                on_server.left();
                self.leave_current(&client, Leaving::JetStreamSilent).await;
            }
        }
    }

    /// Whether to leave the server the connection has been on for
    /// `on_server_for`, as the others' hellos and JetStream's silence tell.
    fn cut_off_by_peers(&self, on_server_for: Duration) -> Option<Leaving> {
        if on_server_for >= SILENT_AFTER
            && self.peers.cut_off(SILENT_AFTER)
            && !self.health.server_answered_within(SILENT_AFTER)
        {
            return Some(Leaving::Silent);
        }
        (on_server_for >= PEERS_SILENT_AFTER && self.peers.cut_off(PEERS_SILENT_AFTER))
            .then_some(Leaving::PeersSilent)
    }
}

/// Which server a connection is on, and since when: a connection that
/// has just come to a server has not heard the others from there yet.
#[derive(Debug, Default)]
struct OnServer {
    name: String,
    since: Option<Instant>,
}

impl OnServer {
    /// How long `client` has been on its current server (as far as this
    /// watch has seen).
    fn for_how_long(&mut self, client: &Client) -> Duration {
        let name = client.server_info().server_name;
        if self.since.is_none() || name != self.name {
            self.name = name;
            self.since = Some(Instant::now());
        }
        self.since.map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// The connection is leaving its server: it starts over on the next.
    fn left(&mut self) {
        self.since = None;
    }
}

/// Why a connection leaves its server.
#[derive(Debug, Clone, Copy)]
enum Leaving {
    Silent,
    PeersSilent,
    JetStreamSilent,
}

impl Leaving {
    fn after(self) -> Duration {
        match self {
            Leaving::Silent => SILENT_AFTER,
            Leaving::PeersSilent => PEERS_SILENT_AFTER,
            Leaving::JetStreamSilent => CUT_OFF_AFTER,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Leaving::Silent => "neither JetStream nor the connections on the other NATS servers answer through this one (it hangs, or is cut off from its cluster)",
            Leaving::PeersSilent => "connections on the other NATS servers stopped answering through this one (it is cut off from its cluster)",
            Leaving::JetStreamSilent => "JetStream does not answer through this NATS server while the connection is up (cut off from its cluster, or hung)",
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

    #[tokio::test(start_paused = true)]
    async fn a_server_is_left_when_the_others_fall_silent_sooner_when_it_is_silent_too() {
        let failover = Failover::default();
        let heard_everything = || {
            failover.peers.heard_other_server_for_test();
            failover.health.heard(true);
        };
        heard_everything();
        let on_server = Duration::from_secs(60);
        assert!(failover.cut_off_by_peers(on_server).is_none(), "just heard");
        // The others silent 2.1 s, the server still answering: not yet.
        tokio::time::advance(Duration::from_millis(1_900)).await;
        failover.health.heard(false);
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(failover.cut_off_by_peers(on_server).is_none());
        // 3.1 s of the others' silence: cut off.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(matches!(
            failover.cut_off_by_peers(on_server),
            Some(Leaving::PeersSilent)
        ));
        // Just come to this server: nothing heard from here yet.
        assert!(failover.cut_off_by_peers(Duration::from_secs(1)).is_none());
        // Everything silent 2.1 s: left sooner.
        heard_everything();
        tokio::time::advance(Duration::from_millis(2_100)).await;
        assert!(matches!(
            failover.cut_off_by_peers(on_server),
            Some(Leaving::Silent)
        ));
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
