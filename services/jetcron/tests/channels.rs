//! Alert channels managed the way users do: `nats req jetcron.api.channels.*`,
//! curl on `/v1/channels`, and a raw `nats kv put` into `jetcron_channels`.
//! Every kind is stored and read back; a bad definition names its field and
//! stores nothing; open reads hide credentials; compare-and-swap holds.

use jetcron_testkit::reqwest::Method;
use jetcron_testkit::{Stack, StackOptions, API_TOKEN};
use serde_json::{json, Value};

const MAIL: &str = r#"{"type":"email","name":"ops-mail","smtp_host":"smtp.example.com","username":"jetcron","password":"hunter2-secret","from":"jetcron <jetcron@example.com>","to":["ops@example.com"]}"#;

#[tokio::test]
async fn channels_are_put_read_listed_and_deleted_over_nats_and_http() {
    let stack = Stack::start(StackOptions::api_only()).await;

    // Every kind over NATS.
    let kinds = [
        MAIL.to_string(),
        json!({"type":"webhook","name":"hook","url":"https://example.com/alerts","headers":{"Authorization":"Bearer abc-token"},"secret":"0123456789abcdef-secret"}).to_string(),
        json!({"type":"slack","name":"slack-ops","url":"https://hooks.slack.com/services/T0/B0/slacktoken"}).to_string(),
        json!({"type":"feishu","name":"feishu-ops","url":"https://open.feishu.cn/open-apis/bot/v2/hook/feishutoken","secret":"feishu-secret"}).to_string(),
        json!({"type":"dingtalk","name":"ding-ops","url":"https://oapi.dingtalk.com/robot/send?access_token=dingtoken","secret":"SECdingsecret"}).to_string(),
        json!({"type":"wecom","name":"wecom-ops","url":"https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=wecomkey"}).to_string(),
    ];
    for body in &kinds {
        let (reply, code) = stack.api("jetcron.api.channels.put", body).await;
        assert_eq!(code, None, "{reply}");
        assert_eq!(reply["ok"], true);
        assert_eq!(reply["created"], true);
    }
    let (reply, code) = stack
        .api("jetcron.api.channels.get", r#"{"name":"ops-mail"}"#)
        .await;
    assert_eq!(code, None, "{reply}");
    assert_eq!(
        reply["channel"]["channel"]["password"], "<redacted>",
        "reads never show credentials"
    );
    // What a read gives, edited and put back, keeps the stored secret.
    let mut edited = reply["channel"]["channel"].clone();
    edited["to"] = json!(["ops@example.com", "oncall@example.com"]);
    let (reply, code) = stack
        .api("jetcron.api.channels.put", &edited.to_string())
        .await;
    assert_eq!(code, None, "{reply}");
    assert_eq!(reply["channel"]["password"], "<redacted>", "{reply}");
    let raw = stack
        .js
        .get_key_value("jetcron_channels")
        .await
        .expect("bucket")
        .get("ops-mail")
        .await
        .expect("get")
        .expect("stored");
    let raw: serde_json::Value = serde_json::from_slice(&raw).expect("json");
    assert_eq!(raw["password"], "hunter2-secret", "{raw}");
    assert_eq!(raw["to"][1], "oncall@example.com", "{raw}");
    // The same for a bot URL's token and a webhook's header and secret.
    for name in ["slack-ops", "hook"] {
        let (read, _) = stack
            .api(
                "jetcron.api.channels.get",
                &json!({ "name": name }).to_string(),
            )
            .await;
        let (reply, code) = stack
            .api(
                "jetcron.api.channels.put",
                &read["channel"]["channel"].to_string(),
            )
            .await;
        assert_eq!(code, None, "{reply}");
    }
    let (_, listed) = stack.get("/v1/channels").await;
    assert!(listed
        .to_string()
        .contains("https://hooks.slack.com/<redacted>"));
    let bucket = stack
        .js
        .get_key_value("jetcron_channels")
        .await
        .expect("bucket");
    let slack = bucket.get("slack-ops").await.expect("get").expect("slack");
    assert!(String::from_utf8_lossy(&slack).contains("slacktoken"));
    let hook = bucket.get("hook").await.expect("get").expect("hook");
    let hook = String::from_utf8_lossy(&hook).to_string();
    assert!(
        hook.contains("abc-token") && hook.contains("0123456789abcdef-secret"),
        "{hook}"
    );
    // A placeholder with nothing behind it is refused by name.
    let (reply, code) = stack
        .api(
            "jetcron.api.channels.put",
            &json!({"type":"email","name":"new-mail","smtp_host":"smtp.example.com","username":"u","password":"<redacted>","from":"jetcron@example.com","to":["ops@example.com"]}).to_string(),
        )
        .await;
    assert_eq!(code.as_deref(), Some("400"), "{reply}");
    assert_eq!(reply["error"]["field"], "password", "{reply}");
    assert_eq!(
        reply["error"]["problems"][0]["code"], "redacted_placeholder",
        "{reply}"
    );
    let (reply, _) = stack.api("jetcron.api.channels.list", "").await;
    let names: Vec<&str> = reply["channels"]
        .as_array()
        .expect("channels")
        .iter()
        .map(|c| c["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "ding-ops",
            "feishu-ops",
            "hook",
            "ops-mail",
            "slack-ops",
            "wecom-ops"
        ]
    );

    // Open HTTP reads hide every credential.
    let (status, listed) = stack.get("/v1/channels").await;
    assert_eq!(status, 200);
    let text = listed.to_string();
    for secret in [
        "hunter2-secret",
        "abc-token",
        "0123456789abcdef-secret",
        "slacktoken",
        "feishutoken",
        "feishu-secret",
        "dingtoken",
        "SECdingsecret",
        "wecomkey",
    ] {
        assert!(!text.contains(secret), "{secret} shown: {text}");
    }
    assert!(
        text.contains("https://hooks.slack.com/<redacted>"),
        "{text}"
    );
    // The console's channel page hides them too (no session, open reads).
    let page = stack
        .http
        .get(format!("{}/ui/channels", stack.http_base))
        .send()
        .await
        .expect("console")
        .text()
        .await
        .expect("page");
    assert!(
        page.contains("ops-mail") && page.contains("ding-ops"),
        "{page}"
    );
    for secret in [
        "hunter2-secret",
        "slacktoken",
        "dingtoken",
        "wecomkey",
        "feishutoken",
    ] {
        assert!(
            !page.contains(secret),
            "{secret} shown on the console: {page}"
        );
    }
    let (status, one) = stack.get("/v1/channels/ops-mail").await;
    assert_eq!(status, 200);
    assert_eq!(one["channel"]["channel"]["username"], "jetcron");
    assert_eq!(one["channel"]["channel"]["password"], "<redacted>");

    // A bad definition names its field and stores nothing, at both doors.
    let bad = r#"{"type":"email","name":"bad-mail","smtp_host":"smtp.example.com","from":"not an address","to":["ops@example.com"]}"#;
    let (reply, code) = stack.api("jetcron.api.channels.put", bad).await;
    assert_eq!(code.as_deref(), Some("400"), "{reply}");
    assert_eq!(reply["error"]["field"], "from", "{reply}");
    let (status, reply) = stack
        .send(Method::POST, "/v1/channels", bad, Some(API_TOKEN))
        .await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(
        reply["error"]["problems"][0]["code"], "invalid_address",
        "{reply}"
    );
    let (status, _) = stack.get("/v1/channels/bad-mail").await;
    assert_eq!(status, 404);
    let (reply, _) = stack
        .api("jetcron.api.channels.put", r#"{"type":"pager","name":"p"}"#)
        .await;
    assert_eq!(reply["error"]["field"], "type", "{reply}");

    // Writes over HTTP need the token; compare-and-swap on the revision.
    let slack = r#"{"type":"slack","url":"https://hooks.slack.com/services/T0/B0/newtoken"}"#;
    let (status, _) = stack
        .send(Method::PUT, "/v1/channels/slack-ops", slack, None)
        .await;
    assert_eq!(status, 401);
    let stale = stack
        .http
        .put(format!("{}/v1/channels/slack-ops", stack.http_base))
        .bearer_auth(API_TOKEN)
        .header("If-Match", "1")
        .body(slack)
        .send()
        .await
        .expect("put");
    assert_eq!(stale.status().as_u16(), 409);
    let (status, reply) = stack
        .send(
            Method::PUT,
            "/v1/channels/slack-ops",
            slack,
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["created"], false);
    let (status, reply) = stack
        .send(
            Method::PUT,
            "/v1/channels/slack-ops",
            r#"{"type":"slack","name":"other","url":"https://x.example/"}"#,
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["field"], "name");

    // A value written straight into the bucket is listed with its problems.
    let bucket = stack
        .js
        .get_key_value("jetcron_channels")
        .await
        .expect("bucket");
    bucket
        .put("raw-one", r#"{"type":"wecom","url":"ftp://nope"}"#.into())
        .await
        .expect("kv put");
    let (reply, _) = stack
        .api("jetcron.api.channels.get", r#"{"name":"raw-one"}"#)
        .await;
    assert_eq!(reply["channel"]["valid"], false, "{reply}");
    assert_eq!(reply["channel"]["problems"][0]["field"], "url", "{reply}");

    // A delete names its revision once: query and If-Match together are refused.
    let both = stack
        .http
        .delete(format!(
            "{}/v1/channels/hook?expected_revision=1",
            stack.http_base
        ))
        .bearer_auth(API_TOKEN)
        .header("If-Match", "1")
        .send()
        .await
        .expect("delete");
    assert_eq!(both.status().as_u16(), 400);

    // Delete: gone from reads, history kept.
    let (status, reply) = stack
        .send(Method::DELETE, "/v1/channels/hook", "", Some(API_TOKEN))
        .await;
    assert_eq!(status, 200, "{reply}");
    let (reply, code) = stack
        .api("jetcron.api.channels.delete", r#"{"name":"hook"}"#)
        .await;
    assert_eq!(code.as_deref(), Some("404"), "{reply}");
    let history: Vec<Value> = {
        use futures::StreamExt as _;
        let mut entries = bucket.history("hook").await.expect("history");
        let mut all = Vec::new();
        while let Some(entry) = entries.next().await {
            all.push(json!({"op": format!("{:?}", entry.expect("entry").operation)}));
        }
        all
    };
    assert_eq!(
        history.len(),
        3,
        "put, the put-back above, delete: {history:?}"
    );
    stack.stop().await;
}
