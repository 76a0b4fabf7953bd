//! Limits on password sign-ins, against guessing: tries per user name
//! that did not succeed (whether the user exists or not, so the limit does
//! not tell) and attempts per client address (an IPv6 client per /64, what
//! one host is usually given). A try counts against its name as soon as it
//! is let through, and is forgotten only when it succeeds, so a burst of
//! parallel tries gets no more checks than the limit. Kept in each
//! gateway's memory: behind a load balancer of N gateways a guesser gets up
//! to N times the budget (docs/console.md).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many of what, per how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignInLimits {
    /// Failed sign-ins a name may have per `name_window`.
    pub name_failures: usize,
    pub name_window: Duration,
    /// Sign-ins (failed or not) an address may try per `address_window`.
    pub address_attempts: usize,
    pub address_window: Duration,
}

impl Default for SignInLimits {
    fn default() -> Self {
        Self {
            name_failures: 5,
            name_window: Duration::from_secs(15 * 60),
            address_attempts: 20,
            address_window: Duration::from_secs(60),
        }
    }
}

/// Most names or addresses remembered; past it the oldest windows go
/// (a flood of made-up names must not grow memory without bound).
const MAX_KEYS: usize = 100_000;

/// Times of recent events per key, within a window.
#[derive(Default)]
struct Windows {
    by_key: HashMap<String, VecDeque<Instant>>,
}

impl Windows {
    /// The events of `key` still within `window` at `now`.
    fn recent(&mut self, key: &str, window: Duration, now: Instant) -> usize {
        let Some(times) = self.by_key.get_mut(key) else {
            return 0;
        };
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= window)
        {
            times.pop_front();
        }
        let n = times.len();
        if n == 0 {
            self.by_key.remove(key);
        }
        n
    }

    /// When the oldest event of `key` leaves `window`, from `now`.
    fn free_in(&self, key: &str, window: Duration, now: Instant) -> Duration {
        self.by_key
            .get(key)
            .and_then(|times| times.front())
            .map_or(Duration::ZERO, |oldest| {
                window.saturating_sub(now.duration_since(*oldest))
            })
    }

    /// Count an event of `key` at `now` unless `limit` of them are within
    /// `window`: `Err(wait)` then, or when too many keys are counted (a
    /// flood), after which `wait` frees it.
    fn take(
        &mut self,
        key: &str,
        limit: usize,
        window: Duration,
        now: Instant,
    ) -> Result<(), Duration> {
        if self.recent(key, window, now) >= limit {
            return Err(self.free_in(key, window, now));
        }
        match self.record(key, window, now) {
            true => Ok(()),
            false => Err(window),
        }
    }

    /// Count an event of `key` at `now`; `false` when `MAX_KEYS` others
    /// are within their window (a flood of names or addresses: refused,
    /// rather than forgetting what was counted).
    fn record(&mut self, key: &str, window: Duration, now: Instant) -> bool {
        if self.by_key.len() >= MAX_KEYS && !self.by_key.contains_key(key) {
            self.by_key.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < window)
            });
            if self.by_key.len() >= MAX_KEYS {
                return false;
            }
        }
        self.by_key
            .entry(key.to_string())
            .or_default()
            .push_back(now);
        true
    }
}

/// Password checks at once: each takes 19 MiB and tens of milliseconds
/// of a core, so a flood of sign-ins waits here instead of starving the
/// gateway.
const CHECKS_AT_ONCE: usize = 2;

/// The longest a sign-in waits for a check to run; past it the sign-in is
/// refused as busy (a flood must not make the queue grow without end).
const CHECK_WAIT: Duration = Duration::from_secs(5);

/// How a password check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    Matches,
    DoesNotMatch,
    /// Too many checks waiting: not checked.
    Busy,
}

