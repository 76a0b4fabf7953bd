//! Alert channels: where jetcron sends alerts, defined once and named by
//! jobs. They live in the `jetcron_channels` bucket (key = name), written
//! through `jetcron.api.channels.*` or `/v1/channels`.
//!
//! Six kinds, each in its vendor's terms: `email` (SMTP), `webhook` (a JSON
//! POST, optionally signed), `slack`, `feishu`, `dingtalk` and `wecom` (their
//! bot webhooks; Feishu and DingTalk with their signing secrets). A
//! definition is decoded with the first structural problem named by its path
//! and then checked field by field, every problem at once, like a job.
//! Passwords, secrets, header values and the tokens inside bot webhook URLs
//! are credentials: [`Channel::redacted`] hides them for open reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::job::{validate_http_headers, validate_http_url, validate_token, FieldError};

/// Largest channel definition, in bytes.
pub const MAX_CHANNEL_BYTES: usize = 16 * 1024;
/// Most recipients of one mail (to and cc together).
pub const MAX_RECIPIENTS: usize = 50;
/// Shortest signing secret accepted for a `webhook` channel.
pub const MIN_SECRET_LEN: usize = 16;
/// What replaces a hidden value (the one constant, beside the job
/// definition's: [`crate::job::JobSpec::redacted`]).
pub use crate::job::REDACTED;

/// How an SMTP connection is secured.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SmtpTls {
    /// Plain connection upgraded with STARTTLS (port 587 by default); refused
    /// if the server does not offer it.
    #[default]
    Starttls,
    /// TLS from the first byte (port 465 by default).
    Implicit,
    /// No TLS (port 25 by default): only for a relay on a trusted network.
    None,
}

impl SmtpTls {
    pub fn default_port(self) -> u16 {
        match self {
            SmtpTls::Starttls => 587,
            SmtpTls::Implicit => 465,
            SmtpTls::None => 25,
        }
    }
}

/// Mail through an SMTP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmailChannel {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// SMTP server host name or address.
    pub smtp_host: String,
    /// Default: 587 with STARTTLS, 465 with implicit TLS, 25 without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smtp_port: Option<u16>,
    #[serde(default)]
    pub tls: SmtpTls,
    /// Sign in with these (both or neither).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// Sender address, `jetcron@example.com` or `jetcron <jetcron@example.com>`.
    pub from: String,
    pub to: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cc: Vec<String>,
}

/// A JSON POST of the alert to any URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookChannel {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub url: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Sign each body with HMAC-SHA256 (Standard Webhooks headers
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// A bot webhook URL, with the bot's signing secret where the vendor has one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BotChannel {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The bot's webhook URL, token included.
    pub url: String,
    /// The signing secret (Feishu "signature verification", DingTalk "加签").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// A bot webhook URL of a vendor without signing (Slack, WeCom).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UrlChannel {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The incoming webhook URL, token included.
    pub url: String,
}

/// A channel definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Channel {
    Email(EmailChannel),
    Webhook(WebhookChannel),
    Slack(UrlChannel),
    Feishu(BotChannel),
    Dingtalk(BotChannel),
    Wecom(UrlChannel),
}

/// The kinds, as `type` names them.
pub const KINDS: [&str; 6] = ["email", "webhook", "slack", "feishu", "dingtalk", "wecom"];

impl Channel {
    pub fn name(&self) -> &str {
        match self {
            Channel::Email(c) => &c.name,
            Channel::Webhook(c) => &c.name,
            Channel::Slack(c) | Channel::Wecom(c) => &c.name,
            Channel::Feishu(c) | Channel::Dingtalk(c) => &c.name,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Channel::Email(_) => "email",
            Channel::Webhook(_) => "webhook",
            Channel::Slack(_) => "slack",
            Channel::Feishu(_) => "feishu",
            Channel::Dingtalk(_) => "dingtalk",
            Channel::Wecom(_) => "wecom",
        }
    }

    /// This channel with its credentials hidden: passwords, secrets, header
    /// values, and the path and query of bot webhook URLs (their token).
    pub fn redacted(&self) -> Channel {
        let hide = |s: &Option<String>| s.as_ref().map(|_| REDACTED.to_string());
        match self.clone() {
            Channel::Email(mut c) => {
                c.password = hide(&c.password);
                Channel::Email(c)
            }
            Channel::Webhook(mut c) => {
                c.secret = hide(&c.secret);
                c.headers.values_mut().for_each(|v| *v = REDACTED.into());
                Channel::Webhook(c)
            }
            Channel::Slack(mut c) => {
                c.url = url_without_token(&c.url);
                Channel::Slack(c)
            }
            Channel::Wecom(mut c) => {
                c.url = url_without_token(&c.url);
                Channel::Wecom(c)
            }
            Channel::Feishu(mut c) => {
                c.url = url_without_token(&c.url);
                c.secret = hide(&c.secret);
                Channel::Feishu(c)
            }
            Channel::Dingtalk(mut c) => {
                c.url = url_without_token(&c.url);
                c.secret = hide(&c.secret);
                Channel::Dingtalk(c)
            }
        }
    }
}

