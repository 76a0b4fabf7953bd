//! An alert, and what each kind of channel receives for it.
//!
//! [`Alert`] is what every channel says, in one shape: which rule fired (or
//! that the job recovered), the job, the run, its schedule and attempt, the
//! error, the last lines of output and a link to the run. [`delivery`]
//! turns it into the request a webhook-like channel expects — the vendor's
//! body and, where the channel has a secret, the vendor's signature — and
//! [`delivered`] reads the vendor's answer (Feishu, DingTalk and WeCom say
//! "refused" in a 200's body). [`Alert::subject`] and [`Alert::text`] are
//! the mail. All pure: the notifier does the I/O.
//!
//! The formats and signing rules, with their sources, are in
//! `docs/notes/webhook-formats.md`; the tests check the signatures against
//! the vectors collected there.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::channel::{BotChannel, Channel, EmailChannel, UrlChannel, WebhookChannel};
use crate::events::RunEvent;
use crate::job::NotifyPolicy;

/// Lines of output an alert carries at most.
pub const OUTPUT_LINES: usize = 20;
/// Bytes of output an alert carries at most (vendors cap message sizes:
/// WeCom 2,048 bytes of text, Feishu 20 KB of body).
pub const OUTPUT_BYTES: usize = 1_500;

/// What waits in `JETCRON_NOTIFY` for the notifier: a run that ended (or
/// an attempt that runs long, or a fire that was missed) with the job's
/// notification policy. Executors store them; the gateway's missed-fire
/// scan stores those of missed fires.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Notification {
    pub notify: NotifyPolicy,
    /// The event that ended the run (its output cut to the last lines); for
    /// `long_running`, the attempt's start; for `missed`, the fire.
    pub run: RunEvent,
    /// The job's schedule line, for alerts.
    #[serde(default)]
    pub schedule: String,
    /// `long_running` or `missed`; none for the end of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// For `long_running`: the attempt has ended since.
    #[serde(default)]
    pub over: bool,
}

impl Notification {
    /// The notification of a missed fire of `job` (its scheduled time, and
    /// when the miss was seen).
    pub fn missed_fire(
        job: &crate::job::ValidJob,
        scheduled_at: DateTime<Utc>,
        seen_at: DateTime<Utc>,
    ) -> Option<Self> {
        let notify = job.spec.notify.clone().filter(|n| !n.channels.is_empty())?;
        let run_id = crate::events::RunId::for_fire(&job.spec.id, scheduled_at);
        let kind = crate::events::RunEventKind::Failed;
        let run = RunEvent {
            max_attempts: job.max_attempts,
            target_type: job.spec.target.kind().to_string(),
            pool: job.pool.clone(),
            error: Some("missed: the fire was never started".into()),
            ..RunEvent::step(run_id, job.spec.id.clone(), kind, 0, scheduled_at, seen_at)
        };
        Some(Self {
            notify,
            run,
            schedule: job.spec.schedule_line().to_string(),
            rule: Some("missed".into()),
            over: false,
        })
    }

    /// Its `Nats-Msg-Id`: one notification per run end, per long attempt
    /// and its end, per missed fire.
    pub fn message_id(&self) -> String {
        match self.rule.as_deref() {
            None => format!("{}:notify", self.run.run_id),
            Some(rule) => format!(
                "{}:{}:{rule}:{}",
                self.run.run_id,
                self.run.attempt,
                if self.over { "over" } else { "open" }
            ),
        }
    }
}

/// Whether an alert opens (or repeats) an incident or closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AlertState {
    Firing,
    Resolved,
}

/// One alert about one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Alert {
    pub state: AlertState,
    /// The rule: `failed`, `consecutive_failures`, `missed`, `long_running`.
    pub rule: String,
    /// One line saying what happened.
    pub summary: String,
    pub job_id: String,
    pub schedule: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last lines of the run's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
    /// The run (or job) in the console.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    #[schemars(with = "String")]
    pub at: DateTime<Utc>,
}

