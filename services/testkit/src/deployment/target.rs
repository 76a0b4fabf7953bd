//! The target every job of a [`super::Deployment`] calls: one NATS
//! responder per node in a queue group (a service that itself runs highly
//! available: a responder whose node dies is gone until it reconnects, the
//! others answer meanwhile), recording each call as the target saw it.
//!
//! Flaky jobs (`flaky-<i>`) answer their first attempt with a service
//! error on every fourth second, so their runs retry once.

use std::sync::{Arc, Mutex};

use async_nats::HeaderMap;
use chrono::{DateTime, Utc};
use futures::StreamExt as _;

/// The subjects the deployment's jobs call: `svc.chaos.<job>`.
pub const TARGET_SUBJECTS: &str = "svc.chaos.*";

/// The subject job `job` calls.
pub fn target_subject(job: &str) -> String {
    format!("svc.chaos.{job}")
}

/// One call of the target, as the target saw it.
#[derive(Debug, Clone)]
pub struct Call {
    pub job: String,
    pub run_id: String,
    pub scheduled_at: DateTime<Utc>,
    pub attempt: u32,
    /// When the target received it.
    pub at: DateTime<Utc>,
    /// Whether it was answered with a service error (a flaky job's planned failure).
    pub failed: bool,
}

/// Every call so far, in the order they came.
#[derive(Debug, Clone, Default)]
pub struct Calls(Arc<Mutex<Vec<Call>>>);

impl Calls {
    pub fn snapshot(&self) -> Vec<Call> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn push(&self, call: Call) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(call);
    }
}

/// Whether a flaky job's call fails: its first attempt on every fourth second.
pub fn planned_failure(job: &str, scheduled_at: DateTime<Utc>, attempt: u32) -> bool {
    job.starts_with("flaky-") && attempt == 1 && scheduled_at.timestamp() % 4 == 0
}

/// Answer every call on `clients` (one per node), recording it.
pub async fn serve(clients: Vec<async_nats::Client>) -> (Calls, Vec<tokio::task::JoinHandle<()>>) {
    let calls = Calls::default();
    let mut tasks = Vec::new();
    for client in clients {
        let mut requests = client
            .queue_subscribe(TARGET_SUBJECTS, "chaos-target".to_string())
            .await
            .expect("subscribe target");
        let recorded = calls.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(request) = requests.next().await {
                let call = call_of(&request);
                let failed = planned_failure(&call.job, call.scheduled_at, call.attempt);
                recorded.push(Call { failed, ..call });
                if let Some(reply) = request.reply {
                    let _ = answer(&client, reply, failed).await;
                }
            }
        }));
    }
    (calls, tasks)
}

fn call_of(request: &async_nats::Message) -> Call {
    let at = Utc::now();
    let header = |name: &str| {
        request
            .headers
            .as_ref()
            .and_then(|h| h.get(name))
            .map(|v| v.as_str().to_string())
            .unwrap_or_default()
    };
    Call {
        job: request
            .subject
            .as_str()
            .trim_start_matches("svc.chaos.")
            .to_string(),
        run_id: header("Jetcron-Run-Id"),
        scheduled_at: DateTime::parse_from_rfc3339(&header("Jetcron-Scheduled-At"))
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default(),
        attempt: header("Jetcron-Attempt").parse().unwrap_or(0),
        at,
        failed: false,
    }
}

async fn answer(
    client: &async_nats::Client,
    reply: async_nats::Subject,
    failed: bool,
) -> Result<(), async_nats::PublishError> {
    if !failed {
        return client.publish(reply, "ok".into()).await;
    }
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Service-Error-Code", "500");
    headers.insert("Nats-Service-Error", "flaky: planned failure");
    client
        .publish_with_headers(reply, headers, "failed".into())
        .await
}
