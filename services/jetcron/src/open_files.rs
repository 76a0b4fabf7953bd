//! The executor's open-file limit, raised to what the host allows.
//!
//! Each HTTP call holds a socket and each shell call a process with its
//! pipes, up to `--max-in-flight` at once (16,384 by default), while
//! systemd and most shells start a process with a soft limit of 1,024 open
//! files. Go programs (nats-server among them) raise the soft limit to the
//! hard one at start; jetcron does the same, and says so in the log when
//! even the hard limit is below the call slots, so that calls failing with
//! "too many open files" are not the first sign of it.

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use tracing::{info, warn};

/// Descriptors the process holds besides its calls' (NATS and ClickHouse
/// connections, the HTTP listener, logs), with room to spare.
const BESIDE_THE_CALLS: u64 = 256;

/// Raise the soft limit of open files to the hard one, and warn when it
/// leaves fewer than `max_in_flight` for calls.
pub fn raise_for_calls(max_in_flight: usize) {
    let limit = match raise_to_hard_limit() {
        Ok(limit) => limit,
        Err(e) => {
            warn!(error = %e, "cannot read or raise the open-file limit (RLIMIT_NOFILE)");
            return;
        }
    };
    let wanted = max_in_flight as u64 + BESIDE_THE_CALLS;
    if limit < wanted {
        warn!(
            open_file_limit = limit,
            max_in_flight,
            "the open-file limit is below --max-in-flight and what the process holds besides: \
             HTTP and shell calls beyond {} at once will fail; raise the hard limit \
             (LimitNOFILE= in systemd, ulimit -Hn) or lower --max-in-flight",
            limit.saturating_sub(BESIDE_THE_CALLS)
        );
    }
}

/// The soft limit after raising it to the hard one.
fn raise_to_hard_limit() -> nix::Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
        info!(
            from = soft,
            to = hard,
            "raised the open-file limit to the hard one"
        );
    }
    Ok(hard.max(soft))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("read the limit");
        let raised = raise_to_hard_limit().expect("raise the limit");
        let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).expect("read it again");
        assert_eq!((raised, soft), (hard, hard));
    }
}
