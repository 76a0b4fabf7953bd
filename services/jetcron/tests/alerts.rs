//! Alerts end to end, against real servers: a job that fails three times
//! sends one mail (to a real SMTP server, aiosmtpd) and one message to each
//! chat channel (signed webhook, Feishu, DingTalk, WeCom, Slack); when it
//! succeeds again, one "resolved" of each. The local HTTP server stands in
//! for the receivers and checks each vendor's body shape and signature the
//! way the vendor would.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use jetcron_core::alert::{dingtalk_sign, feishu_sign, standard_webhooks_signature};
use jetcron_testkit::{wait_until, SmtpServer, Stack, StackOptions};
use serde_json::{json, Value};

const WEBHOOK_SECRET: &str = "0123456789abcdef-shared";
const FEISHU_SECRET: &str = "feishu-bot-secret";
const DINGTALK_SECRET: &str = "SECdingtalk-bot-secret";

/// What the stand-in receivers got: (path, body) of every request whose
/// signature checked out; a bad signature fails the test.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<(String, Value)>>>);

impl Received {
    fn of(&self, path: &str) -> Vec<Value> {
        self.0
            .lock()
            .expect("lock")
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, b)| b.clone())
            .collect()
    }
}

async fn webhook(
    State(received): State<Received>,
    headers: HeaderMap,
    body: Bytes,
) -> &'static str {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let timestamp: i64 = header("webhook-timestamp")
        .parse()
        .expect("webhook-timestamp");
    let expected =
        standard_webhooks_signature(WEBHOOK_SECRET, &header("webhook-id"), timestamp, &body);
    assert_eq!(header("webhook-signature"), expected, "webhook signature");
    assert!((chrono::Utc::now().timestamp() - timestamp).abs() < 300);
    let value: Value = serde_json::from_slice(&body).expect("JSON body");
    received
        .0
        .lock()
        .expect("lock")
        .push(("/hook".into(), value));
    "ok"
}

async fn feishu(State(received): State<Received>, body: Bytes) -> axum::Json<Value> {
    let value: Value = serde_json::from_slice(&body).expect("JSON body");
    let timestamp: i64 = value["timestamp"]
        .as_str()
        .expect("timestamp string")
        .parse()
        .expect("seconds");
    assert_eq!(
        value["sign"],
        feishu_sign(FEISHU_SECRET, timestamp),
        "feishu sign"
    );
    assert_eq!(value["msg_type"], "text");
    received
        .0
        .lock()
        .expect("lock")
        .push(("/feishu".into(), value));
    axum::Json(json!({"code": 0, "msg": "success", "data": {}}))
}

/// DingTalk signs in the query: `timestamp` (ms) and `sign`.
async fn dingtalk(
    State(received): State<Received>,
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
    body: Bytes,
) -> axum::Json<Value> {
    let timestamp: i64 = query["timestamp"].parse().expect("timestamp ms");
    assert_eq!(
        query["sign"],
        dingtalk_sign(DINGTALK_SECRET, timestamp),
        "dingtalk sign"
    );
    assert_eq!(query["access_token"], "bot-token");
    let value: Value = serde_json::from_slice(&body).expect("JSON body");
    assert_eq!(value["msgtype"], "text");
    assert!(value["text"]["content"].is_string());
    received
        .0
        .lock()
        .expect("lock")
        .push(("/dingtalk".into(), value));
    axum::Json(json!({"errcode": 0, "errmsg": "ok"}))
}

/// WeCom: a `text` message of at most 2,048 bytes.
async fn wecom(State(received): State<Received>, body: Bytes) -> axum::Json<Value> {
    let value: Value = serde_json::from_slice(&body).expect("JSON body");
    assert_eq!(value["msgtype"], "text");
    let content = value["text"]["content"].as_str().expect("content");
    assert!(content.len() <= 2048, "{} bytes", content.len());
    received
        .0
        .lock()
        .expect("lock")
        .push(("/wecom".into(), value));
    axum::Json(json!({"errcode": 0, "errmsg": "ok"}))
}

