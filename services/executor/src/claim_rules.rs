//! The value of an overlap claim and what it means for a run that wants it.
//!
//! Pure: no NATS here, so every rule is tested on its own. The claim is
//! `claim.<job>[.<shard>]` in `jetcron_running` (see [`crate::claims`]).
//!
//! Besides who holds the job now, the claim remembers which runs were here:
//! the last [`RECENT_RUNS`] runs that took it (or were skipped because of
//! it), and whether each one's outcome is stored. That memory is what lets a
//! fire start without reading `JETCRON_RUNS`, which needs that stream's
//! leader at the very instant: a run that is not in the list, and scheduled
//! after every run that fell off it, never held the claim, so no other
//! delivery of it can have called its target. A run that is in the list and
//! ended is a late delivery, settled without running. Anything else (the
//! run was here and its end is not known, a claim from an older jetcron, a
//! claim deleted by one) is *uncertain*: only then is `JETCRON_RUNS` asked.
//! Fires that waited together for a leader election arrive in any order;
//! the list keeps the older ones fresh too.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// How many runs a claim remembers: more than the fires of one job that can
/// pile up behind a leader election (a job firing every second, 60 s).
pub const RECENT_RUNS: usize = 64;

/// The value of a claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub run_id: String,
    pub executor_id: String,
    pub attempt: u32,
    pub expires_at_ms: i64,
    /// The holder's outcome is stored: the claim is free for the next run.
    #[serde(default)]
    pub ended: bool,
    /// Runs that took this claim or were skipped because of it, oldest
    /// first. `None` in a claim written by an older jetcron.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent: Option<Vec<Visit>>,
    /// Latest scheduled time (Unix ms) of the runs that fell off `recent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forgotten_up_to_ms: Option<i64>,
}

/// One run that was at a claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Visit {
    pub run_id: String,
    pub scheduled_ms: i64,
    /// Its outcome is stored (never set for a skip: the skip is noted before
    /// its event is stored).
    #[serde(default)]
    pub ended: bool,
}

/// Who wants the claim.
#[derive(Debug, Clone)]
pub struct Claimant {
    pub run_id: String,
    pub executor_id: String,
    pub attempt: u32,
    pub scheduled_at: DateTime<Utc>,
}

/// What the claim says about the history of the run that takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum History {
    /// Never here before: no delivery of it ran.
    Fresh,
    /// Taken back from this very run: the same delivery, or the run waiting
    /// for its retry.
    Retry,
    /// Uncertain at first, and checked since against `JETCRON_RUNS` and the
    /// executors: the run has not ended and nobody calls it.
    Checked,
}

/// What to do about the claim as it stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Take(History),
    /// Another live run holds it.
    Busy,
    /// Another delivery of this run holds it and is not waiting for a retry.
    SameRunActive,
    /// This run was here and ended: a late delivery.
    RanAlready,
    /// Another delivery of this run may have run it: check `JETCRON_RUNS`
    /// (and whether an executor still calls it) before taking the claim.
    Uncertain,
}

/// The situation of the claim's key.
#[derive(Debug, Clone, Copy)]
pub enum Current<'a> {
    /// Never written (or gone with the bucket's age limit).
    Absent,
    /// A delete marker: released by an older jetcron, its history lost.
    Deleted,
    Held(&'a Claim),
}

/// The rules, in order: a run that was here and ended never runs again; a
/// live holder of another run keeps the job; a delivery of the holding run
/// waits for it, retries after it, or (when it stopped refreshing) is
/// uncertain; otherwise the claim is free, and the run's history decides
/// whether it may be taken at once. `checked`: the claimant's uncertainty
/// was checked already. `take_over_from`: a run whose claim counts as free
/// (a `replace` fire killed it, or a `forbid` fire found nobody calling it).
pub fn decide(
    current: Current<'_>,
    claimant: &Claimant,
    checked: bool,
    take_over_from: Option<&str>,
    ttl: chrono::Duration,
    now: DateTime<Utc>,
) -> Decision {
    let uncertain = if checked {
        Decision::Take(History::Checked)
    } else {
        Decision::Uncertain
    };
    let holder = match current {
        Current::Absent => return Decision::Take(History::Fresh),
        Current::Deleted => return uncertain,
        Current::Held(holder) => holder,
    };
    let expired = holder.expires_at_ms <= now.timestamp_millis();
    if holder.run_id == claimant.run_id {
        if holder.ended {
            return Decision::RanAlready;
        }
        let same_delivery =
            holder.executor_id == claimant.executor_id && holder.attempt == claimant.attempt;
        if same_delivery || waits_for_retry(holder, ttl, now) {
            return Decision::Take(History::Retry);
        }
        // A delivery that stopped refreshing: it died, or its refreshes wait
        // for a leader election while it still calls the target.
        return if expired {
            uncertain
        } else {
            Decision::SameRunActive
        };
    }
    let visit = holder
        .recent
        .as_ref()
        .and_then(|recent| recent.iter().find(|v| v.run_id == claimant.run_id));
    if visit.is_some_and(|v| v.ended) {
        return Decision::RanAlready;
    }
    let released = take_over_from == Some(holder.run_id.as_str());
    if !holder.ended && !released && !expired {
        return Decision::Busy;
    }
    let scheduled = claimant.scheduled_at.timestamp_millis();
    let never_here = holder.recent.is_some()
        && visit.is_none()
        && holder.forgotten_up_to_ms.is_none_or(|f| f < scheduled);
    if never_here {
        Decision::Take(History::Fresh)
    } else {
        uncertain
    }
}