/// Put the stored credentials back where `incoming` (a channel definition
/// as JSON) carries the placeholders of a redacted read, so that a read,
/// edited and written back, keeps its secrets: `password`, `secret`, `url`
/// (`https://host/<redacted>`) and header values. A placeholder with
/// nothing stored to stand for (a new channel, another type, a field the
/// stored one lacks) is refused by name: it would become the secret.
pub fn restore_redacted(
    incoming: &mut serde_json::Value,
    stored: Option<&serde_json::Value>,
) -> Result<(), Vec<FieldError>> {
    use serde_json::Value;
    let is_placeholder = |v: &Value| {
        v.as_str()
            .is_some_and(|s| s == REDACTED || s.ends_with(&format!("/{REDACTED}")))
    };
    let same_type = stored.is_some_and(|s| s.get("type") == incoming.get("type"));
    let stored = stored.filter(|_| same_type);
    let mut problems = Vec::new();
    let Some(fields) = incoming.as_object_mut() else {
        return Ok(());
    };
    for key in ["password", "secret", "url"] {
        if let Some(value) = fields.get_mut(key).filter(|v| is_placeholder(v)) {
            match stored.and_then(|s| s.get(key)).filter(|v| v.is_string()) {
                Some(original) => *value = original.clone(),
                None => problems.push(placeholder_problem(key)),
            }
        }
    }
    if let Some(Value::Object(headers)) = fields.get_mut("headers") {
        for (name, value) in headers.iter_mut().filter(|(_, v)| is_placeholder(v)) {
            match stored
                .and_then(|s| s.get("headers"))
                .and_then(|h| h.get(name))
                .filter(|v| v.is_string())
            {
                Some(original) => *value = original.clone(),
                None => problems.push(placeholder_problem(&format!("headers.{name}"))),
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

fn placeholder_problem(field: &str) -> FieldError {
    FieldError::new(
        field,
        "redacted_placeholder",
        format!("{REDACTED:?} stands for a stored secret, and this channel has none here to keep: give the value"),
    )
}

/// `https://host/<redacted>`: the scheme and host of a URL whose path or
/// query carries a token.
fn url_without_token(text: &str) -> String {
    match url::Url::parse(text) {
        Ok(u) => format!(
            "{}://{}/{REDACTED}",
            u.scheme(),
            u.host_str().unwrap_or_default()
        ),
        Err(_) => REDACTED.to_string(),
    }
}

/// A definition from bytes, as written under `key` (the name may then be
/// left out, and must otherwise equal the key), checked field by field.
pub fn parse_channel(bytes: &[u8], key: Option<&str>) -> Result<Channel, Vec<FieldError>> {
    if bytes.len() > MAX_CHANNEL_BYTES {
        return Err(vec![FieldError::new(
            "",
            "too_large",
            format!(
                "definition is {} bytes, the limit is {MAX_CHANNEL_BYTES}",
                bytes.len()
            ),
        )]);
    }
    let mut value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        vec![FieldError::new(
            "",
            "invalid_json",
            format!("not JSON: {e}"),
        )]
    })?;
    let Some(object) = value.as_object_mut() else {
        return Err(vec![FieldError::new(
            "",
            "invalid_json",
            "a channel is a JSON object",
        )]);
    };
    match object.get("type").and_then(|t| t.as_str()) {
        Some(kind) if KINDS.contains(&kind) => {}
        Some(kind) => {
            return Err(vec![FieldError::new(
                "type",
                "invalid_value",
                format!("{kind:?} is not a channel type; use {}", KINDS.join(", ")),
            )])
        }
        None => {
            return Err(vec![FieldError::new(
                "type",
                "required",
                format!("every channel has a type: {}", KINDS.join(", ")),
            )])
        }
    }
    if let Some(key) = key {
        match object.get("name") {
            None => {
                object.insert("name".into(), key.into());
            }
            Some(name) if name.as_str() == Some(key) => {}
            Some(_) => {
                return Err(vec![FieldError::new(
                    "name",
                    "name_mismatch",
                    format!("must be the key it is stored under, {key:?}"),
                )])
            }
        }
    }
    let channel: Channel = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        vec![FieldError::new(
            if path == "." { String::new() } else { path },
            "invalid_json",
            e.inner().to_string(),
        )]
    })?;
    let problems = validate(&channel);
    if problems.is_empty() {
        Ok(channel)
    } else {
        Err(problems)
    }
}

