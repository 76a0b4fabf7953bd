//! Whether this connection's NATS server still reaches the rest of the
//! cluster, asked of the other jetcron connections over core NATS.
//!
//! JetStream's answers cannot tell a cut-off server quickly. A meta leader
//! election fails every JetStream question on every server for seconds, so
//! only a long silence can count as a cut; and a cut server that was the
//! meta leader goes on answering as one until it notices it lost its
//! quorum, 10-20 s later (nats-server's `lostQuorumInterval`): a ticker
//! connected to it could not store due events for 24 s while its account
//! questions were answered, and an executor called the fires of a cut's
//! first seconds that the majority handed out again (45 of the 48 fires
//! called twice in a run of the partition test). Core NATS can tell: in an
//! election the routes carry requests as ever and the connections on other
//! servers answer; from a cut server none does.
//!
//! Every watched jetcron connection ([`crate::nats_failover`]) answers
//! [`PEER_HELLO`] with its server's name and an id of its own, and asks
//! every [`ASK_EVERY`], noting when a connection on another server last
//! answered. [`PeerReach::cut_off`] is true only while such answers were
//! heard before and have stopped, and none of those connections has come
//! to this server meanwhile: where every other connection was on a node
//! that died, they reconnect, some to this server, and the silence of
//! other servers says nothing (at first it did, and connections left
//! healthy servers with them in the crash test). Where no connection on
//! another server answers at all (one node, or every process on the same
//! server), it says nothing either. A connection leaves its server when the
//! others have been silent a while ([`crate::nats_failover`]); an executor
//! withholds a call whose start is not stored sooner, beside a second of
//! JetStream's silence (`attempt.rs`).
//!
//! Each connection asks and answers: with C connections, 4·C² small
//! messages a second, on core NATS only.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jetcron_core::subjects::PEER_HELLO;
use tokio::time::Instant;
use tracing::warn;

use crate::last_heard::LastHeard;

/// How often the watch asks.
pub const ASK_EVERY: Duration = Duration::from_millis(250);

/// How long answers from other servers are remembered as "this cluster has
/// them": a silence older than this says nothing any more.
const KNOWN_FOR: Duration = Duration::from_secs(60);

/// When a connection on another server last answered. Cheap to clone; the
/// default is not watched and never reports a cut.
#[derive(Debug, Clone, Default)]
pub struct PeerReach {
    heard: Option<Arc<Heard>>,
}

#[derive(Debug, Default)]
struct Heard {
    /// The last answer from a connection on another server.
    other_server: LastHeard,
    /// The last answer, through this connection's server, from a
    /// connection that answered from another server before: it moved here
    /// (its server died or hangs), and the others' silence is no cut.
    moved_here: LastHeard,
}

impl PeerReach {
    /// A reach the watch ([`PeerReach::watch`]) fills in.
    pub fn watched() -> Self {
        Self {
            heard: Some(Arc::default()),
        }
    }

    /// As if a connection on another server answered now (tests of those
    /// who read the reach).
    #[cfg(test)]
    pub(crate) fn heard_other_server_for_test(&self) {
        if let Some(heard) = &self.heard {
            heard.other_server.heard();
        }
    }

    /// Whether a connection on another server answered within `window`.
    pub fn heard_within(&self, window: Duration) -> bool {
        self.heard
            .as_ref()
            .is_some_and(|h| h.other_server.within(window))
    }

    /// Whether connections on other servers answered before (within the
    /// last minute) but none for `window`, and none of them has come to
    /// this connection's server meanwhile: this server is cut off from the
    /// others, or hangs.
    pub fn cut_off(&self, window: Duration) -> bool {
        let Some(heard) = &self.heard else {
            return false;
        };
        let silent = heard.other_server.silent_for();
        silent.is_some_and(|silent| silent >= window && silent < KNOWN_FOR)
            && !heard.moved_here.within(window)
    }