/// The claim `claimant` writes when it takes the job from `previous`.
pub fn taken(
    previous: Option<&Claim>,
    claimant: &Claimant,
    ttl: chrono::Duration,
    now: DateTime<Utc>,
) -> Claim {
    let mut claim = Claim {
        run_id: claimant.run_id.clone(),
        executor_id: claimant.executor_id.clone(),
        attempt: claimant.attempt,
        expires_at_ms: (now + ttl).timestamp_millis(),
        ended: false,
        recent: previous.and_then(|p| p.recent.clone()),
        forgotten_up_to_ms: previous.and_then(|p| p.forgotten_up_to_ms),
    };
    claim.visit(&claimant.run_id, claimant.scheduled_at);
    claim
}

impl Claim {
    /// Remember that `run_id` was here (once), forgetting the oldest visit
    /// beyond [`RECENT_RUNS`].
    pub fn visit(&mut self, run_id: &str, scheduled_at: DateTime<Utc>) {
        let recent = self.recent.get_or_insert_with(Vec::new);
        if recent.iter().any(|v| v.run_id == run_id) {
            return;
        }
        recent.push(Visit {
            run_id: run_id.to_string(),
            scheduled_ms: scheduled_at.timestamp_millis(),
            ended: false,
        });
        while recent.len() > RECENT_RUNS {
            let forgotten = recent.remove(0);
            self.forgotten_up_to_ms = Some(
                self.forgotten_up_to_ms
                    .map_or(forgotten.scheduled_ms, |f| f.max(forgotten.scheduled_ms)),
            );
        }
    }

    /// The holder's outcome is stored: the claim is free, and the run is
    /// remembered as ended.
    pub fn end(&mut self) {
        self.ended = true;
        if let Some(visit) = self
            .recent
            .as_mut()
            .and_then(|recent| recent.iter_mut().find(|v| v.run_id == self.run_id))
        {
            visit.ended = true;
        }
    }
}

/// Expiry of a claim refreshed every `refresh`: three missed refreshes.
pub fn claim_ttl(refresh: std::time::Duration) -> chrono::Duration {
    chrono::Duration::from_std(refresh * 3).unwrap_or(chrono::Duration::seconds(30))
}

