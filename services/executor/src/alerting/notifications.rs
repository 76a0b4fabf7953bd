//! Notifications: after a run ends badly (failed, timed out, killed), its
//! job's `notify.webhook` receives a JSON summary by POST, and its alert
//! channels hear about it through [`super::channel_alerts`] (which also hears of
//! successes, to close incidents).
//!
//! The executor that recorded the ending does not call the webhook itself: it
//! stores a notification in the `JETCRON_NOTIFY` work queue (`Nats-Msg-Id` =
//! `<run_id>:notify`, so one per run even when several shards fail) before it
//! settles the due event. Any executor delivers it from the durable consumer
//! `notifier`, and a webhook that fails gets JetStream redelivery with backoff.
//! Delivery ends in a `notified` or `notify_failed` run event: a notification
//! is never dropped silently.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, message::AckKind, Message};
use jetcron_core::control::FailureNotice;
use jetcron_core::events::{RunEvent, RunEventKind};
use jetcron_core::job::NotifyPolicy;
use jetcron_core::subjects;
use jetcron_io::topology;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::run_events::{max_event_payload, publish_run_event};
use crate::ExecutorContext;

pub use jetcron_core::alert::Notification;

/// Store the notification of the run that `ending` ended.
pub async fn enqueue(
    js: &jetstream::Context,
    notify: &NotifyPolicy,
    schedule: &str,
    ending: &RunEvent,
) -> anyhow::Result<()> {
    store(js, notify, schedule, ending, None, false).await
}

/// Store the notification that an attempt of the run `started` describes
/// has run longer than `notify.running_longer_than` (`over`: and has ended).
pub async fn enqueue_long_running(
    js: &jetstream::Context,
    notify: &NotifyPolicy,
    schedule: &str,
    started: &RunEvent,
    over: bool,
) -> anyhow::Result<()> {
    store(js, notify, schedule, started, Some("long_running"), over).await
}

async fn store(
    js: &jetstream::Context,
    notify: &NotifyPolicy,
    schedule: &str,
    ending: &RunEvent,
    rule: Option<&str>,
    over: bool,
) -> anyhow::Result<()> {
    let mut run = ending.clone();
    // Keep the notification small: the last lines of output, for alerts.
    run.output = run
        .output
        .as_deref()
        .map(jetcron_core::alert::output_tail)
        .filter(|o| !o.is_empty());
    let notification = Notification {
        notify: notify.clone(),
        run,
        schedule: schedule.to_string(),
        rule: rule.map(str::to_string),
        over,
    };
    jetcron_io::notify::enqueue(js, &notification).await
}

