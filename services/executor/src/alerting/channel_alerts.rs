//! Alerts to a job's channels: deciding them, and delivering them.
//!
//! **Deciding** ([`on_run`]). Each job has at most one open *incident* (key
//! `<job>.failed` in the `jetcron_incidents` bucket; `<job>.long_running`
//! for attempts running longer than `notify.running_longer_than`). A run that ends badly
//! opens it and alerts, or, when one is open, alerts again only once
//! `notify.repeat` (default 1 h) has passed since the last alert; a run that
//! succeeds closes it and sends one "resolved" alert. Every change of the
//! incident is a compare-and-swap, so of two executors handling runs of the
//! same job at once only one alerts. The incident remembers which run it
//! last alerted for: a notification handed back after a crash alerts again
//! (the same delivery ids, which JetStream deduplicates) instead of being
//! lost.
//!
//! **Delivering** ([`deliver`]). Each alert becomes one message per channel
//! in `JETCRON_NOTIFY` (`jetcron.notify.deliver.<channel>`, `Nats-Msg-Id` =
//! run, state and channel), so a channel that fails is retried on its own,
//! with backoff, without repeating the others; the request itself is
//! [`jetcron_core::alert::delivery`]. Every outcome is counted in
//! `jetcron_alert_deliveries_total{channel,result}` and logged.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::kv::{self, Operation};
use async_nats::jetstream::message::AckKind;
use async_nats::jetstream::Message;
use async_nats::HeaderMap;
use chrono::{DateTime, Utc};
use jetcron_core::alert::{delivered, Alert, AlertState, Delivery, Notification};
use jetcron_core::channel::{parse_channel, Channel};
use jetcron_core::events::{RunEvent, RunEventKind};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::ExecutorContext;

/// A job's incident: the bad runs in a row so far and, once they reached
/// `notify.after_failures`, the alert sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    pub opened_at: DateTime<Utc>,
    /// Runs in a row that ended badly.
    pub failures: u64,
    /// The last run counted (a redelivered notification counts once).
    pub last_run: String,
    /// Whether it alerted (the streak reached `after_failures`).
    pub alerted: bool,
    pub last_alert_at: DateTime<Utc>,
    /// The run the last alert was about.
    pub last_alert_run: String,
}

/// One alert for one channel, as it waits in `JETCRON_NOTIFY`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AlertDelivery {
    pub channel: String,
    /// Names the delivery: the same on every retry (`webhook-id`).
    pub message_id: String,
    pub alert: Alert,
    /// The run the alert is about, for the `notify_failed` event that
    /// records a delivery given up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunEvent>,
}

/// What a run means for the job's incident.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Nothing changes.
    Nothing,
    /// Store this incident, send nothing.
    Count(Incident),
    /// Alert (firing) and store this incident.
    Fire(Incident),
    /// Remove the incident, send nothing (a streak that never alerted).
    Clear,
    /// Alert (resolved) and remove the incident.
    Resolve(Incident),
}

/// The policy `step` applies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    /// Bad runs in a row before the first alert.
    pub after_failures: u64,
    /// Least time between two alerts of one incident.
    pub repeat: Duration,
}

/// The pure decision: what run `run_id` ending badly (`failed`) or well at
/// `now` does to the job's incident `open`.
pub fn step(
    open: Option<&Incident>,
    run_id: &str,
    failed: bool,
    now: DateTime<Utc>,
    rule: Rule,
) -> Step {
    let repeat = chrono::Duration::from_std(rule.repeat).unwrap_or(chrono::Duration::hours(1));
    let Some(incident) = open else {
        if !failed {
            return Step::Nothing;
        }
        let alerts = rule.after_failures <= 1;
        let opened = Incident {
            opened_at: now,
            failures: 1,
            last_run: run_id.to_string(),
            alerted: alerts,
            last_alert_at: now,
            last_alert_run: if alerts {
                run_id.to_string()
            } else {
                String::new()
            },
        };
        return if alerts {
            Step::Fire(opened)
        } else {
            Step::Count(opened)
        };
    };
    if !failed {
        return if incident.alerted {
            Step::Resolve(incident.clone())
        } else {
            Step::Clear
        };
    }
    // The run that alerted, handed back after a crash: alert again (the
    // delivery ids are the same, so nothing is sent twice).
    if incident.alerted && incident.last_alert_run == run_id {
        return Step::Fire(incident.clone());
    }
    // Any other run counted already: nothing new.
    if incident.last_run == run_id {
        return Step::Nothing;
    }
    let counted = Incident {
        failures: incident.failures + 1,
        last_run: run_id.to_string(),
        ..incident.clone()
    };
    let due = if incident.alerted {
        now - incident.last_alert_at >= repeat
    } else {
        counted.failures >= rule.after_failures
    };
    if due {
        Step::Fire(Incident {
            alerted: true,
            last_alert_at: now,
            last_alert_run: run_id.to_string(),
            ..counted
        })
    } else {
        Step::Count(counted)
    }
}

