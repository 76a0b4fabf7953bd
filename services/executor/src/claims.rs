//! Overlap claims: which run of a job holds it, for `concurrency: forbid` and
//! `replace`, shared by every executor through `jetcron_running`.
//!
//! A claim is the KV entry `claim.<job>[.<shard>]` (its value and the rules
//! that read it are in [`crate::claim_rules`]). It is taken with
//! compare-and-swap on the entry's revision, so two executors that receive
//! two fires at once cannot both win. The holder refreshes the expiry while
//! it runs (with its in-progress acks) and marks the claim ended when its
//! outcome is stored; a crashed executor's claim simply expires. The claim
//! belongs to the run, not the attempt: a retry of the same run takes it
//! back, and it is held through the wait between attempts.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::kv::{self, Operation};
use chrono::{DateTime, Utc};
use tracing::{debug, warn};

use crate::claim_rules::{self, waits_for_retry, Current, Decision};
pub use crate::claim_rules::{claim_ttl, Claim, Claimant, History};

/// How long a release is retried while the bucket has no leader.
const RELEASE_BUDGET: Duration = Duration::from_secs(10);

/// Result of trying to take a claim.
pub enum Acquired {
    Held(Box<ClaimHandle>),
    /// Another live run holds it (at this revision of the claim).
    Busy(Claim, u64),
    /// Another delivery of this run holds it and is not waiting for a retry:
    /// it runs the target, or records how that went (a consumer leader
    /// handed the due event out again meanwhile).
    SameRunActive(Claim),
    /// This run was here and ended: a late delivery.
    RanAlready,
    /// Another delivery of this run may have run it: check first.
    Uncertain,
}

/// A claim this attempt holds.
pub struct ClaimHandle {
    /// Boxed: a `kv::Store` is about 1.5 KB, and the handle lives in every
    /// attempt's task (docs/benchmarks.md, the sixth round).
    store: Box<kv::Store>,
    key: String,
    revision: u64,
    claim: Claim,
    history: History,
    /// Another delivery of the same run held the claim before this one got
    /// it: that delivery may have run the target already.
    after_other_delivery: bool,
}

/// How many compare-and-swap races one acquisition tolerates.
const MAX_RACES: usize = 32;

/// How a claim is taken: whether the delivery looked already that no other
/// delivery of its run ran it, and whose claim it takes over.
#[derive(Debug, Clone, Copy, Default)]
pub struct Taking<'a> {
    pub checked: bool,
    pub take_over_from: Option<&'a str>,
}

/// Take `key` for `claimant` as [`claim_rules::decide`] allows. A lost
/// compare-and-swap is retried at once; a bucket that does not answer (its
/// leader is being elected) is an error, for the caller to retry later.
pub async fn acquire(
    store: &kv::Store,
    key: &str,
    claimant: &Claimant,
    taking: Taking<'_>,
    ttl: chrono::Duration,
    now: DateTime<Utc>,
) -> anyhow::Result<Acquired> {
    let Taking {
        checked,
        take_over_from,
    } = taking;
    for _ in 0..MAX_RACES {
        let entry = store
            .entry(key)
            .await
            .with_context(|| format!("read claim {key}"))?;
        let holder = entry
            .as_ref()
            .filter(|e| e.operation == Operation::Put)
            // An unreadable value is nobody's claim (and has no history).
            .and_then(|e| serde_json::from_slice::<Claim>(&e.value).ok());
        let current = match (&entry, &holder) {
            (_, Some(holder)) => Current::Held(holder),
            (Some(_), None) => Current::Deleted,
            (None, None) => Current::Absent,
        };
        let revision = entry.as_ref().map(|e| e.revision);
        let history =
            match claim_rules::decide(current, claimant, checked, take_over_from, ttl, now) {
                Decision::Take(history) => history,
                Decision::Busy => {
                    let holder = holder.expect("busy means held");
                    return Ok(Acquired::Busy(holder, revision.unwrap_or(0)));
                }
                Decision::SameRunActive => {
                    return Ok(Acquired::SameRunActive(holder.expect("held")))
                }
                Decision::RanAlready => return Ok(Acquired::RanAlready),
                Decision::Uncertain => return Ok(Acquired::Uncertain),
            };
        let claim = claim_rules::taken(holder.as_ref(), claimant, ttl, now);
        let value: bytes::Bytes = serde_json::to_vec(&claim)?.into();
        let written = match revision {
            Some(revision) => match store.update(key, value, revision).await {
                Ok(revision) => Some(revision),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => None,
                Err(e) => return Err(anyhow::Error::from(e).context(format!("write claim {key}"))),
            },
            None => match store.create(key, value).await {
                Ok(revision) => Some(revision),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => None,
                Err(e) => return Err(anyhow::Error::from(e).context(format!("create claim {key}"))),
            },
        };
        if let Some(revision) = written {
            return Ok(Acquired::Held(Box::new(ClaimHandle {
                store: Box::new(store.clone()),
                key: key.to_string(),
                revision,
                claim,
                history,
                after_other_delivery: false,
            })));
        }
    }
    anyhow::bail!("claim {key}: lost {MAX_RACES} compare-and-swap races in a row")
}