/// The key an address is counted under: an IPv4 address, an IPv6 /64.
fn address_key(address: Option<IpAddr>) -> String {
    match address {
        None => "unknown".to_string(),
        Some(IpAddr::V4(v4)) => v4.to_string(),
        Some(IpAddr::V6(v6)) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

/// The limits, what they have counted, and the password checks running.
pub struct SignInGuard {
    limits: SignInLimits,
    names: Mutex<Windows>,
    addresses: Mutex<Windows>,
    checking: tokio::sync::Semaphore,
}

fn lock(windows: &Mutex<Windows>) -> std::sync::MutexGuard<'_, Windows> {
    windows
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl SignInGuard {
    pub fn new(limits: SignInLimits) -> Self {
        Self {
            limits,
            names: Mutex::default(),
            addresses: Mutex::default(),
            checking: tokio::sync::Semaphore::new(CHECKS_AT_ONCE),
        }
    }

    /// Whether `password` is the one hashed in `phc` (`None`: no such
    /// user, checked all the same), off the async threads.
    pub async fn verify(&self, phc: Option<String>, password: String) -> Checked {
        let Ok(Ok(_permit)) = tokio::time::timeout(CHECK_WAIT, self.checking.acquire()).await
        else {
            return Checked::Busy;
        };
        let matched = tokio::task::spawn_blocking(move || {
            super::passwords::verify(phc.as_deref(), &password)
        })
        .await
        .unwrap_or(false);
        match matched {
            true => Checked::Matches,
            false => Checked::DoesNotMatch,
        }
    }

    /// Count an attempt to sign in as `name` from `address` at `now`,
    /// against the address and (until it succeeds) against the name:
    /// `Err(wait)` when either limit is reached (the attempt must not be
    /// checked), after which `wait` frees it.
    pub fn attempt(
        &self,
        name: &str,
        address: Option<IpAddr>,
        now: Instant,
    ) -> Result<(), Duration> {
        let limits = self.limits;
        lock(&self.addresses).take(
            &address_key(address),
            limits.address_attempts,
            limits.address_window,
            now,
        )?;
        lock(&self.names).take(
            &name.trim().to_lowercase(),
            limits.name_failures,
            limits.name_window,
            now,
        )
    }

    /// Count a sign-in with the identity provider begun from `address` at
    /// `now` (each keeps a record until it ends): `Err(wait)` past the
    /// address's limit.
    pub fn provider_attempt(&self, address: Option<IpAddr>, now: Instant) -> Result<(), Duration> {
        let limits = self.limits;
        lock(&self.addresses).take(
            &address_key(address),
            limits.address_attempts,
            limits.address_window,
            now,
        )
    }

    /// A sign-in as `name` succeeded: its tries are forgotten.
    pub fn succeeded(&self, name: &str) {
        lock(&self.names).by_key.remove(&name.trim().to_lowercase());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> SignInGuard {
        SignInGuard::new(SignInLimits {
            name_failures: 3,
            name_window: Duration::from_secs(60),
            address_attempts: 5,
            address_window: Duration::from_secs(10),
        })
    }

    #[test]
    fn failures_per_name_stop_further_tries_until_the_window_moves() {
        let guard = guard();
        let start = Instant::now();
        let here = Some(IpAddr::from([127, 0, 0, 1]));
        for i in 0..3 {
            let at = start + Duration::from_secs(i * 4);
            assert_eq!(guard.attempt("Alice", here, at), Ok(()));
        }
        // Same name in other case, from another address: still limited.
        let later = start + Duration::from_secs(20);
        let wait = guard
            .attempt("alice", Some(IpAddr::from([10, 0, 0, 2])), later)
            .expect_err("limited");
        assert_eq!(wait, Duration::from_secs(40));
        assert_eq!(guard.attempt("bob", here, later), Ok(()));
        assert_eq!(
            guard.attempt("alice", here, start + Duration::from_secs(61)),
            Ok(())
        );
        guard.succeeded("alice");
        let names = guard.names.lock().expect("lock");
        assert!(!names.by_key.contains_key("alice") && names.by_key.contains_key("bob"));
    }

    #[test]
    fn a_burst_of_tries_gets_no_more_checks_than_the_limit() {
        let guard = guard();
        let now = Instant::now();
        let spread = |i: u8| Some(IpAddr::from([10, 0, 1, i]));
        // Three let through before any has been checked; the rest not.
        let through = (0..10)
            .filter(|i| guard.attempt("alice", spread(*i), now).is_ok())
            .count();
        assert_eq!(through, 3);
    }

    #[test]
    fn an_ipv6_host_is_counted_by_its_64_and_a_flood_of_keys_is_refused() {
        let guard = guard();
        let now = Instant::now();
        for i in 0..5u16 {
            let address = std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 2, i, 0, 0, 1);
            assert_eq!(
                guard.attempt(&format!("u{i}"), Some(address.into()), now),
                Ok(())
            );
        }
        let same_64 = std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 9, 9, 9, 9);
        assert!(guard.attempt("u9", Some(same_64.into()), now).is_err());
        let other_64 = std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 3, 0, 0, 0, 1);
        assert_eq!(guard.attempt("u9", Some(other_64.into()), now), Ok(()));
        let mut windows = Windows::default();
        for i in 0..MAX_KEYS {
            assert!(windows.record(&i.to_string(), Duration::from_secs(60), now));
        }
        assert!(!windows.record("one more", Duration::from_secs(60), now));
        assert!(
            windows.record("0", Duration::from_secs(60), now),
            "a key counted goes on"
        );
    }

    #[test]
    fn attempts_per_address_are_limited_whatever_the_names() {
        let guard = guard();
        let start = Instant::now();
        let here = Some(IpAddr::from([127, 0, 0, 1]));
        for i in 0..5 {
            assert_eq!(guard.attempt(&format!("user{i}"), here, start), Ok(()));
        }
        assert_eq!(
            guard.attempt("user9", here, start + Duration::from_secs(1)),
            Err(Duration::from_secs(9))
        );
        assert_eq!(guard.attempt("user9", None, start), Ok(()));
        assert_eq!(
            guard.attempt("user9", here, start + Duration::from_secs(10)),
            Ok(())
        );
    }
}
