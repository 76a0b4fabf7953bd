//! Configured limits of the gateway. The live job count that enforces
//! `max_jobs` is kept by [`crate::jobs::catalog`].

use std::time::Duration;

/// Default of `--max-jobs`.
pub const DEFAULT_MAX_JOBS: usize = 100_000;
/// Default of `--http-body-limit` (bytes).
pub const DEFAULT_HTTP_BODY_LIMIT: usize = 256 * 1024;

/// What the gateway accepts at most.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Jobs the bucket may hold; creating one more is refused.
    pub max_jobs: usize,
    /// Largest HTTP request body in bytes.
    pub http_body_limit: usize,
    /// How long after its time a fire without a run counts as missed
    /// ([`crate::runs::stats`]); tests shorten it.
    pub missed_grace: chrono::Duration,
    /// How often missed fires are recorded as `fire.missed` events
    /// ([`crate::missed_fires::scan`]); zero turns it off; tests shorten it.
    pub missed_scan_interval: Duration,
    /// Longest wait for ClickHouse of a history read
    /// ([`crate::sql::reads`]); `--clickhouse-timeout`.
    pub clickhouse_timeout: Duration,
    /// How long a console session lasts (`--console-idle-timeout`,
    /// `--console-session-lifetime`).
    pub console_sessions: crate::console::session::Timeouts,
    /// Password sign-ins allowed per name and per address.
    pub sign_in: crate::people::sign_in_limits::SignInLimits,
    /// Whether the client address is the last of `X-Forwarded-For`
    /// (behind a proxy) rather than the connection's peer
    /// (`--trust-forwarded-for`).
    pub trust_forwarded_for: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_jobs: DEFAULT_MAX_JOBS,
            http_body_limit: DEFAULT_HTTP_BODY_LIMIT,
            missed_grace: crate::missed_fires::count::MISSED_GRACE,
            missed_scan_interval: crate::missed_fires::scan::DEFAULT_SCAN_INTERVAL,
            clickhouse_timeout: crate::sql::reads::DEFAULT_TIMEOUT,
            console_sessions: Default::default(),
            sign_in: Default::default(),
            trust_forwarded_for: false,
        }
    }
}
