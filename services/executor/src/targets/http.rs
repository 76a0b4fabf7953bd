//! `http` targets: one request; success is a 2xx status. The response body is
//! read only up to the output limit. `202 Accepted` means the service took the
//! work and will report the result (to `jetcron.runs.<run_id>.complete`, or by
//! `POST /v1/runs/<run_id>/complete` on the gateway).

use jetcron_core::job::HttpTarget;

use super::{cap_output, Outcome, RunContext};

pub async fn run(
    http: &reqwest::Client,
    target: &HttpTarget,
    ctx: &RunContext,
    output_limit: usize,
) -> Outcome {
    let method = target.method.as_deref().unwrap_or("GET");
    let method = match reqwest::Method::from_bytes(method.as_bytes()) {
        Ok(m) => m,
        Err(_) => return Outcome::failed(format!("invalid HTTP method {method:?}")),
    };
    let mut request = http.request(method, &target.url);
    for (name, value) in &target.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    for (name, value) in ctx.pairs() {
        request = request.header(name, value);
    }
    if let Some(body) = &target.body {
        request = request.body(body.clone());
    }
    let mut response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            return Outcome::failed(format!(
                "request to {} failed: {}",
                target.url,
                error_chain(&e)
            ))
        }
    };
    let status = response.status();
    let mut body = Vec::new();
    let mut truncated_while_reading = false;
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                body.extend_from_slice(&chunk);
                if body.len() > output_limit {
                    truncated_while_reading = true;
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                return Outcome {
                    success: false,
                    status_code: Some(i32::from(status.as_u16())),
                    error: Some(format!("reading response body failed: {}", error_chain(&e))),
                    ..Outcome::default()
                }
            }
        }
    }
    let (output, cut) = cap_output(&body, output_limit);
    Outcome {
        success: status.is_success(),
        accepted: status == reqwest::StatusCode::ACCEPTED,
        status_code: Some(i32::from(status.as_u16())),
        output: Some(output),
        output_truncated: cut || truncated_while_reading,
        error: (!status.is_success()).then(|| format!("HTTP status {status}")),
        ..Outcome::default()
    }
}

/// `e` and its causes, outermost first, as one line.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