/// Note in the claim that `claimant`'s run was skipped because of `holder`
/// (at `revision`), before the skip is final, so that a late delivery of
/// the skipped run checks for its end first. `Ok(false)` when the claim
/// changed meanwhile (decide again).
async fn note_skipped(
    store: &kv::Store,
    key: &str,
    holder: &Claim,
    revision: u64,
    claimant: &Claimant,
) -> anyhow::Result<bool> {
    let mut noted = holder.clone();
    noted.visit(&claimant.run_id, claimant.scheduled_at);
    if noted == *holder {
        return Ok(true);
    }
    match store
        .update(key, serde_json::to_vec(&noted)?.into(), revision)
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(false),
        Err(e) => Err(anyhow::Error::from(e).context(format!("note skipped fire in {key}"))),
    }
}

/// What a claim turned out to be when read again.
#[derive(Debug, PartialEq, Eq)]
enum Reread {
    Ours,
    Other(String),
    Unknown,
}

impl ClaimHandle {
    pub fn claim(&self) -> &Claim {
        &self.claim
    }

    /// What the claim said about this run when it was taken.
    pub fn history(&self) -> History {
        self.history
    }

    /// Whether another delivery of this run held the claim first (see
    /// [`claim_for_run`]): the run may have ended meanwhile.
    pub fn after_other_delivery(&self) -> bool {
        self.after_other_delivery
    }