    /// Ask every jetcron connection for its server's name every
    /// [`ASK_EVERY`], for the rest of the process, noting the answers that
    /// come from another server than `client`'s, and those that come from
    /// it from a connection that answered from another server before.
    pub async fn watch(self, client: async_nats::Client) {
        let Some(heard) = self.heard.clone() else {
            return;
        };
        let inbox = client.new_inbox();
        let mut answers = loop {
            match client.subscribe(format!("{inbox}.*")).await {
                Ok(answers) => break answers,
                Err(e) => {
                    warn!(error = %e, "cannot listen for other servers' answers, retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        let mut answerers = Answerers::default();
        for round in 0u64.. {
            let own = client.server_info().server_name;
            let ask = client.publish_with_reply(PEER_HELLO, format!("{inbox}.{round}"), "".into());
            // A full command queue (the connection is away) is not waited on.
            let _ = tokio::time::timeout(ASK_EVERY, ask).await;
            let next = tokio::time::Instant::now() + ASK_EVERY;
            while let Ok(Some(answer)) = tokio::time::timeout_at(next, answers.next()).await {
                answerers.hear(&heard, &own, &answer.payload);
            }
            answerers.forget_old();
        }
    }
}

/// Which server each answering connection answered from last.
#[derive(Debug, Default)]
struct Answerers {
    last: HashMap<String, (String, Instant)>,
}

impl Answerers {
    /// Note one answer (`payload`) to a connection on server `own`: from
    /// another server, or from a connection that answered from another
    /// server before and has come to `own`.
    fn hear(&mut self, heard: &Heard, own: &str, payload: &[u8]) {
        let (server, answerer) = parse_answer(payload);
        if server != own {
            heard.other_server.heard();
        } else if self.came_from_elsewhere(answerer, own) {
            heard.moved_here.heard();
        }
        self.note(answerer, server);
    }

    /// Whether `answerer` answered from another server than `own` before.
    fn came_from_elsewhere(&self, answerer: Option<&str>, own: &str) -> bool {
        answerer
            .and_then(|a| self.last.get(a))
            .is_some_and(|(server, _)| server != own)
    }

    fn note(&mut self, answerer: Option<&str>, server: &str) {
        if let Some(answerer) = answerer {
            self.last
                .insert(answerer.to_string(), (server.to_string(), Instant::now()));
        }
    }

    /// Forget connections not heard for [`KNOWN_FOR`] (processes gone).
    fn forget_old(&mut self) {
        self.last.retain(|_, (_, at)| at.elapsed() < KNOWN_FOR);
    }
}

/// An answer's server name and answering connection (`<server> <id>`; an
/// answer of an older jetcron names the server only).
fn parse_answer(payload: &[u8]) -> (&str, Option<&str>) {
    let text = std::str::from_utf8(payload).unwrap_or_default();
    match text.split_once(' ') {
        Some((server, answerer)) => (server, Some(answerer)),
        None => (text, None),
    }
}

/// Answer [`PEER_HELLO`] on `client` with its server's name and an id of
/// this connection, for the rest of the process.
pub async fn answer(client: async_nats::Client) {
    let id = format!("{:016x}", fastrand::u64(..));
    let mut asks = loop {
        match client.subscribe(PEER_HELLO).await {
            Ok(asks) => break asks,
            Err(e) => {
                warn!(error = %e, "cannot answer other connections' hellos, retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    while let Some(ask) = asks.next().await {
        if let Some(reply) = ask.reply {
            let name = client.server_info().server_name;
            let _ = client.publish(reply, format!("{name} {id}").into()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unwatched_reach_never_reports_a_cut() {
        assert!(!PeerReach::default().cut_off(Duration::ZERO));
    }

    #[test]
    fn a_cluster_never_heard_from_says_nothing() {
        assert!(!PeerReach::watched().cut_off(Duration::ZERO));
    }

    fn heard(reach: &PeerReach) -> &Heard {
        reach.heard.as_deref().expect("watched")
    }

    #[test]
    fn a_silence_counts_from_the_last_answer_of_another_server() {
        let reach = PeerReach::watched();
        heard(&reach).other_server.heard();
        assert!(!reach.cut_off(Duration::from_secs(1)), "just heard");
        assert!(reach.cut_off(Duration::ZERO));
        std::thread::sleep(Duration::from_millis(30));
        assert!(reach.cut_off(Duration::from_millis(20)));
        assert!(!reach.cut_off(Duration::from_millis(500)));
    }

    #[test]
    fn others_that_moved_to_this_server_are_no_cut() {
        let reach = PeerReach::watched();
        heard(&reach).other_server.heard();
        std::thread::sleep(Duration::from_millis(30));
        assert!(reach.cut_off(Duration::from_millis(20)));
        heard(&reach).moved_here.heard();
        assert!(!reach.cut_off(Duration::from_millis(20)));
    }

    #[test]
    fn an_answerer_heard_from_another_server_before_came_from_elsewhere() {
        let mut answerers = Answerers::default();
        assert!(!answerers.came_from_elsewhere(Some("a"), "n0"), "unknown");
        answerers.note(Some("a"), "n1");
        answerers.note(Some("b"), "n0");
        assert!(answerers.came_from_elsewhere(Some("a"), "n0"));
        assert!(!answerers.came_from_elsewhere(Some("b"), "n0"));
        assert!(!answerers.came_from_elsewhere(None, "n0"), "no id");
    }

    #[test]
    fn a_connection_that_moved_here_keeps_the_silence_from_counting_as_a_cut() {
        let reach = PeerReach::watched();
        let mut answerers = Answerers::default();
        answerers.hear(heard(&reach), "n0", b"n1 aa");
        answerers.hear(heard(&reach), "n0", b"n0 bb");
        std::thread::sleep(Duration::from_millis(30));
        assert!(reach.cut_off(Duration::from_millis(20)), "n1 silent");
        // bb was always here: no move.
        answerers.hear(heard(&reach), "n0", b"n0 bb");
        assert!(reach.cut_off(Duration::from_millis(20)));
        // aa answered from n1 before and now from here: it moved.
        answerers.hear(heard(&reach), "n0", b"n0 aa");
        assert!(!reach.cut_off(Duration::from_millis(20)));
    }

    #[test]
    fn answers_name_their_server_and_connection() {
        assert_eq!(parse_answer(b"n1 00ff"), ("n1", Some("00ff")));
        assert_eq!(
            parse_answer(b"n1"),
            ("n1", None),
            "an older jetcron's answer"
        );
        assert_eq!(parse_answer(&[0xff, 0xfe]), ("", None), "not UTF-8");
    }
}
