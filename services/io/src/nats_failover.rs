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
//!   connection asks JetStream for its account info each second; when that
//!   has failed for [`CUT_OFF_AFTER`] while the connection is up, the
//!   server is shunned for a while and the connection moves to another.
//!   A meta leader election (after a node dies) fails the same question
//!   for a few seconds everywhere: the wait is longer than those, so a
//!   healthy server is rarely left, and leaving one costs a reconnect.
//!
//! Which server a connection goes to is chosen here too (async-nats'
//! `reconnect_to_server_callback`): any that is not shunned, fewest failed
//! attempts first, at random among equals.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::{Client, ReconnectToServer, Server, ServerInfo};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// How long JetStream may fail to answer through a connected server
/// before the connection leaves it.
pub const CUT_OFF_AFTER: Duration = Duration::from_secs(5);

/// How often JetStream is asked through each connection.
const ASK_EVERY: Duration = Duration::from_secs(1);

/// How long one question may take.
const ANSWER_WITHIN: Duration = Duration::from_millis(1_500);

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

/// Where one connection goes; shared by its reconnect callback and its
/// watch. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Failover {
    choices: Arc<Mutex<Choices>>,
}

impl Failover {
    fn lock(&self) -> std::sync::MutexGuard<'_, Choices> {
        self.choices.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Ask JetStream through `client` every second until `stop`, and move
    /// the connection when it has not answered for [`CUT_OFF_AFTER`] while
    /// connected.
    pub async fn watch(&self, client: Client, stop: CancellationToken) {
        let js = async_nats::jetstream::new(client.clone());
        let mut failing_since: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(ASK_EVERY) => {}
            }
            if client.connection_state() != async_nats::connection::State::Connected {
                failing_since = None;
                continue;
            }
            let asked = Instant::now();
            match tokio::time::timeout(ANSWER_WITHIN, js.query_account()).await {
                Ok(Ok(_)) => failing_since = None,
                Ok(Err(e)) if !cut_off_sign(&e) => {
                    failing_since = None;
                    debug!(error = %e, "JetStream account info refused (not a sign of a cut-off server)");
                }
                Ok(Err(_)) | Err(_) => {
                    let since = *failing_since.get_or_insert(asked);
                    if since.elapsed() >= CUT_OFF_AFTER {
                        failing_since = None;
                        self.leave_current(&client).await;
                    }
                }
            }
        }
    }
}

/// Whether a failed account-info request says JetStream cannot be reached
/// through this server (no meta leader, no responders, no answer), rather
/// than refused for this account.
fn cut_off_sign(error: &async_nats::jetstream::context::AccountError) -> bool {
    use async_nats::jetstream::context::AccountErrorKind;
    match error.kind() {
        AccountErrorKind::TimedOut | AccountErrorKind::JetStreamUnavailable => true,
        AccountErrorKind::JetStream(e) => {
            e.error_code() == async_nats::jetstream::ErrorCode::CLUSTER_NOT_AVAILABLE
        }
        _ => false,
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