/// Slack: `{"text": …}`, answered with a plain `ok`.
async fn slack(State(received): State<Received>, body: Bytes) -> &'static str {
    let value: Value = serde_json::from_slice(&body).expect("JSON body");
    assert!(value["text"].is_string(), "{value}");
    received
        .0
        .lock()
        .expect("lock")
        .push(("/slack".into(), value));
    "ok"
}

#[tokio::test]
async fn three_failures_alert_once_per_channel_and_recovery_once() {
    let smtp = SmtpServer::start();
    let received = Received::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let receiver = format!("http://{}", listener.local_addr().expect("addr"));
    let app = axum::Router::new()
        .route("/hook", post(webhook))
        .route("/feishu", post(feishu))
        .route("/dingtalk", post(dingtalk))
        .route("/wecom", post(wecom))
        .route("/slack", post(slack))
        .with_state(received.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let stack = Stack::start(StackOptions::with_shell()).await;
    for channel in [
        json!({"type":"email","name":"ops-mail","smtp_host":"127.0.0.1","smtp_port":smtp.port(),"tls":"none","from":"jetcron <jetcron@example.com>","to":["ops@example.com"],"cc":["lead@example.com"]}),
        json!({"type":"webhook","name":"ops-hook","url":format!("{receiver}/hook"),"secret":WEBHOOK_SECRET}),
        json!({"type":"feishu","name":"ops-feishu","url":format!("{receiver}/feishu"),"secret":FEISHU_SECRET}),
        json!({"type":"dingtalk","name":"ops-ding","url":format!("{receiver}/dingtalk?access_token=bot-token"),"secret":DINGTALK_SECRET}),
        json!({"type":"wecom","name":"ops-wecom","url":format!("{receiver}/wecom?key=k")}),
        json!({"type":"slack","name":"ops-slack","url":format!("{receiver}/slack")}),
    ] {
        let (reply, code) = stack
            .api("jetcron.api.channels.put", &channel.to_string())
            .await;
        assert_eq!(code, None, "{reply}");
    }
    let job = |command: &str| {
        json!({
            "id": "nightly-export",
            "schedule": "0 3 * * *",
            "target": {"type": "shell", "command": command},
            "notify": {"channels": ["ops-mail", "ops-hook", "ops-feishu", "ops-ding", "ops-wecom", "ops-slack"], "repeat": "1h"},
        })
        .to_string()
    };
    stack
        .put_job(&job(
            "echo 'connecting'; echo 'sftp: permission denied' >&2; exit 4",
        ))
        .await;

    // Three failed runs: one alert per channel.
    let mut failed = Vec::new();
    for _ in 0..3 {
        let run_id = stack.trigger("nightly-export").await;
        stack
            .wait_for_run_status(&run_id, "failed", Duration::from_secs(30))
            .await;
        failed.push(run_id);
    }
    let mails = wait_until("one alert mail", Duration::from_secs(30), || async {
        let mails = smtp.messages();
        (!mails.is_empty()).then_some(mails)
    })
    .await;
    wait_until(
        "one alert per HTTP channel",
        Duration::from_secs(30),
        || async {
            ["/hook", "/feishu", "/dingtalk", "/wecom", "/slack"]
                .iter()
                .all(|path| received.of(path).len() == 1)
                .then_some(())
        },
    )
    .await;
    // Give the later failures time to (wrongly) alert too.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mails = if mails.len() == 1 {
        smtp.messages()
    } else {
        mails
    };
    assert_eq!(mails.len(), 1, "one mail for three failures: {mails:#?}");
    assert_eq!(received.of("/hook").len(), 1);
    for path in ["/feishu", "/dingtalk", "/wecom", "/slack"] {
        assert_eq!(received.of(path).len(), 1, "{path}");
    }

    let mail = &mails[0];
    let subject = mail.header("Subject").expect("subject");
    assert!(
        subject.starts_with("[jetcron] nightly-export: run failed"),
        "{subject}"
    );
    assert!(mail.header("To").expect("to").contains("ops@example.com"));
    assert!(mail.header("Cc").expect("cc").contains("lead@example.com"));
    let body = mail.body();
    for fact in [
        "job: nightly-export".to_string(),
        "schedule: 0 3 * * *".into(),
        format!("run: {}", failed[0]),
        "attempt: 3 of 3".into(),
        "error: exit status 4".into(),
        "sftp: permission denied".into(),
        format!("/ui/runs/{}", failed[0]),
    ] {
        assert!(body.contains(&fact), "mail lacks {fact:?}:\n{body}");
    }
    let hook = &received.of("/hook")[0];
    assert_eq!(hook["alert"]["state"], "firing");
    assert_eq!(hook["alert"]["run_id"], failed[0].as_str());
    assert!(received.of("/feishu")[0]["content"]["text"]
        .as_str()
        .expect("text")
        .contains("nightly-export"));

    // It succeeds again: one resolved alert each.
    stack.put_job(&job("echo fine")).await;
    let ok = stack.trigger("nightly-export").await;
    stack
        .wait_for_run_status(&ok, "succeeded", Duration::from_secs(30))
        .await;
    let mails = wait_until("the recovery mail", Duration::from_secs(30), || async {
        let mails = smtp.messages();
        (mails.len() >= 2).then_some(mails)
    })
    .await;
    wait_until(
        "one resolved per HTTP channel",
        Duration::from_secs(30),
        || async {
            ["/hook", "/feishu", "/dingtalk", "/wecom", "/slack"]
                .iter()
                .all(|path| received.of(path).len() == 2)
                .then_some(())
        },
    )
    .await;
    let resolved = mails[1].header("Subject").expect("subject");
    assert!(
        resolved.starts_with("[jetcron] resolved: nightly-export"),
        "{resolved}"
    );
    assert!(
        mails[1]
            .body()
            .contains("after 3 runs in a row that ended badly"),
        "{}",
        mails[1].body()
    );
    assert_eq!(received.of("/hook")[1]["alert"]["state"], "resolved");

    // A second success says nothing more.
    let again = stack.trigger("nightly-export").await;
    stack
        .wait_for_run_status(&again, "succeeded", Duration::from_secs(30))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(smtp.messages().len(), 2);
    assert_eq!(received.of("/hook").len(), 2);

    // `after_failures: 2`: one bad run says nothing, the second in a row alerts.
    stack
        .put_job(
            &json!({
                "id": "flaky",
                "schedule": "@every 1h",
                "retry": {"max_attempts": 1},
                "target": {"type": "shell", "command": "exit 1"},
                "notify": {"channels": ["ops-hook"], "after_failures": 2},
            })
            .to_string(),
        )
        .await;
    let flaky_alerts = || {
        received
            .of("/hook")
            .into_iter()
            .filter(|b| b["alert"]["job_id"] == "flaky")
            .count()
    };
    let first = stack.trigger("flaky").await;
    stack
        .wait_for_run_status(&first, "failed", Duration::from_secs(30))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(flaky_alerts(), 0, "one bad run is below after_failures");
    let second = stack.trigger("flaky").await;
    stack
        .wait_for_run_status(&second, "failed", Duration::from_secs(30))
        .await;
    wait_until(
        "the alert after two bad runs",
        Duration::from_secs(30),
        || async { (flaky_alerts() == 1).then_some(()) },
    )
    .await;
    let alert = received
        .of("/hook")
        .into_iter()
        .find(|b| b["alert"]["job_id"] == "flaky")
        .expect("flaky alert");
    let summary = alert["alert"]["summary"].as_str().expect("summary");
    assert!(summary.contains("2 runs in a row"), "{alert}");

    // `running_longer_than`: one alert while it runs, one when it ends.
    stack
        .put_job(
            &json!({
                "id": "slow-report",
                "schedule": "@every 1h",
                "target": {"type": "shell", "command": "sleep 4"},
                "notify": {"channels": ["ops-hook"], "running_longer_than": "1s"},
            })
            .to_string(),
        )
        .await;
    let slow = |state: &str| {
        received
            .of("/hook")
            .into_iter()
            .filter(|b| b["alert"]["job_id"] == "slow-report" && b["alert"]["state"] == state)
            .collect::<Vec<_>>()
    };
    let long = stack.trigger("slow-report").await;
    let running = wait_until(
        "the long-running alert",
        Duration::from_secs(20),
        || async { slow("firing").pop() },
    )
    .await;
    assert_eq!(running["alert"]["rule"], "long_running", "{running}");
    assert!(
        running["alert"]["summary"]
            .as_str()
            .expect("summary")
            .contains("still running after 1s"),
        "{running}"
    );
    assert!(slow("resolved").is_empty(), "not over yet");
    stack
        .wait_for_run_status(&long, "succeeded", Duration::from_secs(30))
        .await;
    wait_until(
        "the end of the long run",
        Duration::from_secs(20),
        || async { slow("resolved").pop() },
    )
    .await;
    assert_eq!(slow("firing").len(), 1);
    stack.stop().await;
}

