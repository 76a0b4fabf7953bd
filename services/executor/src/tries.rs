//! The retry budget of a run: which attempts count against `max_attempts`.
//!
//! JetStream's delivery count numbers the deliveries of a due event, but not
//! every delivery is a try of the user's target: an executor killed mid-run
//! (its attempt is lost), one that shuts down and hands its attempt back, or
//! one that cannot reach NATS to check a kill or take a claim all cause a
//! redelivery without the target having failed. Counting those would end a
//! `max_attempts: 1` run as failed the first time an executor restarts.
//!
//! So an attempt that *failed* (or timed out) and is retried is written down
//! before its message is nak'ed: `tries.<run>[.<shard>]` in `jetcron_running`
//! holds how many attempts failed so far. A delivery's place in the budget is
//! that count plus one; every other earlier delivery was lost or handed back.
//! The ledger is read only on redeliveries (never on a first delivery) and
//! written only on failures, so a run that succeeds first time costs nothing.
//!
//! Deliveries that do not count are still bounded: after
//! [`MAX_UNCOUNTED_DELIVERIES`] of them the run fails, so a target that kills
//! its executor every time (out of memory, say) cannot loop forever.
//!
//! The ledger also keeps the *end* of a run whose outcome event is slow to be
//! stored (`JETCRON_RUNS` electing a leader): the target was called, and an
//! executor that dies before the event is stored must not leave a
//! redelivery that calls it again. The end is written only on that slow
//! path ([`Ledger::record_end`]: when the stream has stored none of the
//! executor's run events for a second, or the event has waited two, see
//! [`crate::runs_pulse`]) and before a run whose event could not be stored
//! is handed back; a redelivery finds it, stores the event and settles the
//! message without running anything.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::kv;
use jetcron_core::events::{DueEvent, RunEvent};
use serde::{Deserialize, Serialize};
use tracing::warn;

/// Deliveries of one run (or shard) that may be lost or handed back without
/// counting against `max_attempts`. With [`handback_delay`] growing to a
/// minute, NATS trouble has to last about a quarter of an hour before it
/// fails a run; an executor killed by its target every time (ack wait 30 s)
/// gives up after about ten minutes.
pub const MAX_UNCOUNTED_DELIVERIES: u32 = 20;

/// Longest wait before a handed-back delivery comes again.
const MAX_HANDBACK_DELAY: Duration = Duration::from_secs(60);

/// How long to let JetStream hold a due event that delivery number
/// `delivery` hands back because NATS (KV, a publish) failed: 1 s, 2 s, 4 s,
/// … up to a minute, so an outage is waited out, not hammered.
pub fn handback_delay(delivery: u32) -> Duration {
    let exponent = delivery.saturating_sub(1).min(6);
    Duration::from_secs(1u64 << exponent).min(MAX_HANDBACK_DELAY)
}

/// Longest wait before a fire handed back for JetStream's silence comes
/// again ([`silence_handback_delay`]).
const MAX_SILENCE_HANDBACK_DELAY: Duration = Duration::from_secs(5);

/// How long to let JetStream hold a due event that delivery number
/// `delivery` hands back because JetStream did not answer through this
/// executor's server while its consumer's leader did (an election of
/// streams or of the meta leader, 4-9 s after a node's death, or a cut):
/// 1 s, 2 s, 3 s, … up to 5 s. Such a fire comes again at most 5 s after
/// JetStream answers again. With [`handback_delay`]'s doubling, the
/// deliveries of an election's seconds came back 1, 2, 4 and 8 s apart,
/// and one came 43 s late at attempt 5 (the leader-kill runs); 20
/// deliveries still take a minute and a half.
pub fn silence_handback_delay(delivery: u32) -> Duration {
    Duration::from_secs(u64::from(delivery.max(1))).min(MAX_SILENCE_HANDBACK_DELAY)
}

/// The ledger's value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct FailedTries {
    /// Attempts that failed or timed out.
    failed: u32,
    /// Stream sequence of the due event the count belongs to: a later due
    /// event with the same run id (a backfill of a fire whose run is gone)
    /// starts afresh instead of inheriting an old count.
    #[serde(default)]
    due_sequence: u64,
    /// The terminal event of the run, when its store was slow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ended: Option<RunEvent>,
}

/// What a redelivery learns from the ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub budget: Budget,
    /// The run ended already with this event (the target was called).
    pub ended: Option<RunEvent>,
}

/// Where a delivery stands in its run's retry budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// 1 for the first try of the target, 2 for the first retry, …
    pub try_number: u32,
    /// Earlier deliveries that were lost or handed back.
    pub uncounted: u32,
}

impl Budget {
    /// The budget of a first delivery: nothing to look up.
    pub const FIRST: Budget = Budget {
        try_number: 1,
        uncounted: 0,
    };

    /// The budget of delivery number `delivery` when `failed` earlier
    /// attempts were recorded as failed.
    pub fn of(delivery: u32, failed: u32) -> Budget {
        let failed = failed.min(delivery.saturating_sub(1));
        Budget {
            try_number: failed + 1,
            uncounted: delivery.saturating_sub(1) - failed,
        }
    }
}