/// The last [`OUTPUT_LINES`] lines of `output`, at most [`OUTPUT_BYTES`]
/// bytes (cut on a character boundary).
pub fn output_tail(output: &str) -> String {
    let lines: Vec<&str> = output.trim_end().lines().collect();
    let tail = lines[lines.len().saturating_sub(OUTPUT_LINES)..].join("\n");
    if tail.len() <= OUTPUT_BYTES {
        return tail;
    }
    let mut start = tail.len() - OUTPUT_BYTES;
    while !tail.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &tail[start..])
}

impl Alert {
    /// The mail subject and chat title.
    pub fn subject(&self) -> String {
        match self.state {
            AlertState::Firing => format!("[jetcron] {}: {}", self.job_id, self.summary),
            AlertState::Resolved => {
                format!("[jetcron] resolved: {}: {}", self.job_id, self.summary)
            }
        }
    }

    /// The message as plain text: the summary, then one fact per line, then
    /// the output.
    pub fn text(&self) -> String {
        let mut lines = vec![self.summary.clone(), String::new()];
        lines.push(format!("job: {}", self.job_id));
        lines.push(format!("schedule: {}", self.schedule));
        lines.push(format!("rule: {}", self.rule));
        if let Some(run_id) = &self.run_id {
            lines.push(format!("run: {run_id}"));
        }
        if let Some(status) = &self.status {
            lines.push(format!("status: {status}"));
        }
        if let (Some(attempt), Some(max)) = (self.attempt, self.max_attempts) {
            lines.push(format!("attempt: {attempt} of {max}"));
        }
        if let Some(error) = &self.error {
            lines.push(format!("error: {error}"));
        }
        lines.push(format!("at: {}", self.at.format("%Y-%m-%d %H:%M:%S UTC")));
        if let Some(link) = &self.link {
            lines.push(format!("link: {link}"));
        }
        if let Some(output) = self.output_tail.as_deref().filter(|o| !o.is_empty()) {
            lines.push(String::new());
            lines.push("output (last lines):".into());
            lines.push(output.to_string());
        }
        lines.join("\n")
    }
}

/// An HTTP request to send.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpDelivery {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

fn base64(bytes: &[u8]) -> String {
    data_encoding::BASE64.encode(bytes)
}

/// Feishu's `sign`: HMAC-SHA256 with key `"{timestamp}\n{secret}"` over an
/// empty message, Base64 (timestamp in seconds).
pub fn feishu_sign(secret: &str, timestamp_secs: i64) -> String {
    base64(&hmac_sha256(
        format!("{timestamp_secs}\n{secret}").as_bytes(),
        b"",
    ))
}

/// DingTalk's `sign` before URL-encoding: HMAC-SHA256 with key `secret`
/// over `"{timestamp}\n{secret}"`, Base64 (timestamp in milliseconds).
pub fn dingtalk_sign(secret: &str, timestamp_ms: i64) -> String {
    base64(&hmac_sha256(
        secret.as_bytes(),
        format!("{timestamp_ms}\n{secret}").as_bytes(),
    ))
}

/// The Standard Webhooks `webhook-signature` value: `v1,` and the Base64
/// HMAC-SHA256 of `"{id}.{timestamp}.{body}"`. A `whsec_` secret is
/// Base64-decoded into the key, as the spec's libraries do; any other
/// secret is used as its UTF-8 bytes.
pub fn standard_webhooks_signature(
    secret: &str,
    id: &str,
    timestamp_secs: i64,
    body: &[u8],
) -> String {
    let key = secret
        .strip_prefix("whsec_")
        .and_then(|b64| data_encoding::BASE64.decode(b64.as_bytes()).ok())
        .unwrap_or_else(|| secret.as_bytes().to_vec());
    let mut signed = format!("{id}.{timestamp_secs}.").into_bytes();
    signed.extend_from_slice(body);
    format!("v1,{}", base64(&hmac_sha256(&key, &signed)))
}

const JSON: (&str, &str) = ("Content-Type", "application/json; charset=utf-8");