    /// Move the expiry to `now + ttl`. `false` when the claim is no longer
    /// ours (a `replace` fire took it over).
    pub async fn extend(&mut self, until: DateTime<Utc>) -> bool {
        self.claim.expires_at_ms = until.timestamp_millis();
        // Twice at most: a `forbid` fire may have noted its skip in the
        // claim since our last write; then write again on top of its note.
        for _ in 0..2 {
            let value = match serde_json::to_vec(&self.claim) {
                Ok(v) => v,
                Err(_) => return false,
            };
            match self
                .store
                .update(&self.key, value.into(), self.revision)
                .await
            {
                Ok(revision) => {
                    self.revision = revision;
                    return true;
                }
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    if self.reread().await != Reread::Ours {
                        warn!(key = %self.key, "claim no longer ours");
                        return false;
                    }
                }
                Err(e) => {
                    warn!(key = %self.key, error = %e, "cannot extend the claim");
                    return false;
                }
            }
        }
        false
    }

    /// Let the claim lapse now without ending it: a delivery that gives
    /// its fire up before calling (handed back, or its lease lost) leaves
    /// the run's next delivery to check whether it ran and take it
    /// ([`claim_rules::decide`]: an expired claim of its own run is
    /// uncertain), at once rather than after the claim's expiry. Ended, it
    /// had told that delivery the run ran: a lost fire.
    pub async fn lapse(mut self, now: DateTime<Utc>) {
        Box::pin(self.extend(now)).await;
    }

    /// After a failed [`Self::extend`]: the run that holds the claim now, if
    /// it is another (a `replace` fire took it over, or it expired and was
    /// taken). When it is still ours (the update's answer was lost, or a
    /// `forbid` fire noted its skip in the claim's memory), the handle learns
    /// the current revision and content, so the next write keeps that note.
    pub async fn taken_over_by(&mut self) -> Option<String> {
        match self.reread().await {
            Reread::Ours | Reread::Unknown => None,
            Reread::Other(run_id) => Some(run_id),
        }
    }

    /// Read the claim again: adopt its revision and memory when it is still
    /// ours (our expiry and end stay ours to write).
    async fn reread(&mut self) -> Reread {
        let entry = match self.store.entry(&self.key).await {
            Ok(Some(entry)) if entry.operation == Operation::Put => entry,
            // Gone or unreadable: nobody else is known to hold it.
            _ => return Reread::Unknown,
        };
        match serde_json::from_slice::<Claim>(&entry.value) {
            Ok(current) if current.run_id == self.claim.run_id => {
                self.revision = entry.revision;
                self.claim.recent = current.recent;
                self.claim.forgotten_up_to_ms = current.forgotten_up_to_ms;
                Reread::Ours
            }
            Ok(current) => Reread::Other(current.run_id),
            Err(_) => Reread::Unknown,
        }
    }

    /// The run ended and its outcome is stored: mark the claim ended (if it
    /// is still ours), retrying for a few seconds while the bucket does not
    /// answer. A claim left unmarked is taken over by the next fire once no
    /// executor says it calls its run. The claim is kept, not deleted: it
    /// carries the watermark that tells later runs they are fresh.
    pub async fn release(mut self) {
        let mut delay =
            jetcron_io::retry::RetryDelay::new(Duration::from_millis(100), Duration::from_secs(1));
        let started = tokio::time::Instant::now();
        loop {
            self.claim.end();
            let Ok(value) = serde_json::to_vec(&self.claim) else {
                return;
            };
            match self
                .store
                .update(&self.key, value.into(), self.revision)
                .await
            {
                Ok(_) => return,
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    // Still ours with a note added (a skipped fire): end it
                    // with the note. Another run's: nothing to release.
                    if self.reread().await != Reread::Ours || started.elapsed() > RELEASE_BUDGET {
                        debug!(key = %self.key, "claim already taken over");
                        return;
                    }
                }
                Err(e) if started.elapsed() > RELEASE_BUDGET => {
                    warn!(key = %self.key, error = %e, "claim not released; the next fire takes it over");
                    return;
                }
                Err(_) => tokio::time::sleep(delay.next_delay()).await,
            }
        }
    }
}

/// Mark the claim at `key` ended if `run_id` holds it (a run that ends
/// without an attempt of its own, e.g. killed while it waited for a retry).
pub async fn release_if_held_by(store: &kv::Store, key: &str, run_id: &str) {
    let Ok(Some(entry)) = store.entry(key).await else {
        return;
    };
    if entry.operation != Operation::Put {
        return;
    }
    let Ok(mut claim) = serde_json::from_slice::<Claim>(&entry.value) else {
        return;
    };
    if claim.run_id != run_id || claim.ended {
        return;
    }
    claim.end();
    let Ok(value) = serde_json::to_vec(&claim) else {
        return;
    };
    if let Err(e) = store.update(key, value.into(), entry.revision).await {
        warn!(key, error = %e, "claim not released (taken over or gone)");
    }
}

/// What the overlap policy decided for an attempt.
pub enum Overlap {
    /// The attempt holds the job's claim and may run.
    Claimed(Box<ClaimHandle>),
    /// `forbid`: the run with this id is still going; this fire is skipped.
    Declined(String),
    /// This run took the claim before and ended: a late delivery, settled
    /// without running anything.
    RanAlready,
    /// Another delivery of this run may have run it (see
    /// [`crate::claim_rules`]): check, then ask again with `checked`.
    Uncertain,
}

