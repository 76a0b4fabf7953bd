//! What happens after an attempt ends, decided in one pure function.
//!
//! An attempt that started ends one of a few ways ([`Ending`]). Which run
//! event that is, how the due event's message is settled (ack, nak with the
//! backoff delay, nak at once, term), whether a failure notification goes
//! out, what the retry ledger records and when, and what becomes of the
//! overlap claim all follow from the ending, the try number and the job's
//! policy, and nothing else: [`decide`] says it, `attempt::settle` carries
//! it out in a fixed order. Keeping the decision apart keeps it testable
//! over every combination (the tests below) and the I/O in one place.

use std::time::Duration;

use jetcron_core::events::{AttemptOutcome, RunEventKind};

use crate::targets::Outcome;

/// How an attempt that started came to an end.
#[derive(Debug, Clone)]
pub enum Ending {
    /// The target answered (well or not).
    Done(Outcome),
    /// The job's timeout ran out first.
    TimedOut,
    /// A kill request stopped it, or another run took its overlap claim
    /// (`replace`); the reason says which.
    Killed(String),
    /// The executor is shutting down and its grace period is over.
    Interrupted,
    /// A call booked for its instant was not sent, for the reason given (the
    /// kill request could not be looked up, or the executor stopped first):
    /// handed back like an interrupted attempt, not counted as a try.
    NotCalled(String),
}

/// What the job allows, as far as the ending's consequences go.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub max_attempts: u32,
    /// The delay before the next try, if there is one.
    pub next_delay: Duration,
    /// The job's timeout, named in a timeout's error.
    pub timeout: Duration,
    /// The job has a failure notification.
    pub notifies: bool,
}

/// How the due event's message is settled once the run event is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// The run succeeded.
    Ack,
    /// Try again after this delay (a retry), or at once (handed back).
    Nak(Option<Duration>),
    /// The run is over.
    Term,
}

/// What the retry ledger records before the message is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerWrite {
    /// This try failed and counts: the next delivery must know.
    Failure(u32),
    /// The last try failed: a redelivery must not run again.
    LastFailure(u32),
}

/// What becomes of the overlap claim (when the run holds one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimStep {
    /// The run is over: mark it ended.
    Release,
    /// The run waits for its retry: hold it through the wait.
    HoldForRetry,
    /// Handed back: the next delivery of the same run takes it on.
    Keep,
}

/// Everything that follows from an ending.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub kind: RunEventKind,
    pub outcome: AttemptOutcome,
    /// The error the event carries when the ending brought its own (a
    /// timeout, a kill, a shutdown); `None`: the target's outcome speaks.
    pub error: Option<String>,
    /// When the retry comes, after the attempt's end.
    pub retry_in: Option<Duration>,
    pub settle: Settle,
    /// Queue the job's failure notification with the event.
    pub notify: bool,
    /// Written before the event is published.
    pub ledger_before: Option<LedgerWrite>,
    /// Tries that failed before this one, when the target was called and the
    /// run ends here: its end goes into the ledger should the event be slow
    /// to store (a redelivery must not call the target again).
    pub called_and_over: Option<u32>,
    pub claim: ClaimStep,
    /// Drop the run's ledger afterwards (a retried run that succeeded).
    pub forget_ledger: bool,
}