fn json_body(value: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// How an alert leaves for a channel: an HTTP request (webhooks and chat
/// bots), or a mail through the channel's SMTP server.
#[derive(Debug)]
pub enum Delivery<'a> {
    Http(HttpDelivery),
    Mail(&'a EmailChannel),
    /// The channel cannot be sent to as stored (say, a URL that does not
    /// parse): why.
    Unsendable(String),
}

/// How `channel` gets `alert`, sent at `now`; `message_id` names the
/// delivery (the same on every retry, so a receiver can drop duplicates).
pub fn delivery<'a>(
    channel: &'a Channel,
    alert: &Alert,
    now: DateTime<Utc>,
    message_id: &str,
) -> Delivery<'a> {
    let text = format!("{}\n\n{}", alert.subject(), alert.text());
    Delivery::Http(match channel {
        Channel::Email(email) => return Delivery::Mail(email),
        Channel::Webhook(WebhookChannel {
            url,
            headers,
            secret,
            ..
        }) => {
            let body = json_body(&serde_json::json!({
                "type": "jetcron.alert",
                "id": message_id,
                "alert": alert,
            }));
            let mut all: Vec<(String, String)> = vec![(JSON.0.into(), JSON.1.into())];
            all.extend(headers.iter().map(|(k, v)| (k.clone(), v.clone())));
            if let Some(secret) = secret {
                let timestamp = now.timestamp();
                all.push(("webhook-id".into(), message_id.into()));
                all.push(("webhook-timestamp".into(), timestamp.to_string()));
                all.push((
                    "webhook-signature".into(),
                    standard_webhooks_signature(secret, message_id, timestamp, &body),
                ));
            }
            HttpDelivery {
                url: url.clone(),
                headers: all,
                body,
            }
        }
        Channel::Slack(UrlChannel { url, .. }) => HttpDelivery {
            url: url.clone(),
            headers: vec![(JSON.0.into(), JSON.1.into())],
            body: json_body(&serde_json::json!({ "text": text })),
        },
        Channel::Wecom(UrlChannel { url, .. }) => {
            // WeCom caps text content at 2,048 bytes.
            let mut content = text;
            if content.len() > 2_000 {
                let mut end = 2_000;
                while !content.is_char_boundary(end) {
                    end -= 1;
                }
                content.truncate(end);
                content.push('…');
            }
            HttpDelivery {
                url: url.clone(),
                headers: vec![(JSON.0.into(), JSON.1.into())],
                body: json_body(
                    &serde_json::json!({"msgtype": "text", "text": {"content": content}}),
                ),
            }
        }
        Channel::Feishu(BotChannel { url, secret, .. }) => {
            let mut body = serde_json::json!({"msg_type": "text", "content": {"text": text}});
            if let Some(secret) = secret {
                let timestamp = now.timestamp();
                body["timestamp"] = timestamp.to_string().into();
                body["sign"] = feishu_sign(secret, timestamp).into();
            }
            HttpDelivery {
                url: url.clone(),
                headers: vec![(JSON.0.into(), JSON.1.into())],
                body: json_body(&body),
            }
        }
        Channel::Dingtalk(BotChannel { url, secret, .. }) => {
            let url = match secret {
                Some(secret) => {
                    let timestamp = now.timestamp_millis();
                    let mut signed = match url::Url::parse(url) {
                        Ok(signed) => signed,
                        Err(e) => return Delivery::Unsendable(format!("url {url:?}: {e}")),
                    };
                    signed
                        .query_pairs_mut()
                        .append_pair("timestamp", &timestamp.to_string())
                        .append_pair("sign", &dingtalk_sign(secret, timestamp));
                    signed.to_string()
                }
                None => url.clone(),
            };
            HttpDelivery {
                url,
                headers: vec![(JSON.0.into(), JSON.1.into())],
                body: json_body(&serde_json::json!({"msgtype": "text", "text": {"content": text}})),
            }
        }
    })
}