/// How long a `forbid` fire waits for a previous run that is still going
/// before it is skipped.
pub const FORBID_GRACE: Duration = Duration::from_secs(2);
/// How long no executor may say it runs the holder's run before a `forbid`
/// fire takes the claim over: longer than an executor's reconnection to
/// another NATS server, during which it cannot answer.
const SILENCE_BEFORE_TAKEOVER: Duration = Duration::from_secs(1);
/// How often it looks again meanwhile.
const FORBID_POLL: Duration = Duration::from_millis(50);

/// How long a probe waits for an executor to say it runs a run (one that
/// does answers within milliseconds; the whole wait is spent when none
/// does, as after an executor's death, by every fire it held).
const PROBE_WAIT: Duration = Duration::from_millis(250);

/// How far an attempt of `run_id` got on any executor, as the first one to
/// answer says (`Waiting` when none answers within [`PROBE_WAIT`]); core
/// NATS, so this works while JetStream elects leaders. `asker` names the
/// asking attempt's own registration
/// ([`crate::running::Registration::probe_asker`]), which is not answered
/// about.
pub async fn probe_run(
    client: &async_nats::Client,
    run_id: &str,
    asker: Option<String>,
) -> crate::running::Stage {
    let subject = jetcron_core::subjects::running_probe_subject(run_id);
    let request = async_nats::Request::new()
        .payload(asker.unwrap_or_default().into())
        .timeout(Some(PROBE_WAIT));
    match client.send_request(subject, request).await {
        Ok(reply) => crate::running::Stage::from_reply(&reply.payload),
        Err(_) => crate::running::Stage::Waiting,
    }
}

/// Keep `message` alive when `every` has passed since `last` or its lease
/// needs it now, noting when in `last`.
async fn keep_alive_when_due(
    message: &crate::lease::Delivery,
    last: &mut tokio::time::Instant,
    every: Duration,
) {
    if last.elapsed() >= every || message.renewal_due() {
        message.keep_alive().await;
        *last = tokio::time::Instant::now();
    }
}

/// How long a `replace` fire waits for the run it killed to let go.
const REPLACE_WAIT_POLL: Duration = Duration::from_millis(100);

/// Take `key`, the claim of a job (shard), for `claimant` under `policy`
/// (`forbid` or `replace`); `checked` when the delivery looked already that
/// no other delivery of its run ran it. While a `replace` waits for the run
/// it killed, `message` is kept alive with in-progress acks, so JetStream
/// does not hand it to another executor.
pub async fn claim_for_run(
    ctx: &crate::ExecutorContext,
    message: &crate::lease::Delivery,
    key: String,
    claimant: Claimant,
    policy: jetcron_core::job::ConcurrencyPolicy,
    checked: bool,
) -> anyhow::Result<Overlap> {
    let ttl = claim_ttl(ctx.config.progress_interval);
    ClaimWait {
        ctx,
        message,
        key,
        claimant,
        policy,
        checked,
        ttl,
        started: tokio::time::Instant::now(),
        // Longest wait for a killed run to release: its claim expires by then.
        give_up: ttl.to_std().unwrap_or(Duration::from_secs(30)) + Duration::from_secs(5),
        killed: None,
        busy_since: None,
        silent_since: None,
        take_over_from: None,
        last_progress: tokio::time::Instant::now(),
        saw_other_delivery: false,
        unavailable: jetcron_io::retry::RetryDelay::new(
            Duration::from_millis(100),
            Duration::from_secs(2),
        ),
    }
    .until_decided()
    .await
}