/// The rule of runs that end badly (the incident key `<job>.failed`).
const FAILED: &str = "failed";
/// The rule of attempts running longer than `notify.running_longer_than`.
const LONG_RUNNING: &str = "long_running";
/// The rule of fires never started (the gateway's missed-fire scan).
const MISSED: &str = "missed";

/// Decide and queue the alerts of the run `notification` is about.
pub async fn on_run(ctx: &ExecutorContext, notification: &Notification) -> anyhow::Result<()> {
    let run = &notification.run;
    let repeat = notification.notify.repeat_every();
    let once = Rule {
        after_failures: 1,
        repeat,
    };
    // Which incidents the notification speaks of, and whether it is bad
    // news for them ("failed" in the incident's terms).
    let steps: Vec<(&str, bool, Rule)> = match notification.rule.as_deref() {
        Some(LONG_RUNNING) => vec![(LONG_RUNNING, !notification.over, once)],
        Some(MISSED) => vec![(MISSED, true, once)],
        Some(other) => anyhow::bail!("notification of an unknown rule {other:?}"),
        None => {
            let failed = matches!(
                run.kind,
                RunEventKind::Failed | RunEventKind::TimedOut | RunEventKind::Killed
            );
            let streak = Rule {
                after_failures: notification.notify.failures_before_alert(),
                repeat,
            };
            if failed {
                vec![(FAILED, true, streak)]
            } else {
                // A run that succeeds ends the failures and the missed fires.
                vec![(FAILED, false, streak), (MISSED, false, once)]
            }
        }
    };
    for (rule_name, failed, rule) in steps {
        decide(ctx, notification, rule_name, failed, rule).await?;
    }
    Ok(())
}