/// Whether the channel took the delivery, from the HTTP status and body:
/// 2xx for every kind, and a zero business code where the vendor answers
/// 200 with an error inside (Feishu `code`, DingTalk and WeCom `errcode`).
/// The error says what the receiver said.
pub fn delivered(channel: &Channel, status: u16, body: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(body);
    let short: String = text.chars().take(300).collect();
    if !(200..300).contains(&status) {
        return Err(format!("HTTP {status}: {short}"));
    }
    let code_field = match channel {
        Channel::Feishu(_) => Some(["code", "StatusCode"]),
        Channel::Dingtalk(_) | Channel::Wecom(_) => Some(["errcode", "errcode"]),
        _ => None,
    };
    let Some(fields) = code_field else {
        return Ok(());
    };
    let json: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| format!("HTTP {status}, not JSON: {short}"))?;
    let code = fields
        .iter()
        .find_map(|f| json.get(*f).and_then(|c| c.as_i64()));
    match code {
        Some(0) => Ok(()),
        Some(code) => Err(format!("refused with code {code}: {short}")),
        None => Err(format!("no result code in the answer: {short}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The HTTP request of a channel that gets one.
    fn http_delivery(
        channel: &Channel,
        alert: &Alert,
        now: DateTime<Utc>,
        message_id: &str,
    ) -> Option<HttpDelivery> {
        match delivery(channel, alert, now, message_id) {
            Delivery::Http(request) => Some(request),
            Delivery::Mail(_) | Delivery::Unsendable(_) => None,
        }
    }
    use crate::channel::parse_channel;

    fn alert() -> Alert {
        Alert {
            state: AlertState::Firing,
            rule: "failed".into(),
            summary: "run failed after 3 attempts".into(),
            job_id: "billing-export".into(),
            schedule: "0 3 * * *".into(),
            run_id: Some("4513d39f-b3c3-5619-b1bf-a3306d0b51bf".into()),
            status: Some("failed".into()),
            attempt: Some(3),
            max_attempts: Some(3),
            error: Some("exit status 4".into()),
            output_tail: Some("sftp: permission denied".into()),
            link: Some("http://127.0.0.1:8080/ui/runs/4513d39f-b3c3-5619-b1bf-a3306d0b51bf".into()),
            at: DateTime::from_timestamp(1_799_000_000, 0).expect("time"),
        }
    }

    #[test]
    fn signatures_match_the_vendors_vectors() {
        // docs/notes/webhook-formats.md, section 6.
        assert_eq!(
            feishu_sign("demo", 1_599_360_473),
            "l1N0gAcBjdwBvGm1xMjOF0XSyaLRpR7tuO5dHfhAYc8="
        );
        assert_eq!(
            feishu_sign("dGhpcyBpcyBhIGtleQ==", 1_716_283_459),
            "8EyY+xxfJvzWjZQpdc2mgvQFaG7lF5nbxl7RITyMkJU="
        );
        assert_ne!(
            feishu_sign("demo", 1_599_360_473),
            "DkEDUyVoOOJ539qBvUgMyzkzIdRWlf4e/V3Rq+ONJnQ="
        );
        assert_eq!(
            dingtalk_sign("this is secret", 1_577_262_236_757),
            "hmPWwU+7lVdm3ZZz0r9tSfx0L4Q26jWOZr9+Gs6EZQM="
        );
        assert_eq!(
            dingtalk_sign("SEC0123456789abcdef", 1_700_000_000_000),
            "TSZbRFUuvaSQaRKUpF970OPCb2/LcQAP3wOvwZIzBZk="
        );
        assert_eq!(
            standard_webhooks_signature(
                "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
                "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
                1_649_367_553,
                br#"{"email":"test@example.com","username":"test_user"}"#,
            ),
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
        );
    }

    #[test]
    fn each_vendor_gets_its_body_and_signature_in_its_place() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).expect("time");
        let channel = |json: &str| parse_channel(json.as_bytes(), None).expect("valid channel");
        let body =
            |d: &HttpDelivery| serde_json::from_slice::<serde_json::Value>(&d.body).expect("json");

        let ding = http_delivery(
            &channel(r#"{"type":"dingtalk","name":"d","url":"https://oapi.dingtalk.com/robot/send?access_token=abc","secret":"SEC0123456789abcdef"}"#),
            &alert(), now, "m1",
        ).expect("http");
        assert_eq!(
            ding.url,
            "https://oapi.dingtalk.com/robot/send?access_token=abc&timestamp=1700000000000&sign=TSZbRFUuvaSQaRKUpF970OPCb2%2FLcQAP3wOvwZIzBZk%3D"
        );
        assert_eq!(body(&ding)["msgtype"], "text");
        assert!(body(&ding)["text"]["content"]
            .as_str()
            .expect("text")
            .contains("exit status 4"));

        let feishu = http_delivery(
            &channel(r#"{"type":"feishu","name":"f","url":"https://open.feishu.cn/open-apis/bot/v2/hook/t","secret":"demo"}"#),
            &alert(), now, "m1",
        ).expect("http");
        let b = body(&feishu);
        assert_eq!(
            (b["msg_type"].as_str(), b["timestamp"].as_str()),
            (Some("text"), Some("1700000000"))
        );
        assert_eq!(b["sign"], feishu_sign("demo", 1_700_000_000));
        assert!(b["content"]["text"]
            .as_str()
            .expect("text")
            .contains("billing-export"));

        let slack = http_delivery(
            &channel(r#"{"type":"slack","name":"s","url":"https://hooks.slack.com/services/a"}"#),
            &alert(),
            now,
            "m1",
        )
        .expect("http");
        assert!(body(&slack)["text"]
            .as_str()
            .expect("text")
            .starts_with("[jetcron] billing-export: run failed"));

        let wecom = http_delivery(&channel(r#"{"type":"wecom","name":"w","url":"https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k"}"#), &alert(), now, "m1").expect("http");
        assert_eq!(body(&wecom)["msgtype"], "text");

        let hook = http_delivery(
            &channel(r#"{"type":"webhook","name":"h","url":"https://example.com/a","headers":{"X-Team":"ops"},"secret":"0123456789abcdef-secret"}"#),
            &alert(), now, "m1",
        ).expect("http");
        let header = |name: &str| {
            hook.headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(header("webhook-id").as_deref(), Some("m1"));
        assert_eq!(header("X-Team").as_deref(), Some("ops"));
        assert_eq!(
            header("webhook-signature"),
            Some(standard_webhooks_signature(
                "0123456789abcdef-secret",
                "m1",
                1_700_000_000,
                &hook.body
            ))
        );
        assert_eq!(
            body(&hook)["alert"]["run_id"],
            "4513d39f-b3c3-5619-b1bf-a3306d0b51bf"
        );
        assert!(http_delivery(
            &channel(r#"{"type":"email","name":"e","smtp_host":"h.example","from":"a@b.example","to":["c@d.example"]}"#),
            &alert(), now, "m1"
        ).is_none());
    }

    #[test]
    fn answers_are_read_the_vendors_way() {
        let feishu = parse_channel(
            br#"{"type":"feishu","name":"f","url":"https://x.example/"}"#,
            None,
        )
        .expect("valid");
        assert_eq!(
            delivered(&feishu, 200, br#"{"code":0,"msg":"success","data":{}}"#),
            Ok(())
        );
        assert_eq!(
            delivered(
                &feishu,
                200,
                br#"{"StatusCode":0,"StatusMessage":"success"}"#
            ),
            Ok(())
        );
        assert!(
            delivered(&feishu, 200, br#"{"code":19021,"msg":"sign match fail"}"#)
                .expect_err("refused")
                .contains("19021")
        );
        let ding = parse_channel(
            br#"{"type":"dingtalk","name":"d","url":"https://x.example/"}"#,
            None,
        )
        .expect("valid");
        assert!(delivered(
            &ding,
            200,
            br#"{"errcode":310000,"errmsg":"sign not match"}"#
        )
        .is_err());
        assert_eq!(
            delivered(&ding, 200, br#"{"errcode":0,"errmsg":"ok"}"#),
            Ok(())
        );
        let slack = parse_channel(
            br#"{"type":"slack","name":"s","url":"https://x.example/"}"#,
            None,
        )
        .expect("valid");
        assert_eq!(delivered(&slack, 200, b"ok"), Ok(()));
        assert!(delivered(&slack, 404, b"channel_not_found")
            .expect_err("refused")
            .contains("channel_not_found"));
    }

    #[test]
    fn output_keeps_the_last_lines_within_the_byte_limit() {
        let output: String = (1..=50).map(|i| format!("line {i}\n")).collect();
        let tail = output_tail(&output);
        assert!(
            tail.starts_with("line 31\n") && tail.ends_with("line 50"),
            "{tail}"
        );
        let long = "é".repeat(2_000);
        let tail = output_tail(&long);
        assert!(tail.len() <= OUTPUT_BYTES + 3 && tail.starts_with('…'));
        let text = alert().text();
        assert!(
            text.contains("attempt: 3 of 3")
                && text.contains("output (last lines):\nsftp: permission denied"),
            "{text}"
        );
    }
}
