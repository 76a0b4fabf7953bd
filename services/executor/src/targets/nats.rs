//! `nats` targets: a request to a subject; success is a reply without a
//! `Nats-Service-Error-Code` header (the NATS micro-services error convention).
//! A reply with the header `Jetcron-Status: accepted` means the service took
//! the work and will publish the result to `jetcron.runs.<run_id>.complete`.

use async_nats::service::{NATS_SERVICE_ERROR, NATS_SERVICE_ERROR_CODE};
use async_nats::{HeaderMap, RequestErrorKind};
use jetcron_core::job::NatsTarget;

use super::{cap_output, Outcome, RunContext};

/// Reply header of a service that completes asynchronously (value `accepted`).
pub const ACCEPTED_HEADER: &str = "Jetcron-Status";

pub async fn run(
    client: &async_nats::Client,
    target: &NatsTarget,
    ctx: &RunContext,
    output_limit: usize,
) -> Outcome {
    let (headers, payload) = prepare(target, ctx);
    // No client-side timeout: the executor bounds the whole attempt.
    let request = async_nats::Request::new()
        .payload(payload)
        .headers(headers)
        .timeout(None);
    let reply = client.send_request(target.subject.clone(), request).await;
    outcome(reply, target, output_limit)
}

/// The request of one call: its headers (the target's, then the run's) and
/// payload (the target's, or the run as JSON).
pub fn prepare(target: &NatsTarget, ctx: &RunContext) -> (HeaderMap, bytes::Bytes) {
    let payload = match &target.payload {
        None => ctx.to_json().to_string(),
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(value) => value.to_string(),
    };
    let mut headers = HeaderMap::new();
    for (name, value) in &target.headers {
        headers.insert(name.as_str(), value.as_str());
    }
    for (name, value) in ctx.pairs() {
        headers.insert(name, value.as_str());
    }
    (headers, payload.into())
}

/// What a call's reply (or its failure) says about the attempt.
pub fn outcome(
    reply: Result<async_nats::Message, async_nats::RequestError>,
    target: &NatsTarget,
    output_limit: usize,
) -> Outcome {
    let reply = match reply {
        Ok(reply) => reply,
        Err(e) => {
            let reason = match e.kind() {
                RequestErrorKind::NoResponders => {
                    format!("no responders on subject {:?}", target.subject)
                }
                RequestErrorKind::TimedOut => "request timed out".to_string(),
                _ => format!("request failed: {e}"),
            };
            return Outcome::failed(reason);
        }
    };
    let (output, output_truncated) = cap_output(&reply.payload, output_limit);
    let service_error = reply.headers.as_ref().and_then(|h| {
        let code = h.get(NATS_SERVICE_ERROR_CODE)?.as_str().to_string();
        let text = h
            .get(NATS_SERVICE_ERROR)
            .map(|v| v.as_str().to_string())
            .unwrap_or_default();
        Some(format!("service error {code}: {text}"))
    });
    let accepted = service_error.is_none()
        && reply
            .headers
            .as_ref()
            .and_then(|h| h.get(ACCEPTED_HEADER))
            .is_some_and(|v| v.as_str().eq_ignore_ascii_case("accepted"));
    Outcome {
        success: service_error.is_none(),
        accepted,
        output: Some(output),
        output_truncated,
        error: service_error,
        ..Outcome::default()
    }
}