/// The durable consumer `notifier` on `JETCRON_NOTIFY`, shared by every executor.
pub async fn notifier_consumer(
    stream: &jetstream::stream::Stream,
) -> topology::Result<jetstream::consumer::PullConsumer> {
    topology::ensure_consumer(
        stream,
        pull::Config {
            durable_name: Some(subjects::NOTIFIER_CONSUMER.to_string()),
            description: Some("jetcron executors delivering failure notifications".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(60),
            max_deliver: -1,
            ..Default::default()
        },
    )
    .await
}

/// How long the `notified` / `notify_failed` event may take to be stored
/// (through an election of `JETCRON_RUNS`' leader) before the notification is
/// handed back.
const RECORD_BUDGET: Duration = Duration::from_secs(30);

/// Deliver notifications until `shutdown`.
pub async fn deliver(
    ctx: Arc<ExecutorContext>,
    consumer: jetstream::consumer::PullConsumer,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    crate::consumer_loop::each_message(&consumer, "notifications", 16, &shutdown, |message| {
        handle(&ctx, message)
    })
    .await;
    Ok(())
}

async fn handle(ctx: &ExecutorContext, message: Message) {
    // `jetcron.notify.deliver.<channel>`: one alert for one channel (a
    // job's notification is `jetcron.notify.<job>`, whose name may be two
    // tokens, but never in namespace `deliver`).
    if message
        .subject
        .starts_with(jetcron_core::subjects::ALERT_DELIVERY_PREFIX)
    {
        super::channel_alerts::deliver(ctx, message).await;
        return;
    }
    let delivery = message
        .info()
        .map(|i| u32::try_from(i.delivered).unwrap_or(u32::MAX))
        .unwrap_or(1);
    let notification: Notification = match serde_json::from_slice(&message.payload) {
        Ok(n) => n,
        Err(e) => {
            warn!(error = %e, "undecodable notification, terminating it");
            let _ = message.ack_with(AckKind::Term).await;
            return;
        }
    };
    let run = &notification.run;
    if !notification.notify.channels.is_empty() {
        if let Err(e) = super::channel_alerts::on_run(ctx, &notification).await {
            warn!(run_id = %run.run_id, error = %format!("{e:#}"), "cannot decide the alerts of a run, handing it back");
            let _ = message
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
            return;
        }
    }
    // The job's own webhook hears of failed runs only.
    let Some(webhook) = notification
        .notify
        .webhook
        .as_deref()
        .filter(|_| run.kind != RunEventKind::Succeeded && notification.rule.is_none())
    else {
        if let Err(e) = message.double_ack().await {
            warn!(error = %e, "cannot settle notification");
        }
        return;
    };
    let result = post(ctx, &notification, webhook).await;
    let max = ctx.config.notify_max_attempts.max(1);
    let (kind, text, settle) = match result {
        Ok(status) => {
            info!(run_id = %run.run_id, delivery, status, "notification delivered");
            (
                RunEventKind::Notified,
                format!("delivered on try {delivery} (HTTP {status})"),
                AckKind::Ack,
            )
        }
        Err(why) if delivery < max => {
            let delay = ctx
                .config
                .notify_backoff
                .saturating_mul(1 << (delivery.saturating_sub(1)).min(10))
                .min(Duration::from_secs(300));
            warn!(run_id = %run.run_id, delivery, why, delay_ms = delay.as_millis() as u64, "notification failed, will retry");
            let _ = message.ack_with(AckKind::Nak(Some(delay))).await;
            return;
        }
        Err(why) => {
            warn!(run_id = %run.run_id, delivery, why, "notification failed for good");
            (
                RunEventKind::NotifyFailed,
                format!("not delivered after {delivery} tries: {why}"),
                AckKind::Term,
            )
        }
    };
    let mut event = run.clone();
    event.kind = kind;
    event.event_id = RunEvent::event_id_for(&run.run_id, run.shard, run.attempt, kind);
    event.at = ctx.clock.now();
    event.executor_id = ctx.config.executor_id.clone();
    event.output = (kind == RunEventKind::Notified).then(|| text.clone());
    event.error = (kind == RunEventKind::NotifyFailed).then_some(text);
    event.outcome = None;
    event.retry_at = None;
    match publish_run_event(
        &ctx.js,
        max_event_payload(&ctx.nats),
        &event,
        RECORD_BUDGET,
        Some(crate::run_events::KeepAlive::Message(&message)),
    )
    .await
    {
        Ok(_) => {
            if let Err(e) = message.double_ack_with(settle).await {
                warn!(error = %e, "cannot settle notification");
            }
        }
        Err(e) => {
            warn!(error = %format!("{e:#}"), "cannot record notification result, handing it back");
            let _ = message
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
        }
    }
}

/// POST the summary to `webhook`; the HTTP status on success, the reason otherwise.
async fn post(
    ctx: &ExecutorContext,
    notification: &Notification,
    webhook: &str,
) -> Result<u16, String> {
    let mut run = notification.run.clone();
    // The webhook gets the error, not the output.
    run.output = None;
    let body = FailureNotice {
        status: notification.run.kind,
        run,
    };
    let mut request = ctx
        .http
        .post(webhook)
        .timeout(Duration::from_secs(10))
        .json(&body);
    for (name, value) in &notification.notify.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let response = request
        .send()
        .await
        .map_err(|e| crate::targets::http::error_chain(&e))?;
    let status = response.status();
    if status.is_success() {
        Ok(status.as_u16())
    } else {
        Err(format!("HTTP status {status}"))
    }
}