fn check_text(field: &str, text: &str, max: usize, problems: &mut Vec<FieldError>) {
    if text.len() > max || text.chars().any(char::is_control) {
        problems.push(FieldError::new(
            field,
            "invalid_text",
            format!("must be at most {max} bytes without control characters"),
        ));
    }
}

fn check_secret(field: &str, secret: &Option<String>, min: usize, problems: &mut Vec<FieldError>) {
    if let Some(secret) = secret {
        if secret.len() < min || secret.len() > 512 || secret.chars().any(char::is_control) {
            problems.push(FieldError::new(
                field,
                "invalid_secret",
                format!("must be {min} to 512 bytes without control characters"),
            ));
        }
    }
}

/// `addr@domain` or `Display Name <addr@domain>`.
fn check_address(field: &str, text: &str, problems: &mut Vec<FieldError>) {
    let address = match (text.rfind('<'), text.strip_suffix('>')) {
        (Some(open), Some(inner)) => &inner[open + 1..],
        _ => text,
    };
    let ok = address.split_once('@').is_some_and(|(local, domain)| {
        !local.is_empty()
            && !domain.is_empty()
            && (domain.contains('.') || domain == "localhost")
            && !domain.starts_with('.')
            && !domain.ends_with('.')
    }) && !address
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "<>,;\"".contains(c))
        && text.len() <= 320;
    if !ok {
        problems.push(FieldError::new(
            field,
            "invalid_address",
            format!(
                "{text:?} is not a mail address like ops@example.com or \"Ops <ops@example.com>\""
            ),
        ));
    }
}

fn check_host(field: &str, host: &str, problems: &mut Vec<FieldError>) {
    let ok = !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    if !ok {
        problems.push(FieldError::new(
            field,
            "invalid_host",
            format!("{host:?} is not a host name or address"),
        ));
    }
}