/// One delivery's wait for a job's claim, and what it learnt meanwhile.
struct ClaimWait<'a> {
    ctx: &'a crate::ExecutorContext,
    message: &'a crate::lease::Delivery,
    key: String,
    claimant: Claimant,
    policy: jetcron_core::job::ConcurrencyPolicy,
    checked: bool,
    ttl: chrono::Duration,
    started: tokio::time::Instant,
    give_up: Duration,
    /// The run this delivery killed (`replace`).
    killed: Option<String>,
    /// Since when the same other run has been seen running.
    busy_since: Option<(String, tokio::time::Instant)>,
    /// Since when no executor has said it runs that run.
    silent_since: Option<tokio::time::Instant>,
    /// The run whose claim is taken over at the next try.
    take_over_from: Option<String>,
    last_progress: tokio::time::Instant,
    saw_other_delivery: bool,
    unavailable: jetcron_io::retry::RetryDelay,
}

impl ClaimWait<'_> {
    /// Try until the claim is taken or the fire is decided otherwise.
    async fn until_decided(mut self) -> anyhow::Result<Overlap> {
        loop {
            // A delivery whose lease ran out takes no claim: its fire may be
            // another delivery's by now.
            anyhow::ensure!(
                self.message.is_ours(),
                "the delivery's lease ran out while it waited for the claim"
            );
            let Some(acquired) = self.try_acquire().await? else {
                continue;
            };
            let (holder, revision) = match acquired {
                Acquired::Held(mut handle) => {
                    handle.after_other_delivery = self.saw_other_delivery;
                    return Ok(Overlap::Claimed(handle));
                }
                Acquired::SameRunActive(holder) => {
                    self.saw_other_delivery = true;
                    // Wait for the other delivery to finish (it releases the
                    // claim) or die (the claim expires within its TTL).
                    self.keep_alive_when_due().await;
                    debug!(executor = %holder.executor_id, attempt = holder.attempt, "another delivery of this run holds its claim, waiting");
                    tokio::time::sleep(REPLACE_WAIT_POLL).await;
                    continue;
                }
                Acquired::RanAlready => return Ok(Overlap::RanAlready),
                Acquired::Uncertain => return Ok(Overlap::Uncertain),
                Acquired::Busy(holder, revision) => (holder, revision),
            };
            let decided = if self.policy == jetcron_core::job::ConcurrencyPolicy::Forbid {
                self.forbidden_by(holder, revision).await?
            } else {
                self.replacing(holder).await?
            };
            if let Some(overlap) = decided {
                return Ok(overlap);
            }
        }
    }

    /// One try to take the claim; `None` when the bucket did not answer (its
    /// leader is being elected) and the retry's wait is over: the message
    /// is kept alive meanwhile rather than the run handed back.
    async fn try_acquire(&mut self) -> anyhow::Result<Option<Acquired>> {
        let taking = Taking {
            checked: self.checked,
            take_over_from: self.take_over_from.as_deref(),
        };
        let acquired = acquire(
            &self.ctx.running,
            &self.key,
            &self.claimant,
            taking,
            self.ttl,
            self.ctx.clock.now(),
        )
        .await;
        match acquired {
            Ok(acquired) => {
                self.unavailable.reset();
                Ok(Some(acquired))
            }
            Err(e) => {
                self.wait_for_the_bucket(e).await?;
                self.message.keep_alive().await;
                Ok(None)
            }
        }
    }

    /// Wait before the next try after `error`, unless that would outlast the
    /// ack wait: then the error is the answer.
    async fn wait_for_the_bucket(&mut self, error: anyhow::Error) -> anyhow::Result<()> {
        let wait = self.unavailable.next_delay();
        if self.started.elapsed() + wait > self.ctx.config.ack_wait {
            return Err(error);
        }
        tokio::time::sleep(wait).await;
        Ok(())
    }

    /// `forbid`, with `holder` holding the claim at `revision`: wait while
    /// it runs briefly, take it over when it runs nowhere, or skip this
    /// fire. `None`: try again.
    async fn forbidden_by(
        &mut self,
        holder: Claim,
        revision: u64,
    ) -> anyhow::Result<Option<Overlap>> {
        let now = tokio::time::Instant::now();
        let since = match &self.busy_since {
            Some((run, since)) if *run == holder.run_id => *since,
            _ => {
                self.busy_since = Some((holder.run_id.clone(), now));
                self.silent_since = None;
                now
            }
        };
        // Going: an executor says it calls the holder's target, or the
        // holder waits for a retry (one that only records its outcome
        // does not hold the next fire back).
        let stage = if waits_for_retry(&holder, self.ttl, self.ctx.clock.now()) {
            crate::running::Stage::Calling
        } else {
            probe_run(&self.ctx.nats, &holder.run_id, None).await
        };
        let going = stage == crate::running::Stage::Calling;
        if going {
            self.silent_since = None;
        } else {
            // An executor that says the holder only records its outcome
            // ends the wait at once; silence must last a moment.
            let silent = *self.silent_since.get_or_insert(now);
            let recording = stage == crate::running::Stage::Recording;
            if recording || silent.elapsed() >= SILENCE_BEFORE_TAKEOVER {
                // A claim that outlived its run's call: its executor
                // died, or the run only records how it went (its events
                // or its release wait for a leader election).
                tracing::info!(holder = %holder.run_id, "the claim's run runs nowhere, taking it over");
                self.take_over_from = Some(holder.run_id);
                return Ok(None);
            }
        }
        // Fires that waited together (for a leader election, say) come
        // at once: let a short previous run end first; and an executor
        // that reconnects answers again within the silence allowed.
        if since.elapsed() < FORBID_GRACE || !going {
            // Keep the message ours while waiting: a wait stretched by a
            // loaded machine must not let JetStream hand the fire to
            // another executor meanwhile.
            self.keep_alive_when_due().await;
            tokio::time::sleep(FORBID_POLL).await;
            return Ok(None);
        }
        // The skip is recorded in the claim before it is final, so a late
        // delivery of this run knows to look for its end first.
        let noted = note_skipped(
            &self.ctx.running,
            &self.key,
            &holder,
            revision,
            &self.claimant,
        );
        match noted.await {
            Ok(true) => Ok(Some(Overlap::Declined(holder.run_id))),
            Ok(false) => Ok(None),
            Err(e) => {
                self.wait_for_the_bucket(e).await?;
                Ok(None)
            }
        }
    }

    /// `replace`, with `holder` holding the claim: kill its run once, and
    /// take the claim when it lets go, when nobody runs it, or when its
    /// claim must have expired. `None`: try again.
    async fn replacing(&mut self, holder: Claim) -> anyhow::Result<Option<Overlap>> {
        let ctx = self.ctx;
        if self.killed.as_deref() != Some(holder.run_id.as_str()) {
            let reason = format!(
                "replaced by run {} (concurrency: replace)",
                self.claimant.run_id
            );
            let stopped = jetcron_io::control::kill_run(
                &ctx.nats,
                &ctx.running,
                &holder.run_id,
                &reason,
                Duration::from_millis(500),
                ctx.clock.now(),
            )
            .await?;
            tracing::info!(holder = %holder.run_id, executors = stopped.len(), "killed the previous run to replace it");
            if stopped.is_empty() && waits_for_retry(&holder, self.ttl, ctx.clock.now()) {
                // Nobody runs it: it waits for a retry, and the kill marker
                // stops it when it comes back. Take the claim now. (A holder
                // that did not answer but still refreshes its claim may be a
                // slow executor: wait for its release or the claim's expiry.)
                self.take_over_from = Some(holder.run_id.clone());
            }
            self.killed = Some(holder.run_id);
            return Ok(None);
        }
        if self.started.elapsed() > self.give_up {
            self.take_over_from = Some(holder.run_id);
            return Ok(None);
        }
        self.keep_alive_when_due().await;
        tokio::time::sleep(REPLACE_WAIT_POLL).await;
        Ok(None)
    }

    /// Keep the message alive when a progress interval has passed since the
    /// last keep-alive, or its lease needs it now.
    async fn keep_alive_when_due(&mut self) {
        let every = self.ctx.config.progress_interval;
        keep_alive_when_due(self.message, &mut self.last_progress, every).await;
    }
}