#[tokio::test]
async fn fires_nobody_starts_alert_once_as_missed() {
    let received = Received::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let receiver = format!("http://{}", listener.local_addr().expect("addr"));
    let app = axum::Router::new()
        .route("/hook", post(webhook))
        .with_state(received.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let stack = Stack::start(StackOptions {
        limits: jetcron_gateway::limits::Limits {
            missed_grace: chrono::Duration::seconds(2),
            missed_scan_interval: Duration::from_millis(500),
            ..Default::default()
        },
        ..StackOptions::default()
    })
    .await;
    let channel = json!({"type":"webhook","name":"ops-hook","url":format!("{receiver}/hook"),"secret":WEBHOOK_SECRET});
    let (reply, code) = stack
        .api("jetcron.api.channels.put", &channel.to_string())
        .await;
    assert_eq!(code, None, "{reply}");
    // A pool no executor serves: every fire is missed.
    stack
        .put_job(
            &json!({
                "id": "orphaned",
                "schedule": "* * * * * *",
                "pool": "nobody-serves-this",
                "target": {"type": "nats", "subject": "svc.orphaned"},
                "notify": {"channels": ["ops-hook"]},
            })
            .to_string(),
        )
        .await;
    let first = wait_until("the missed-fire alert", Duration::from_secs(40), || async {
        received.of("/hook").pop()
    })
    .await;
    assert_eq!(first["alert"]["rule"], "missed", "{first}");
    assert_eq!(first["alert"]["job_id"], "orphaned");
    assert!(
        first["alert"]["summary"]
            .as_str()
            .expect("summary")
            .contains("was never started"),
        "{first}"
    );
    // More fires are missed every second: counted, not alerted again.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(received.of("/hook").len(), 1, "{:?}", received.of("/hook"));
    stack.stop().await;
}

/// A CA and a certificate for `localhost` signed by it, as PEM files in
/// `dir`: (ca, cert, key).
fn smtp_certificates(dir: &std::path::Path) -> [std::path::PathBuf; 3] {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "jetcron mail test CA");
    let ca_key = KeyPair::generate().expect("CA key");
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("key");
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("certificate");
    [
        ("ca.pem", ca_cert.pem()),
        ("smtp.pem", cert.pem()),
        ("smtp-key.pem", key.serialize_pem()),
    ]
    .map(|(name, pem)| {
        let path = dir.join(name);
        std::fs::write(&path, pem).expect("write PEM");
        path
    })
}

