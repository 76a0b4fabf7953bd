//! Every ClickHouse read of the gateway, bounded in time.
//!
//! Job definitions live in NATS, history in ClickHouse: a slow or hung
//! ClickHouse must not hold an answer that does not need it, nor hold a
//! history read for longer than its caller will wait. So every read goes
//! through [`ClickHouseReads`], the only holder of the gateway's ClickHouse
//! client that fetches rows (the builders of this room only build SQL, and
//! only this room may fetch), and ends within its time as rows or as
//! [`HistoryUnavailable`] (`503 history_unavailable`).
//!
//! Two kinds of wait ([`Patience`]):
//! - [`Patience::Full`]: a history read (`/v1/runs`, `/v1/stats`, a run's
//!   page) waits up to `--clickhouse-timeout` (3 s).
//! - [`Patience::Glance`]: the history part of an answer built around a
//!   definition (a job's last run, the console's figures, `/readyz`) waits at
//!   most [`GLANCE`] (1 s), and not at all while ClickHouse is known to be
//!   slow; the answer goes out without it and says so.
//!
//! Knowing that ClickHouse is slow: a read that runs out of time starts one
//! probe (`SELECT 1`, within the timeout). While it runs, glances do not ask
//! ClickHouse. If it runs out of time too, ClickHouse counts as silent: then
//! no read asks it, except one at a time (a full read, or a probe a glance
//! starts), and the first that answers ends the silence. The others answer
//! at once.
//!
//! Why so, and not only a timeout: clickhouse 0.15 has no query timeout (its
//! inserts have one; its hyper client takes only a connect timeout, and a
//! stopped server still completes TCP handshakes from its listen backlog).
//! Dropping a timed-out query closes its connection on our side (hyper drops
//! a connection whose response nobody waits for), but a stopped server keeps
//! each one in its accept queue until it resumes and then runs every query
//! it finds there. One request at a time while it is silent keeps that queue
//! to one connection per timeout instead of one per API request.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use clickhouse::query::Query;
use clickhouse::{RowOwned, RowRead};
use jetcron_core::api::ApiError;
use tracing::{info, warn};

/// Default of `--clickhouse-timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait of a [`Patience::Glance`] (shorter when the timeout is).
pub const GLANCE: Duration = Duration::from_secs(1);

/// How long a read may wait for ClickHouse.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Patience {
    /// Up to `--clickhouse-timeout`: the answer is the history.
    #[default]
    Full,
    /// Up to [`GLANCE`], none while ClickHouse is slow: the history is a
    /// part of the answer, which goes out without it.
    Glance,
}

impl Patience {
    /// What sets this wait, as an error names it.
    fn setting(self) -> &'static str {
        match self {
            Patience::Full => "--clickhouse-timeout",
            Patience::Glance => "the wait of history shown beside a definition",
        }
    }
}

/// Why a ClickHouse read gave no rows.
#[derive(Debug, thiserror::Error)]
pub enum HistoryUnavailable {
    #[error("ClickHouse did not answer within {after:?} ({}): {doing}", .patience.setting())]
    TimedOut {
        doing: String,
        after: Duration,
        patience: Patience,
    },
    #[error(
        "ClickHouse has not answered for {silent_for:?} (--clickhouse-timeout {timeout:?}); \
         it is not asked again until it answers: {doing}"
    )]
    Silent {
        doing: String,
        silent_for: Duration,
        timeout: Duration,
    },
    #[error(
        "ClickHouse is slow (a read just ran out of time, --clickhouse-timeout {timeout:?}); \
         left out: {doing}"
    )]
    Slow { doing: String, timeout: Duration },
    #[error("ClickHouse: {doing}: {source}")]
    Failed {
        doing: String,
        #[source]
        source: clickhouse::error::Error,
    },
}

impl From<HistoryUnavailable> for ApiError {
    fn from(e: HistoryUnavailable) -> Self {
        ApiError::history_unavailable(e)
    }
}

/// The gateway's ClickHouse client with its time bound; cheap to clone
/// (clones share what they know of ClickHouse's responsiveness).
#[derive(Clone)]
pub struct ClickHouseReads {
    client: clickhouse::Client,
    timeout: Duration,
    patience: Patience,
    health: Arc<Mutex<Health>>,
}

