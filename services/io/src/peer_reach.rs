//! Whether this connection's NATS server still reaches the rest of the
//! cluster, asked of the other executors over core NATS.
//!
//! An executor whose start record is not stored at once may call the
//! target meanwhile (a leader election: it is stored seconds later), or
//! must not (its server is cut off from the cluster: a stale consumer
//! leader there handed it a fire the majority hands out too). JetStream's
//! silence cannot tell the two apart quickly: a meta leader election fails
//! every JetStream question on every server for seconds too, so only a
//! silence of 3 s counted as a cut, and the calls of a cut's first 3 s were
//! made twice (45 of the 48 fires called twice in a run of the partition
//! test). Core NATS can: in an election the routes carry requests as ever,
//! and the other executors' connections on other servers answer; from a cut
//! server none does.
//!
//! Every executor connection answers [`PEER_HELLO`] with its server's name;
//! the watch asks every 250 ms and notes when a connection on another
//! server last answered. [`PeerReach::cut_off`] is true only while such
//! answers were heard before and have stopped: where no other server's
//! executor answers at all (one node, or every executor on the same
//! server), it says nothing and the 3 s rule alone applies. The executor
//! heeds it only beside a second of JetStream's silence: an executor
//! killed is silent too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jetcron_core::subjects::PEER_HELLO;
use tracing::warn;

/// How often the watch asks.
pub const ASK_EVERY: Duration = Duration::from_millis(250);

/// How long answers from other servers are remembered as "this cluster has
/// them": a silence older than this says nothing any more.
const KNOWN_FOR: Duration = Duration::from_secs(60);

/// When a connection on another server last answered. Cheap to clone; the
/// default is not watched and never reports a cut.
#[derive(Debug, Clone, Default)]
pub struct PeerReach {
    inner: Option<Arc<Heard>>,
}

#[derive(Debug)]
struct Heard {
    since: Instant,
    /// Milliseconds since `since`, plus one; 0: never.
    other_server: AtomicU64,
}

impl PeerReach {
    /// A reach the watch ([`PeerReach::watch`]) fills in.
    pub fn watched() -> Self {
        Self {
            inner: Some(Arc::new(Heard {
                since: Instant::now(),
                other_server: AtomicU64::new(0),
            })),
        }
    }

    fn heard_other_server(&self) {
        if let Some(heard) = &self.inner {
            let at = heard.since.elapsed().as_millis() as u64 + 1;
            heard.other_server.store(at, Ordering::Release);
        }
    }

    /// Whether connections on other servers answered before (within the
    /// last minute) but none for `window`: this connection's server is cut
    /// off from the others, or hangs.
    pub fn cut_off(&self, window: Duration) -> bool {
        let Some(heard) = &self.inner else {
            return false;
        };
        let at = heard.other_server.load(Ordering::Acquire);
        if at == 0 {
            return false;
        }
        let silent = Duration::from_millis(
            (heard.since.elapsed().as_millis() as u64).saturating_sub(at - 1),
        );
        silent >= window && silent < KNOWN_FOR
    }

    /// Ask every executor connection for its server's name every
    /// [`ASK_EVERY`], for the rest of the process, noting the answers that
    /// come from another server than `client`'s.
    pub async fn watch(self, client: async_nats::Client) {
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
        for round in 0u64.. {
            let own = client.server_info().server_name;
            let ask = client.publish_with_reply(PEER_HELLO, format!("{inbox}.{round}"), "".into());
            // A full command queue (the connection is away) is not waited on.
            let _ = tokio::time::timeout(ASK_EVERY, ask).await;
            let next = tokio::time::Instant::now() + ASK_EVERY;
            while let Ok(Some(answer)) = tokio::time::timeout_at(next, answers.next()).await {
                if answer.payload.as_ref() != own.as_bytes() {
                    self.heard_other_server();
                }
            }
        }
    }
}

/// Answer [`PEER_HELLO`] on `client` with its server's name, for the rest
/// of the process.
pub async fn answer(client: async_nats::Client) {
    let mut asks = loop {
        match client.subscribe(PEER_HELLO).await {
            Ok(asks) => break asks,
            Err(e) => {
                warn!(error = %e, "cannot answer other executors' hellos, retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    while let Some(ask) = asks.next().await {
        if let Some(reply) = ask.reply {
            let name = client.server_info().server_name;
            let _ = client.publish(reply, name.into()).await;
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

    #[test]
    fn a_silence_counts_from_the_last_answer_of_another_server() {
        let reach = PeerReach::watched();
        reach.heard_other_server();
        assert!(!reach.cut_off(Duration::from_secs(1)), "just heard");
        assert!(reach.cut_off(Duration::ZERO));
        std::thread::sleep(Duration::from_millis(30));
        assert!(reach.cut_off(Duration::from_millis(20)));
        assert!(!reach.cut_off(Duration::from_millis(500)));
    }
}