/// One incident's step, written by compare-and-swap (decided again when it
/// changed meanwhile), its alert queued.
async fn decide(
    ctx: &ExecutorContext,
    notification: &Notification,
    rule_name: &str,
    failed: bool,
    rule: Rule,
) -> anyhow::Result<()> {
    let run = &notification.run;
    let key = format!("{}.{rule_name}", run.job_id);
    for _ in 0..8 {
        let entry = ctx
            .incidents
            .entry(&key)
            .await
            .context("read the job's incident")?
            .filter(|e| e.operation == Operation::Put);
        let open: Option<Incident> = entry
            .as_ref()
            .and_then(|e| serde_json::from_slice(&e.value).ok());
        let revision = entry.as_ref().map_or(0, |e| e.revision);
        let now = ctx.clock.now();
        let (write, alert) = match step(open.as_ref(), run.run_id.as_str(), failed, now, rule) {
            Step::Nothing => return Ok(()),
            Step::Count(incident) => (Some(incident), None),
            Step::Fire(incident) => {
                let alert = firing(notification, rule_name, &incident, now, ctx);
                (Some(incident), Some(alert))
            }
            Step::Clear => (None, None),
            Step::Resolve(incident) => (
                None,
                Some(resolved(notification, rule_name, &incident, now, ctx)),
            ),
        };
        // Queue the deliveries first: if the write below loses a race, the
        // next round decides again and the same ids are dropped as duplicates.
        if let Some(alert) = &alert {
            queue(ctx, &notification.notify.channels, run, alert).await?;
        }
        let written = match write {
            Some(incident) => {
                let value = serde_json::to_vec(&incident)?.into();
                if revision == 0 {
                    ctx.incidents
                        .create(&key, value)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                } else {
                    ctx.incidents
                        .update(&key, value, revision)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            }
            None => ctx
                .incidents
                .delete_expect_revision(&key, Some(revision))
                .await
                .map_err(|e| e.to_string()),
        };
        match written {
            Ok(()) => return Ok(()),
            Err(why) => {
                info!(job_id = %run.job_id, why, "incident changed meanwhile, deciding again")
            }
        }
    }
    anyhow::bail!("the incident of {} keeps changing", run.job_id)
}

fn link(ctx: &ExecutorContext, run_id: &str) -> Option<String> {
    ctx.config
        .console_url
        .as_deref()
        .map(|base| format!("{}/ui/runs/{run_id}", base.trim_end_matches('/')))
}

fn firing(
    n: &Notification,
    rule_name: &str,
    incident: &Incident,
    now: DateTime<Utc>,
    ctx: &ExecutorContext,
) -> Alert {
    let run = &n.run;
    let status = run.kind.as_str().replace('_', " ");
    let (summary, status) = match rule_name {
        MISSED => (
            match incident.failures {
                1 => format!(
                    "the fire of {} was never started",
                    run.scheduled_at.format("%Y-%m-%d %H:%M:%S UTC")
                ),
                k => format!(
                    "the fire of {} was never started; {k} missed since {}",
                    run.scheduled_at.format("%Y-%m-%d %H:%M:%S UTC"),
                    incident.opened_at.format("%Y-%m-%d %H:%M UTC")
                ),
            },
            MISSED.to_string(),
        ),
        LONG_RUNNING => {
            let since = run.started_at.unwrap_or(run.at);
            let limit = n.notify.running_longer_than.clone().unwrap_or_default();
            (
                format!(
                    "attempt {} still running after {limit} (started {})",
                    run.attempt,
                    since.format("%Y-%m-%d %H:%M:%S UTC")
                ),
                "running".to_string(),
            )
        }
        _ => (
            match incident.failures {
                1 => format!(
                    "run {status} (attempt {} of {})",
                    run.attempt, run.max_attempts
                ),
                k => format!(
                    "run {status}; {k} runs in a row ended badly since {}",
                    incident.opened_at.format("%Y-%m-%d %H:%M UTC")
                ),
            },
            run.kind.as_str().to_string(),
        ),
    };
    let headline = Headline {
        state: AlertState::Firing,
        summary,
        status: Some(status),
    };
    alert_of(n, rule_name, headline, now, ctx)
}

fn resolved(
    n: &Notification,
    rule_name: &str,
    incident: &Incident,
    now: DateTime<Utc>,
    ctx: &ExecutorContext,
) -> Alert {
    let run = &n.run;
    let summary = match rule_name {
        LONG_RUNNING => format!("the long-running attempt {} has ended", run.attempt),
        MISSED => format!(
            "runs again: a run succeeded after {} missed fires",
            incident.failures
        ),
        _ => format!(
            "succeeded again after {} runs in a row that ended badly since {}",
            incident.failures,
            incident.opened_at.format("%Y-%m-%d %H:%M UTC")
        ),
    };
    let status = (rule_name != LONG_RUNNING).then(|| run.kind.as_str().to_string());
    let headline = Headline {
        state: AlertState::Resolved,
        summary,
        status,
    };
    alert_of(n, rule_name, headline, now, ctx)
}

/// What an alert says first: whether it fires or resolves, in a line, and
/// the run's status.
struct Headline {
    state: AlertState,
    summary: String,
    status: Option<String>,
}

/// The alert of `n` about its job's `rule_name` incident: the run's facts,
/// and its error and output when it fires.
fn alert_of(
    n: &Notification,
    rule_name: &str,
    headline: Headline,
    now: DateTime<Utc>,
    ctx: &ExecutorContext,
) -> Alert {
    let Headline {
        state,
        summary,
        status,
    } = headline;
    let run = &n.run;
    let firing = state == AlertState::Firing;
    Alert {
        state,
        rule: rule_name.to_string(),
        summary,
        job_id: run.job_id.clone(),
        schedule: n.schedule.clone(),
        run_id: Some(run.run_id.as_str().to_string()),
        status,
        attempt: Some(run.attempt),
        max_attempts: Some(run.max_attempts),
        error: run.error.clone().filter(|_| firing),
        output_tail: run.output.clone().filter(|_| firing),
        link: link(ctx, run.run_id.as_str()),
        at: now,
    }
}

/// One delivery message per channel.
async fn queue(
    ctx: &ExecutorContext,
    channels: &[String],
    run: &RunEvent,
    alert: &Alert,
) -> anyhow::Result<()> {
    let run_id = run.run_id.as_str();
    let state = match alert.state {
        AlertState::Firing => "firing",
        AlertState::Resolved => "resolved",
    };
    for channel in channels {
        let message_id = format!("{run_id}:{}:{state}:{channel}", alert.rule);
        let body = serde_json::to_vec(&AlertDelivery {
            channel: channel.clone(),
            message_id: message_id.clone(),
            alert: alert.clone(),
            run: Some(run.clone()),
        })?;
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", message_id.as_str());
        ctx.js
            .publish_with_headers(
                jetcron_core::subjects::alert_delivery_subject(channel),
                headers,
                body.into(),
            )
            .await
            .context("publish an alert delivery")?
            .await
            .context("store an alert delivery")?;
    }
    Ok(())
}

/// Send one alert to one channel; retried with backoff, then given up with
/// the reason logged and counted.
pub async fn deliver(ctx: &ExecutorContext, message: Message) {
    let delivery = message
        .info()
        .map(|i| u32::try_from(i.delivered).unwrap_or(u32::MAX))
        .unwrap_or(1);
    let Ok(item) = serde_json::from_slice::<AlertDelivery>(&message.payload) else {
        warn!(subject = %message.subject, "undecodable alert delivery, dropping it");
        let _ = message.ack_with(AckKind::Term).await;
        return;
    };
    let result = send(ctx, &item).await;
    let max = ctx.config.notify_max_attempts.max(1);
    let (settle, outcome) = match &result {
        Ok(()) => (AckKind::Ack, "delivered"),
        Err(_) if delivery < max => {
            let delay = ctx
                .config
                .notify_backoff
                .saturating_mul(1 << delivery.saturating_sub(1).min(10))
                .min(Duration::from_secs(300));
            (AckKind::Nak(Some(delay)), "retrying")
        }
        Err(_) => (AckKind::Term, "failed"),
    };
    match &result {
        Ok(()) => {
            info!(channel = %item.channel, job_id = %item.alert.job_id, id = %item.message_id, delivery, "alert delivered")
        }
        Err(why) => {
            warn!(channel = %item.channel, job_id = %item.alert.job_id, id = %item.message_id, delivery, why, outcome, "alert not delivered")
        }
    }
    metrics::counter!("jetcron_alert_deliveries_total", "channel" => item.channel.clone(), "result" => outcome)
        .increment(1);
    if let (Err(why), AckKind::Term) = (&result, settle) {
        // Given up: said where people look, beside the run it was about.
        if let Err(e) = record_failure(ctx, &message, &item, delivery, why).await {
            warn!(error = %format!("{e:#}"), "cannot record the failed alert delivery, handing it back");
            let _ = message
                .ack_with(AckKind::Nak(Some(Duration::from_secs(5))))
                .await;
            return;
        }
    }
    if let Err(e) = message.ack_with(settle).await {
        warn!(error = %e, "cannot settle an alert delivery");
    }
}

/// A `notify_failed` event of the alert's run (stored in ClickHouse with the
/// run's other events, counted by `/v1/stats`), one per alert and channel.
async fn record_failure(
    ctx: &ExecutorContext,
    message: &Message,
    item: &AlertDelivery,
    tries: u32,
    why: &str,
) -> anyhow::Result<()> {
    let Some(run) = &item.run else {
        // Queued by an executor of an older build: only logged and counted.
        return Ok(());
    };
    let mut event = run.clone();
    event.kind = RunEventKind::NotifyFailed;
    event.event_id = format!(
        "{}:{}",
        RunEvent::event_id_for(
            &run.run_id,
            run.shard,
            run.attempt,
            RunEventKind::NotifyFailed
        ),
        item.message_id
    );
    event.at = ctx.clock.now();
    event.executor_id = ctx.config.executor_id.clone();
    event.output = None;
    event.output_truncated = false;
    event.outcome = None;
    event.retry_at = None;
    event.error = Some(format!(
        "alert {} ({}) to channel {:?} not delivered after {tries} tries: {why}",
        item.alert.rule,
        match item.alert.state {
            AlertState::Firing => "firing",
            AlertState::Resolved => "resolved",
        },
        item.channel
    ));
    crate::run_events::publish_run_event(
        &ctx.js,
        crate::run_events::max_event_payload(&ctx.nats),
        &event,
        Duration::from_secs(30),
        Some(crate::run_events::KeepAlive::Message(message)),
    )
    .await
    .map(|_| ())
}

async fn channel(ctx: &ExecutorContext, name: &str) -> Result<Channel, String> {
    let entry = ctx
        .channels
        .entry(name)
        .await
        .map_err(|e| format!("cannot read channel {name:?}: {e}"))?
        .filter(|e| e.operation == kv::Operation::Put)
        .ok_or_else(|| format!("no channel {name:?} in jetcron_channels"))?;
    parse_channel(&entry.value, Some(name)).map_err(|problems| {
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        format!("channel {name:?} is not valid: {}", problems.join("; "))
    })
}

async fn send(ctx: &ExecutorContext, item: &AlertDelivery) -> Result<(), String> {
    let channel = channel(ctx, &item.channel).await?;
    let now = ctx.clock.now();
    let request = match jetcron_core::alert::delivery(&channel, &item.alert, now, &item.message_id)
    {
        Delivery::Http(request) => request,
        Delivery::Mail(_) => {
            let roots = ctx.config.smtp_ca_file.as_deref();
            return super::mail::send(&channel, &item.alert, roots).await;
        }
        Delivery::Unsendable(why) => return Err(why),
    };
    let mut builder = ctx
        .http
        .post(&request.url)
        .timeout(Duration::from_secs(15))
        .body(request.body);
    for (name, value) in &request.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let response = builder
        .send()
        .await
        .map_err(|e| crate::targets::http::error_chain(&e))?;
    let status = response.status().as_u16();
    let body = response.bytes().await.unwrap_or_default();
    delivered(&channel, status, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minutes: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + minutes * 60, 0).expect("time")
    }

    const HOURLY: Rule = Rule {
        after_failures: 1,
        repeat: Duration::from_secs(3600),
    };

    #[test]
    fn one_alert_per_incident_repeated_after_the_interval_and_one_resolution() {
        assert_eq!(step(None, "r1", false, at(0), HOURLY), Step::Nothing);
        let Step::Fire(open) = step(None, "r1", true, at(0), HOURLY) else {
            panic!("the first failure alerts")
        };
        assert_eq!((open.failures, open.alerted), (1, true));
        // The same run handed back: alert again (same ids).
        assert_eq!(
            step(Some(&open), "r1", true, at(1), HOURLY),
            Step::Fire(open.clone())
        );
        // More failures within the hour: counted, quiet; a redelivery counts once.
        let Step::Count(counted) = step(Some(&open), "r2", true, at(10), HOURLY) else {
            panic!("quiet within the repeat interval")
        };
        assert_eq!(
            (counted.failures, counted.last_alert_run.as_str()),
            (2, "r1")
        );
        assert_eq!(
            step(Some(&counted), "r2", true, at(11), HOURLY),
            Step::Nothing
        );
        // After the hour: alert again.
        let Step::Fire(again) = step(Some(&counted), "r3", true, at(61), HOURLY) else {
            panic!("repeated after the interval")
        };
        assert_eq!(
            (again.failures, again.last_alert_at, again.opened_at),
            (3, at(61), at(0))
        );
        // A success closes it.
        assert_eq!(
            step(Some(&again), "r4", false, at(62), HOURLY),
            Step::Resolve(again.clone())
        );
    }

    #[test]
    fn after_failures_waits_for_that_many_in_a_row() {
        let three = Rule {
            after_failures: 3,
            ..HOURLY
        };
        let Step::Count(one) = step(None, "r1", true, at(0), three) else {
            panic!("one bad run is not enough")
        };
        assert!(!one.alerted);
        let Step::Count(two) = step(Some(&one), "r2", true, at(1), three) else {
            panic!("two are not enough")
        };
        // A success in between ends the streak without a word.
        assert_eq!(step(Some(&two), "ok", false, at(2), three), Step::Clear);
        let Step::Fire(fired) = step(Some(&two), "r3", true, at(2), three) else {
            panic!("the third in a row alerts")
        };
        assert_eq!(
            (fired.failures, fired.alerted, fired.last_alert_run.as_str()),
            (3, true, "r3")
        );
        assert_eq!(
            step(Some(&fired), "r4", false, at(3), three),
            Step::Resolve(fired.clone())
        );
    }
}