/// What the reads know of ClickHouse's responsiveness.
#[derive(Debug, Default)]
struct Health {
    /// Since when a probe found ClickHouse silent; `None` while it answers.
    silent_since: Option<Instant>,
    /// A probe (or the one read let through while silent) is on its way.
    probing: bool,
}

/// What a read does, given the health.
enum Admission {
    /// Ask ClickHouse, within this time.
    Ask(Duration),
    /// Ask as the one read let through while ClickHouse is silent.
    Scout,
    /// Answer at once without asking.
    Refuse(HistoryUnavailable),
}

impl ClickHouseReads {
    /// Reads of `client` bounded by `timeout` (at least a millisecond).
    pub fn new(client: clickhouse::Client, timeout: Duration) -> Self {
        Self {
            client,
            timeout: timeout.max(Duration::from_millis(1)),
            patience: Patience::Full,
            health: Arc::default(),
        }
    }

    /// These reads with `patience` (sharing the health).
    pub fn with(&self, patience: Patience) -> Self {
        Self {
            patience,
            ..self.clone()
        }
    }

    /// The client, to build queries with; fetch them with [`Self::fetch_all`].
    pub(super) fn client(&self) -> &clickhouse::Client {
        &self.client
    }

    /// Every row of `query`; `doing` says what it is for (in errors).
    pub(super) async fn fetch_all<T>(
        &self,
        query: Query,
        doing: impl Into<String>,
    ) -> Result<Vec<T>, HistoryUnavailable>
    where
        T: RowOwned + RowRead,
    {
        self.bounded(query.fetch_all::<T>(), doing.into()).await
    }

    /// The one row of `query`.
    pub(super) async fn fetch_one<T>(
        &self,
        query: Query,
        doing: impl Into<String>,
    ) -> Result<T, HistoryUnavailable>
    where
        T: RowOwned + RowRead,
    {
        self.bounded(query.fetch_one::<T>(), doing.into()).await
    }

    /// Whether ClickHouse answers `SELECT 1`.
    pub async fn ping(&self) -> Result<(), HistoryUnavailable> {
        let query = self.client.query("SELECT 1");
        self.fetch_one::<u8>(query, "SELECT 1").await.map(drop)
    }

    /// `read` within this patience's time, admitted by the health.
    async fn bounded<T>(
        &self,
        read: impl Future<Output = clickhouse::error::Result<T>>,
        doing: String,
    ) -> Result<T, HistoryUnavailable> {
        match self.admission(&doing) {
            Admission::Refuse(why) => Err(why),
            Admission::Ask(within) => {
                let answer = tokio::time::timeout(within, read).await;
                if answer.is_err() {
                    self.start_probe();
                }
                self.answered(answer, doing, within)
            }
            Admission::Scout => {
                let scouting = Scouting(self);
                let answer = tokio::time::timeout(self.timeout, read).await;
                scouting.done(answer.is_ok());
                self.answered(answer, doing, self.timeout)
            }
        }
    }

    fn answered<T>(
        &self,
        answer: Result<clickhouse::error::Result<T>, tokio::time::error::Elapsed>,
        doing: String,
        after: Duration,
    ) -> Result<T, HistoryUnavailable> {
        match answer {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(source)) => Err(HistoryUnavailable::Failed { doing, source }),
            Err(_) => Err(HistoryUnavailable::TimedOut {
                doing,
                after,
                patience: self.patience,
            }),
        }
    }

    fn health(&self) -> MutexGuard<'_, Health> {
        // The health is two plain fields: a panic elsewhere cannot leave
        // them inconsistent, so a poisoned lock is used as it is.
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn admission(&self, doing: &str) -> Admission {
        let mut health = self.health();
        let timeout = self.timeout;
        match (self.patience, health.silent_since, health.probing) {
            (Patience::Full, None, _) => Admission::Ask(timeout),
            (Patience::Glance, None, false) => Admission::Ask(GLANCE.min(timeout)),
            (Patience::Glance, None, true) => Admission::Refuse(HistoryUnavailable::Slow {
                doing: doing.to_string(),
                timeout,
            }),
            (patience, Some(since), probing) => {
                if !probing && patience == Patience::Full {
                    health.probing = true;
                    return Admission::Scout;
                }
                drop(health);
                self.start_probe();
                Admission::Refuse(HistoryUnavailable::Silent {
                    doing: doing.to_string(),
                    silent_for: to_tenths(since.elapsed()),
                    timeout,
                })
            }
        }
    }

    /// Ask `SELECT 1` beside the caller, unless a probe is on its way.
    fn start_probe(&self) {
        {
            let mut health = self.health();
            if health.probing {
                return;
            }
            health.probing = true;
        }
        let reads = self.clone();
        tokio::spawn(async move {
            let scouting = Scouting(&reads);
            let query = reads.client.query("SELECT 1");
            let answer = tokio::time::timeout(reads.timeout, query.fetch_one::<u8>()).await;
            // An error is an answer too: ClickHouse is there, and reads fail
            // fast on their own (a refused connection, a missing table).
            scouting.done(answer.is_ok());
        });
    }
}