/// An `email` channel `name` to the local SMTP server on `port`.
fn mail_channel(name: &str, port: u16, tls: &str) -> Value {
    json!({"type":"email","name":name,"smtp_host":"localhost","smtp_port":port,"tls":tls,"from":"jetcron@example.com","to":["ops@example.com"]})
}

/// Put `channel`, and job `id` that fails at once and alerts it; run it
/// once; the run's id.
async fn fail_once_alerting(stack: &Stack, id: &str, channel: &Value) -> String {
    let (reply, code) = stack
        .api("jetcron.api.channels.put", &channel.to_string())
        .await;
    assert_eq!(code, None, "{reply}");
    stack
        .put_job(
            &json!({
                "id": id,
                "schedule": "@every 1h",
                "retry": {"max_attempts": 1},
                "target": {"type": "shell", "command": "exit 2"},
                "notify": {"channels": [channel["name"]]},
            })
            .to_string(),
        )
        .await;
    let run = stack.trigger(id).await;
    stack
        .wait_for_run_status(&run, "failed", Duration::from_secs(30))
        .await;
    run
}

#[tokio::test]
async fn mail_goes_over_starttls_to_a_server_that_requires_it() {
    let dir = tempfile::tempdir().expect("dir");
    let [ca, cert, key] = smtp_certificates(dir.path());
    let smtp = SmtpServer::start_starttls(&cert, &key);
    let stack = Stack::start(StackOptions {
        smtp_ca_file: Some(ca),
        ..StackOptions::with_shell()
    })
    .await;
    // The server refuses MAIL before STARTTLS: a stored message came over TLS.
    fail_once_alerting(
        &stack,
        "tls-checked",
        &mail_channel("tls-mail", smtp.port(), "starttls"),
    )
    .await;
    let mails = wait_until("the mail over TLS", Duration::from_secs(30), || async {
        let mails = smtp.messages();
        (!mails.is_empty()).then_some(mails)
    })
    .await;
    assert_eq!(mails.len(), 1);
    let subject = mails[0].header("Subject").expect("subject");
    assert!(subject.contains("tls-checked: run failed"), "{subject}");

    // The same server refuses a client that does not start TLS: the check
    // above means something.
    let run = fail_once_alerting(
        &stack,
        "plain-checked",
        &mail_channel("plain-mail", smtp.port(), "none"),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(smtp.messages().len(), 1, "plain text was accepted");

    // Given up after its tries (5, from 1 s doubling): recorded beside the
    // run it was about, and counted by /v1/stats.
    let run = wait_until(
        "the failed delivery recorded",
        Duration::from_secs(60),
        || async {
            let run = stack.run(&run).await?;
            let failed = run["events"]
                .as_array()?
                .iter()
                .any(|e| e["kind"] == "notify_failed");
            failed.then_some(run)
        },
    )
    .await;
    let error = run["events"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["kind"] == "notify_failed")
        .and_then(|e| e["error"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains(r#"to channel "plain-mail" not delivered after 5 tries"#),
        "{error}"
    );
    assert_eq!(run["status"], "failed", "the run's state is unchanged");
    let (status, stats) = stack.get("/v1/stats?job=plain-checked").await;
    assert_eq!(status, 200, "{stats}");
    assert_eq!(stats["jobs"][0]["notifications_failed"], 1, "{stats}");
    stack.stop().await;
}

#[tokio::test]
async fn mail_signs_in_with_the_channels_user_and_password() {
    let dir = tempfile::tempdir().expect("dir");
    let [ca, cert, key] = smtp_certificates(dir.path());
    // The server takes mail only over STARTTLS and after AUTH as alerts/s3cret.
    let smtp = SmtpServer::start_with_auth(&cert, &key, "alerts", "s3cret");
    let stack = Stack::start(StackOptions {
        smtp_ca_file: Some(ca),
        ..StackOptions::with_shell()
    })
    .await;
    let with_login = |name: &str, password: &str| {
        let mut channel = mail_channel(name, smtp.port(), "starttls");
        channel["username"] = "alerts".into();
        channel["password"] = password.into();
        channel
    };
    fail_once_alerting(&stack, "signed-in", &with_login("auth-mail", "s3cret")).await;
    let mails = wait_until("the mail after AUTH", Duration::from_secs(30), || async {
        let mails = smtp.messages();
        (!mails.is_empty()).then_some(mails)
    })
    .await;
    assert_eq!(mails.len(), 1);
    let subject = mails[0].header("Subject").expect("subject");
    assert!(subject.contains("signed-in: run failed"), "{subject}");
    // The password is kept, and not shown.
    let (reply, _) = stack
        .api("jetcron.api.channels.get", r#"{"name":"auth-mail"}"#)
        .await;
    assert!(!reply.to_string().contains("s3cret"), "{reply}");

    // A wrong password, and none at all, are refused: the check means something.
    fail_once_alerting(&stack, "wrong-password", &with_login("bad-auth", "guess")).await;
    fail_once_alerting(
        &stack,
        "no-login",
        &mail_channel("no-auth", smtp.port(), "starttls"),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(smtp.messages().len(), 1, "mail taken without a valid login");
    stack.stop().await;
}