/// The retry ledger of one due event (one run, or one shard of it). Its KV
/// key is only built when the ledger is read or written, which a delivery
/// that succeeds first time never does.
pub struct Ledger<'a> {
    store: &'a kv::Store,
    run_id: &'a str,
    shard: Option<u32>,
    due_sequence: u64,
}

/// How often the last failure is offered to the ledger before giving up.
const LAST_FAILURE_WRITES: usize = 3;

impl<'a> Ledger<'a> {
    /// The ledger in `store` of the due event stored at `due_sequence`.
    pub fn new(store: &'a kv::Store, due: &'a DueEvent, due_sequence: u64) -> Self {
        Self {
            store,
            run_id: due.run_id.as_str(),
            shard: due.shard,
            due_sequence,
        }
    }

    fn key(&self) -> String {
        jetcron_core::subjects::tries_key(self.run_id, self.shard)
    }

    /// What the ledger holds for delivery number `delivery`.
    pub async fn read(&self, delivery: u32) -> anyhow::Result<Recorded> {
        if delivery <= 1 {
            return Ok(Recorded {
                budget: Budget::FIRST,
                ended: None,
            });
        }
        let key = self.key();
        let (failed, ended) = match self
            .store
            .get(&key)
            .await
            .with_context(|| format!("read retry ledger {key}"))?
        {
            // An unreadable value is our own bug or a stranger's write: count
            // every earlier delivery, the conservative side.
            Some(value) => match serde_json::from_slice::<FailedTries>(&value) {
                Ok(tries) if tries.due_sequence == self.due_sequence => (tries.failed, tries.ended),
                Ok(_) => (0, None),
                Err(_) => (delivery - 1, None),
            },
            None => (0, None),
        };
        Ok(Recorded {
            budget: Budget::of(delivery, failed),
            ended,
        })
    }

    /// Record that the run ended with `event` after `failed` failed tries
    /// (its store in `JETCRON_RUNS` is slow; see the module docs).
    pub async fn record_end(&self, failed: u32, event: &RunEvent) -> anyhow::Result<()> {
        let key = self.key();
        let value = serde_json::to_vec(&FailedTries {
            failed,
            due_sequence: self.due_sequence,
            ended: Some(event.clone()),
        })?;
        self.store
            .put(&key, value.into())
            .await
            .with_context(|| format!("write retry ledger {key}"))?;
        Ok(())
    }

    /// Record that try `try_number` failed.
    pub async fn record_failure(&self, try_number: u32) -> anyhow::Result<()> {
        let key = self.key();
        let value = serde_json::to_vec(&FailedTries {
            failed: try_number,
            due_sequence: self.due_sequence,
            ended: None,
        })?;
        self.store
            .put(&key, value.into())
            .await
            .with_context(|| format!("write retry ledger {key}"))?;
        Ok(())
    }

    /// Record the last failure, trying a few times: a redelivery of a due
    /// event whose terminate was lost must find it, or it runs once more.
    pub async fn record_last_failure(&self, try_number: u32) {
        for _ in 0..LAST_FAILURE_WRITES {
            match self.record_failure(try_number).await {
                Ok(()) => return,
                Err(e) => {
                    warn!(error = %format!("{e:#}"), "cannot record the last failed try");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        warn!("last failed try not recorded: a lost terminate would run the target once more");
    }

    /// Forget the ledger of a run that ended (best effort: the bucket's max
    /// age removes what is left).
    pub async fn forget(&self) {
        let key = self.key();
        if let Err(e) = self.store.purge(&key).await {
            tracing::debug!(key, error = %e, "cannot remove retry ledger");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_and_handed_back_deliveries_do_not_count() {
        assert_eq!(Budget::of(1, 0), Budget::FIRST);
        // Delivery 3 after one failure: the other earlier delivery was lost.
        assert_eq!(
            Budget::of(3, 1),
            Budget {
                try_number: 2,
                uncounted: 1
            }
        );
        // Two deliveries, no failure recorded: the first was lost.
        assert_eq!(
            Budget::of(2, 0),
            Budget {
                try_number: 1,
                uncounted: 1
            }
        );
    }

    #[test]
    fn handed_back_deliveries_wait_longer_each_time_up_to_a_minute() {
        let delays: Vec<u64> = (1..=9).map(|d| handback_delay(d).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(handback_delay(u32::MAX), MAX_HANDBACK_DELAY);
        let silence: Vec<u64> = (1..=7)
            .map(|d| silence_handback_delay(d).as_secs())
            .collect();
        assert_eq!(silence, [1, 2, 3, 4, 5, 5, 5]);
        assert_eq!(silence_handback_delay(0), Duration::from_secs(1));
    }

    #[test]
    fn a_ledger_ahead_of_the_deliveries_is_capped() {
        assert_eq!(
            Budget::of(2, 7),
            Budget {
                try_number: 2,
                uncounted: 0
            }
        );
    }
}