/// `duration` to a tenth of a second (as errors show it).
fn to_tenths(duration: Duration) -> Duration {
    Duration::from_millis(duration.as_millis() as u64 / 100 * 100)
}

/// The one read (or probe) on its way while ClickHouse is suspected: ends
/// the suspicion when it is over, whether it finished or was dropped.
struct Scouting<'a>(&'a ClickHouseReads);

impl Scouting<'_> {
    /// It finished: ClickHouse `answered` or ran out of time.
    fn done(self, answered: bool) {
        let mut health = self.0.health();
        match (answered, health.silent_since) {
            (true, Some(since)) => {
                info!(silent_for = ?to_tenths(since.elapsed()), "ClickHouse answers again");
                health.silent_since = None;
            }
            (false, None) => {
                warn!(timeout = ?self.0.timeout, "ClickHouse did not answer in time twice, history reads answer at once until it does");
                health.silent_since = Some(Instant::now());
            }
            _ => {}
        }
        drop(health);
    }
}

impl Drop for Scouting<'_> {
    fn drop(&mut self) {
        self.0.health().probing = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads of a ClickHouse that accepts connections and never answers.
    async fn stopped_clickhouse(
        timeout: Duration,
    ) -> (ClickHouseReads, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let client = clickhouse::Client::default().with_url(url);
        (ClickHouseReads::new(client, timeout), server)
    }

    #[tokio::test]
    async fn a_silent_clickhouse_is_asked_once_at_a_time_and_answers_come_at_once() {
        let (reads, server) = stopped_clickhouse(Duration::from_millis(300)).await;
        let started = Instant::now();
        let first = reads.ping().await.expect_err("nothing answers");
        assert!(
            matches!(first, HistoryUnavailable::TimedOut { .. }),
            "{first}"
        );
        assert!(
            first
                .to_string()
                .starts_with("ClickHouse did not answer within 300ms (--clickhouse-timeout)"),
            "{first}"
        );
        // Bounded by the timeout (with room for a busy machine), not left
        // to the client's own.
        assert!(started.elapsed() < Duration::from_millis(1_500));
        // While the probe runs, a glance does not wait (well under the
        // 300 ms a read would have waited).
        let glance = reads.with(Patience::Glance);
        let started = Instant::now();
        let slow = glance.ping().await.expect_err("slow");
        assert!(matches!(slow, HistoryUnavailable::Slow { .. }), "{slow}");
        assert!(started.elapsed() < Duration::from_millis(250));
        // The probe runs out of time: ClickHouse is silent.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(reads.health().silent_since.is_some());
        // One full read goes (the scout) while the others answer at once.
        let scout = tokio::spawn({
            let reads = reads.clone();
            async move { reads.ping().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        let refused = reads.ping().await.expect_err("silent");
        assert!(
            matches!(refused, HistoryUnavailable::Silent { .. }),
            "{refused}"
        );
        assert!(started.elapsed() < Duration::from_millis(250));
        let scouted = scout.await.expect("scout").expect_err("still silent");
        assert!(
            matches!(scouted, HistoryUnavailable::TimedOut { .. }),
            "{scouted}"
        );
        assert!(!reads.health().probing, "the scout let go");
        server.abort();
    }

    #[tokio::test]
    async fn a_refused_connection_is_an_answer_not_a_silence() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let client = clickhouse::Client::default().with_url(format!("http://127.0.0.1:{port}"));
        let reads = ClickHouseReads::new(client, Duration::from_secs(2));
        let error = reads.ping().await.expect_err("nothing listens");
        assert!(
            matches!(error, HistoryUnavailable::Failed { .. }),
            "{error}"
        );
        let health = reads.health();
        assert!(health.silent_since.is_none() && !health.probing);
    }
}