/// What happens after an attempt of try `try_number` ends as `ending`.
pub fn decide(ending: &Ending, try_number: u32, policy: Policy) -> Decision {
    let failed_before = try_number.saturating_sub(1);
    let over = |kind, outcome, error, settle, notify| Decision {
        kind,
        outcome,
        error,
        retry_in: None,
        settle,
        notify,
        ledger_before: None,
        called_and_over: Some(failed_before),
        claim: ClaimStep::Release,
        forget_ledger: false,
    };
    let (outcome, error) = match ending {
        Ending::Done(done) if done.success => {
            return Decision {
                forget_ledger: try_number > 1,
                ..over(
                    RunEventKind::Succeeded,
                    AttemptOutcome::Succeeded,
                    None,
                    Settle::Ack,
                    false,
                )
            };
        }
        Ending::Killed(reason) => {
            return over(
                RunEventKind::Killed,
                AttemptOutcome::Killed,
                Some(format!("killed: {reason}")),
                Settle::Term,
                policy.notifies,
            );
        }
        Ending::Interrupted | Ending::NotCalled(_) => {
            let why = match ending {
                Ending::NotCalled(why) => format!("not called: {why}"),
                _ => "executor shut down before the attempt finished".into(),
            };
            return Decision {
                called_and_over: None,
                claim: ClaimStep::Keep,
                ..over(
                    RunEventKind::Retrying,
                    AttemptOutcome::Interrupted,
                    Some(why),
                    Settle::Nak(None),
                    false,
                )
            };
        }
        Ending::TimedOut => (
            AttemptOutcome::TimedOut,
            Some(format!(
                "timed out after {}",
                jetcron_core::time_format::duration_text(policy.timeout)
            )),
        ),
        Ending::Done(_) => (AttemptOutcome::Failed, None),
    };
    if try_number < policy.max_attempts {
        Decision {
            retry_in: Some(policy.next_delay),
            ledger_before: Some(LedgerWrite::Failure(try_number)),
            called_and_over: None,
            claim: ClaimStep::HoldForRetry,
            ..over(
                RunEventKind::Retrying,
                outcome,
                error,
                Settle::Nak(Some(policy.next_delay)),
                false,
            )
        }
    } else {
        let kind = match outcome {
            AttemptOutcome::TimedOut => RunEventKind::TimedOut,
            _ => RunEventKind::Failed,
        };
        Decision {
            ledger_before: Some(LedgerWrite::LastFailure(try_number)),
            called_and_over: Some(try_number),
            ..over(kind, outcome, error, Settle::Term, policy.notifies)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endings() -> Vec<(&'static str, Ending)> {
        vec![
            (
                "succeeded",
                Ending::Done(Outcome {
                    success: true,
                    ..Outcome::default()
                }),
            ),
            ("failed", Ending::Done(Outcome::failed("exit status 1"))),
            ("timed out", Ending::TimedOut),
            ("killed", Ending::Killed("by request".into())),
            (
                "lost its claim",
                Ending::Killed("replaced by run r2 (concurrency: replace)".into()),
            ),
            ("shutting down", Ending::Interrupted),
            (
                "not called",
                Ending::NotCalled("cannot check for a kill request (timed out)".into()),
            ),
        ]
    }

    fn policy(max_attempts: u32, notifies: bool) -> Policy {
        Policy {
            max_attempts,
            next_delay: Duration::from_secs(7),
            timeout: Duration::from_secs(30),
            notifies,
        }
    }

    /// Every ending, at every place in the retry budget, with and without a
    /// notification: the rules that must hold together.
    #[test]
    fn every_combination_keeps_the_rules() {
        for (name, ending) in endings() {
            for max_attempts in [1, 3] {
                for try_number in 1..=max_attempts {
                    for notifies in [false, true] {
                        let d = decide(&ending, try_number, policy(max_attempts, notifies));
                        let case = format!(
                            "{name}, try {try_number} of {max_attempts}, notify {notifies}"
                        );
                        let terminal = d.kind.is_terminal();
                        // The message is termed exactly when the run is over
                        // without success; acked only on success.
                        assert_eq!(
                            d.settle == Settle::Term,
                            terminal && d.kind != RunEventKind::Succeeded,
                            "{case}"
                        );
                        assert_eq!(
                            d.settle == Settle::Ack,
                            d.kind == RunEventKind::Succeeded,
                            "{case}"
                        );
                        // A run that goes on keeps or holds its claim; one that is over releases it.
                        assert_eq!(d.claim == ClaimStep::Release, terminal, "{case}");
                        // Notifications only for failures that end the run, and only if asked.
                        assert!(
                            !d.notify
                                || (notifies && terminal && d.kind != RunEventKind::Succeeded),
                            "{case}"
                        );
                        // A retry has its delay on the nak and on the event.
                        if d.kind == RunEventKind::Retrying
                            && d.outcome != AttemptOutcome::Interrupted
                        {
                            assert_eq!(
                                d.settle,
                                Settle::Nak(Some(Duration::from_secs(7))),
                                "{case}"
                            );
                            assert_eq!(d.retry_in, Some(Duration::from_secs(7)), "{case}");
                            assert_eq!(
                                d.ledger_before,
                                Some(LedgerWrite::Failure(try_number)),
                                "{case}"
                            );
                        }
                        // An ending after the target was called and ending the run
                        // writes that into the ledger if the event is slow.
                        assert_eq!(d.called_and_over.is_some(), terminal, "{case}");
                        // Only a success after a failed try drops the ledger.
                        assert_eq!(
                            d.forget_ledger,
                            d.kind == RunEventKind::Succeeded && try_number > 1,
                            "{case}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn each_ending_goes_where_it_should() {
        let last = |e: &Ending| decide(e, 3, policy(3, true));
        let first = |e: &Ending| decide(e, 1, policy(3, true));
        let endings = endings();
        let [ok, failed, timed_out, killed, replaced, interrupted, not_called] =
            [0, 1, 2, 3, 4, 5, 6].map(|i| &endings[i].1);

        let d = first(ok);
        assert_eq!(
            (d.kind, d.settle, d.claim, d.forget_ledger),
            (
                RunEventKind::Succeeded,
                Settle::Ack,
                ClaimStep::Release,
                false
            )
        );
        assert!(
            last(ok).forget_ledger,
            "a success after failures forgets them"
        );

        let d = first(failed);
        assert_eq!(
            (d.kind, d.outcome, d.claim),
            (
                RunEventKind::Retrying,
                AttemptOutcome::Failed,
                ClaimStep::HoldForRetry
            )
        );
        assert_eq!(d.error, None, "the target's own error speaks");
        let d = last(failed);
        assert_eq!(
            (d.kind, d.settle, d.notify),
            (RunEventKind::Failed, Settle::Term, true)
        );
        assert_eq!(d.ledger_before, Some(LedgerWrite::LastFailure(3)));
        assert_eq!(d.called_and_over, Some(3));

        let d = first(timed_out);
        assert_eq!(
            (d.kind, d.outcome),
            (RunEventKind::Retrying, AttemptOutcome::TimedOut)
        );
        assert_eq!(d.error.as_deref(), Some("timed out after 30s"));
        assert_eq!(last(timed_out).kind, RunEventKind::TimedOut);

        for kill in [killed, replaced] {
            let d = first(kill);
            assert_eq!(
                (d.kind, d.settle, d.notify, d.claim),
                (RunEventKind::Killed, Settle::Term, true, ClaimStep::Release)
            );
            assert!(d
                .error
                .as_deref()
                .unwrap_or_default()
                .starts_with("killed: "));
            assert_eq!(d.ledger_before, None, "a kill does not use up a try");
        }

        // A shutdown, or a booked call that was not sent, is handed back and
        // not counted, even on the last try.
        for d in [
            first(interrupted),
            last(interrupted),
            first(not_called),
            last(not_called),
        ] {
            assert_eq!(
                (d.kind, d.outcome, d.settle, d.claim),
                (
                    RunEventKind::Retrying,
                    AttemptOutcome::Interrupted,
                    Settle::Nak(None),
                    ClaimStep::Keep
                )
            );
            assert_eq!(
                (d.ledger_before, d.retry_in, d.notify),
                (None, None, false),
                "a shutdown costs no try"
            );
        }
        assert_eq!(
            last(not_called).error.as_deref(),
            Some("not called: cannot check for a kill request (timed out)")
        );
        // No notification for a job without one.
        assert!(!decide(failed, 1, policy(1, false)).notify);
    }
}
