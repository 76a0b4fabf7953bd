//! Limits on password sign-ins, against guessing: failures per user name
//! (whether the user exists or not, so the limit does not tell) and
//! attempts per client address. Kept in each gateway's memory: behind a
//! load balancer of N gateways a guesser gets up to N times the budget,
//! which the windows are sized to tolerate (docs/console.md).

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

    fn record(&mut self, key: &str, window: Duration, now: Instant) {
        if self.by_key.len() >= MAX_KEYS && !self.by_key.contains_key(key) {
            self.by_key.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < window)
            });
            if self.by_key.len() >= MAX_KEYS {
                self.by_key.clear();
            }
        }
        self.by_key
            .entry(key.to_string())
            .or_default()
            .push_back(now);
    }
}

/// Password checks at once: each takes 19 MiB and tens of milliseconds
/// of a core, so a flood of sign-ins waits here instead of starving the
/// gateway.
const CHECKS_AT_ONCE: usize = 2;

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
    pub async fn verify(&self, phc: Option<String>, password: String) -> bool {
        let Ok(_permit) = self.checking.acquire().await else {
            return false;
        };
        tokio::task::spawn_blocking(move || super::passwords::verify(phc.as_deref(), &password))
            .await
            .unwrap_or(false)
    }

    /// Count an attempt to sign in as `name` from `address` at `now`:
    /// `Err(wait)` when either limit is reached (the attempt must not be
    /// checked), after which `wait` frees it.
    pub fn attempt(
        &self,
        name: &str,
        address: Option<IpAddr>,
        now: Instant,
    ) -> Result<(), Duration> {
        let name = name.trim().to_lowercase();
        let address = address.map_or_else(|| "unknown".to_string(), |a| a.to_string());
        let limits = self.limits;
        let mut addresses = lock(&self.addresses);
        if addresses.recent(&address, limits.address_window, now) >= limits.address_attempts {
            return Err(addresses.free_in(&address, limits.address_window, now));
        }
        addresses.record(&address, limits.address_window, now);
        drop(addresses);
        let mut names = lock(&self.names);
        if names.recent(&name, limits.name_window, now) >= limits.name_failures {
            return Err(names.free_in(&name, limits.name_window, now));
        }
        Ok(())
    }

    /// A sign-in as `name` failed at `now`.
    pub fn failed(&self, name: &str, now: Instant) {
        let name = name.trim().to_lowercase();
        lock(&self.names).record(&name, self.limits.name_window, now);
    }

    /// A sign-in as `name` succeeded: its failures are forgotten.
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
            guard.failed("alice", at);
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
        assert!(guard.names.lock().expect("lock").by_key.is_empty());
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