/// Whether `holder` is a run waiting between attempts rather than one that
/// is running: a running attempt refreshes its claim to at most `ttl` ahead,
/// while a run waiting for a retry holds it until its retry time plus `ttl`.
/// One refresh period of slack keeps clock skew between executors from making
/// a running claim look like a waiting one.
pub fn waits_for_retry(holder: &Claim, ttl: chrono::Duration, now: DateTime<Utc>) -> bool {
    let refresh = ttl / 3;
    holder.expires_at_ms > (now + ttl + refresh).timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone as _;
    use std::time::Duration;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("time")
    }

    fn ttl() -> chrono::Duration {
        claim_ttl(Duration::from_secs(2))
    }

    fn claimant(run_id: &str, scheduled_at: DateTime<Utc>) -> Claimant {
        Claimant {
            run_id: run_id.into(),
            executor_id: "e2".into(),
            attempt: 1,
            scheduled_at,
        }
    }

    fn seconds(s: i64) -> chrono::Duration {
        chrono::Duration::seconds(s)
    }

    /// The claim after `runs` (id, seconds from now) took it in turn, each
    /// ending before the next; the last one still holds it (expiring at `expires`).
    fn after(runs: &[(&str, i64)], expires: DateTime<Utc>) -> Claim {
        let mut claim: Option<Claim> = None;
        for (run, at) in runs {
            if let Some(c) = claim.as_mut() {
                c.end();
            }
            let mut holder = claimant(run, now() + seconds(*at));
            holder.executor_id = "e1".into();
            claim = Some(taken(claim.as_ref(), &holder, ttl(), now()));
        }
        let mut claim = claim.expect("runs");
        claim.expires_at_ms = expires.timestamp_millis();
        claim
    }

    fn decide_now(current: Current<'_>, claimant: &Claimant) -> Decision {
        decide(current, claimant, false, None, ttl(), now())
    }

    #[test]
    fn a_claim_held_past_the_refresh_horizon_is_a_run_waiting_for_a_retry() {
        let holder = |expires: DateTime<Utc>| after(&[("r", 0)], expires);
        let ttl = claim_ttl(Duration::from_secs(10));
        // Refreshed a moment ago by a running attempt.
        assert!(!waits_for_retry(&holder(now() + ttl), ttl, now()));
        // Refreshed by an executor whose clock runs 5 s ahead.
        assert!(!waits_for_retry(
            &holder(now() + ttl + seconds(5)),
            ttl,
            now()
        ));
        // Held through a 5-minute backoff.
        assert!(waits_for_retry(
            &holder(now() + chrono::Duration::minutes(5) + ttl),
            ttl,
            now()
        ));
    }

    #[test]
    fn a_run_that_was_never_here_is_fresh_whatever_its_order() {
        let mut claim = after(&[("a", 0), ("b", 1), ("c", 3)], now() + ttl());
        claim.end();
        // The next fire, and an older one that waited out an election.
        assert_eq!(
            decide_now(Current::Held(&claim), &claimant("d", now() + seconds(4))),
            Decision::Take(History::Fresh)
        );
        assert_eq!(
            decide_now(Current::Held(&claim), &claimant("x", now() + seconds(2))),
            Decision::Take(History::Fresh)
        );
        assert_eq!(
            decide_now(Current::Absent, &claimant("first", now())),
            Decision::Take(History::Fresh)
        );
    }

    #[test]
    fn a_run_that_was_here_and_ended_never_runs_again() {
        // Even while another run holds the job.
        let claim = after(&[("a", 0), ("b", 1)], now() + ttl());
        assert_eq!(
            decide_now(Current::Held(&claim), &claimant("a", now())),
            Decision::RanAlready
        );
        let mut ended = claim.clone();
        ended.end();
        assert_eq!(
            decide_now(Current::Held(&ended), &claimant("b", now() + seconds(1))),
            Decision::RanAlready
        );
    }

    #[test]
    fn what_the_claim_cannot_vouch_for_is_uncertain_until_checked() {
        // Taken over from `a` without its end being known (it went silent).
        let mut claim = taken(
            Some(&after(&[("a", 0)], now() + ttl())),
            &claimant("b", now() + seconds(1)),
            ttl(),
            now(),
        );
        claim.end();
        let a = claimant("a", now());
        assert_eq!(decide_now(Current::Held(&claim), &a), Decision::Uncertain);
        assert_eq!(
            decide(Current::Held(&claim), &a, true, None, ttl(), now()),
            Decision::Take(History::Checked)
        );
        // A run older than everything the claim forgot.
        let runs: Vec<(String, i64)> = (0..=RECENT_RUNS as i64)
            .map(|i| (format!("r{i}"), 10 + i))
            .collect();
        let runs: Vec<(&str, i64)> = runs.iter().map(|(r, at)| (r.as_str(), *at)).collect();
        let mut long = after(&runs, now() + ttl());
        long.end();
        assert_eq!(long.recent.as_ref().map(Vec::len), Some(RECENT_RUNS));
        assert_eq!(
            decide_now(Current::Held(&long), &claimant("old", now() + seconds(10))),
            Decision::Uncertain
        );
        // A claim written by an older jetcron, or deleted by one.
        let legacy: Claim = serde_json::from_slice(
            br#"{"run_id":"a","executor_id":"e","attempt":1,"expires_at_ms":5}"#,
        )
        .expect("old claim");
        assert_eq!(
            decide_now(Current::Held(&legacy), &claimant("b", now())),
            Decision::Uncertain
        );
        assert_eq!(
            decide_now(Current::Deleted, &claimant("b", now())),
            Decision::Uncertain
        );
    }

    #[test]
    fn the_claim_of_a_live_run_is_busy_until_it_ends_expires_or_is_released() {
        let live = after(&[("a", 0)], now() + ttl());
        let next = claimant("b", now() + seconds(1));
        assert_eq!(decide_now(Current::Held(&live), &next), Decision::Busy);
        let expired = after(&[("a", 0)], now() - seconds(1));
        assert_eq!(
            decide_now(Current::Held(&expired), &next),
            Decision::Take(History::Fresh)
        );
        assert_eq!(
            decide(Current::Held(&live), &next, false, Some("a"), ttl(), now()),
            Decision::Take(History::Fresh)
        );
    }

    #[test]
    fn a_delivery_of_the_holding_run_waits_retries_or_learns_it_ended() {
        let other_delivery = claimant("a", now());
        let live = after(&[("a", 0)], now() + ttl());
        assert_eq!(
            decide_now(Current::Held(&live), &other_delivery),
            Decision::SameRunActive
        );
        let stale = after(&[("a", 0)], now() - seconds(1));
        assert_eq!(
            decide_now(Current::Held(&stale), &other_delivery),
            Decision::Uncertain
        );
        let waiting = after(&[("a", 0)], now() + chrono::Duration::minutes(5));
        assert_eq!(
            decide_now(Current::Held(&waiting), &other_delivery),
            Decision::Take(History::Retry)
        );
        let mut ended = live.clone();
        ended.end();
        assert_eq!(
            decide_now(Current::Held(&ended), &other_delivery),
            Decision::RanAlready
        );
    }

    #[test]
    fn a_skipped_run_is_remembered_but_not_as_ended() {
        let mut claim = after(&[("a", 0)], now() + ttl());
        claim.visit("skipped", now() + seconds(1));
        claim.end();
        // Its skip may not be stored yet: a redelivery checks.
        assert_eq!(
            decide_now(
                Current::Held(&claim),
                &claimant("skipped", now() + seconds(1))
            ),
            Decision::Uncertain
        );
    }
}