/// Every problem of a decoded channel.
pub fn validate(channel: &Channel) -> Vec<FieldError> {
    let mut problems = Vec::new();
    if let Err(p) = validate_token("name", channel.name()) {
        problems.push(p);
    }
    let description = match channel {
        Channel::Email(c) => &c.description,
        Channel::Webhook(c) => &c.description,
        Channel::Slack(c) | Channel::Wecom(c) => &c.description,
        Channel::Feishu(c) | Channel::Dingtalk(c) => &c.description,
    };
    if let Some(d) = description {
        check_text("description", d, 1024, &mut problems);
    }
    match channel {
        Channel::Email(c) => {
            check_host("smtp_host", &c.smtp_host, &mut problems);
            if c.smtp_port == Some(0) {
                problems.push(FieldError::new(
                    "smtp_port",
                    "out_of_range",
                    "must be 1 to 65535",
                ));
            }
            match (&c.username, &c.password) {
                (Some(_), None) => problems.push(FieldError::new(
                    "password",
                    "required",
                    "a username needs a password",
                )),
                (None, Some(_)) => problems.push(FieldError::new(
                    "username",
                    "required",
                    "a password needs a username",
                )),
                _ => {}
            }
            if let Some(user) = &c.username {
                check_text("username", user, 256, &mut problems);
            }
            check_secret("password", &c.password, 1, &mut problems);
            if c.tls == SmtpTls::None && c.password.is_some() {
                problems.push(FieldError::new(
                    "tls",
                    "insecure",
                    "a password is never sent without TLS: use starttls or implicit",
                ));
            }
            check_address("from", &c.from, &mut problems);
            if c.to.is_empty() {
                problems.push(FieldError::new("to", "required", "at least one recipient"));
            }
            if c.to.len() + c.cc.len() > MAX_RECIPIENTS {
                problems.push(FieldError::new(
                    "to",
                    "too_many",
                    format!("at most {MAX_RECIPIENTS} recipients in to and cc together"),
                ));
            }
            for (i, to) in c.to.iter().enumerate() {
                check_address(&format!("to.{i}"), to, &mut problems);
            }
            for (i, cc) in c.cc.iter().enumerate() {
                check_address(&format!("cc.{i}"), cc, &mut problems);
            }
        }
        Channel::Webhook(c) => {
            validate_http_url("url", &c.url, &mut problems);
            validate_http_headers("headers", &c.headers, &mut problems);
            check_secret("secret", &c.secret, MIN_SECRET_LEN, &mut problems);
        }
        Channel::Slack(c) | Channel::Wecom(c) => validate_http_url("url", &c.url, &mut problems),
        Channel::Feishu(c) | Channel::Dingtalk(c) => {
            validate_http_url("url", &c.url, &mut problems);
            check_secret("secret", &c.secret, 1, &mut problems);
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(json: &str) -> Vec<(String, String)> {
        match parse_channel(json.as_bytes(), None) {
            Ok(c) => panic!("accepted {c:?}"),
            Err(p) => p.into_iter().map(|p| (p.field, p.code)).collect(),
        }
    }

    #[test]
    fn each_kind_parses_and_round_trips() {
        for json in [
            r#"{"type":"email","name":"ops-mail","smtp_host":"smtp.example.com","username":"u","password":"p","from":"jetcron <jetcron@example.com>","to":["ops@example.com"],"cc":["lead@example.com"]}"#,
            r#"{"type":"webhook","name":"hook","url":"https://example.com/alerts","headers":{"X-Team":"ops"},"secret":"0123456789abcdef0123"}"#,
            r#"{"type":"slack","name":"slack-ops","url":"https://hooks.slack.com/services/T000/B000/XXXX"}"#,
            r#"{"type":"feishu","name":"feishu-ops","url":"https://open.feishu.cn/open-apis/bot/v2/hook/abc","secret":"s3cret"}"#,
            r#"{"type":"dingtalk","name":"ding","url":"https://oapi.dingtalk.com/robot/send?access_token=abc","secret":"SEC123"}"#,
            r#"{"type":"wecom","name":"wecom-ops","url":"https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=abc"}"#,
        ] {
            let channel =
                parse_channel(json.as_bytes(), None).unwrap_or_else(|p| panic!("{json}: {p:?}"));
            let again = serde_json::to_vec(&channel).expect("encode");
            assert_eq!(parse_channel(&again, Some(channel.name())), Ok(channel));
        }
    }

    #[test]
    fn every_problem_names_its_field() {
        assert_eq!(
            problems(r#"{"name":"x"}"#),
            [("type".into(), "required".into())]
        );
        assert_eq!(
            problems(r#"{"type":"pager","name":"x"}"#),
            [("type".into(), "invalid_value".into())]
        );
        assert_eq!(
            problems(r#"{"type":"slack","name":"x","url":"https://a.example/","extra":1}"#)[0].1,
            "invalid_json"
        );
        assert_eq!(problems("[1]"), [(String::new(), "invalid_json".into())]);
        let mail = problems(
            r#"{"type":"email","name":"bad name","smtp_host":"smtp example","tls":"none","username":"u","password":"p","from":"nobody","to":[],"cc":["a@b.example","not an address"]}"#,
        );
        let fields: Vec<&str> = mail.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            ["name", "smtp_host", "tls", "from", "to", "cc.1"],
            "{mail:?}"
        );
        let hook = problems(
            r#"{"type":"webhook","name":"h","url":"ftp://example.com/","headers":{"Bad Header":"x"},"secret":"short"}"#,
        );
        let fields: Vec<&str> = hook.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(fields, ["url", "headers.Bad Header", "secret"], "{hook:?}");
        let named = parse_channel(
            br#"{"type":"wecom","name":"a","url":"https://x.example/"}"#,
            Some("b"),
        );
        assert_eq!(named.expect_err("mismatch")[0].code, "name_mismatch");
    }

    #[test]
    fn credentials_are_hidden_on_open_reads() {
        let channel = parse_channel(
            br#"{"type":"dingtalk","name":"ding","url":"https://oapi.dingtalk.com/robot/send?access_token=abc","secret":"SEC123"}"#,
            None,
        )
        .expect("valid");
        let shown = serde_json::to_string(&channel.redacted()).expect("encode");
        assert!(
            !shown.contains("abc") && !shown.contains("SEC123"),
            "{shown}"
        );
        assert!(
            shown.contains("https://oapi.dingtalk.com/<redacted>"),
            "{shown}"
        );
        let mail = parse_channel(
            br#"{"type":"email","name":"m","smtp_host":"smtp.example.com","username":"u","password":"hunter2","from":"a@example.com","to":["b@example.com"]}"#,
            None,
        )
        .expect("valid");
        let shown = serde_json::to_string(&mail.redacted()).expect("encode");
        assert!(
            !shown.contains("hunter2") && shown.contains("\"username\":\"u\""),
            "{shown}"
        );
    }
}
