//! Role bindings, as a namespace's admin hands out roles to people and
//! groups: set, listed with who gave them, changed and removed over HTTP;
//! only an admin of the namespace (of `*` for the bindings of every
//! namespace) manages them, anything else is refused with 403 and nothing
//! changes; bad subjects and roles name their field; the bucket's history
//! keeps every revision with its author.

use jetcron_testkit::reqwest::Method;
use jetcron_testkit::{Stack, StackOptions, API_TOKEN};
use serde_json::{json, Value};

/// The (subject, role, author) of each binding `GET` lists.
fn listed(body: &Value) -> Vec<(String, String, String)> {
    body["bindings"]
        .as_array()
        .expect("bindings")
        .iter()
        .map(|b| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                text(&b["subject"]),
                text(&b["role"]),
                text(&b["author"]["actor"]),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_namespaces_admin_binds_people_and_groups_and_nobody_else_may() {
    let stack = Stack::start(StackOptions {
        executor: false,
        ..StackOptions::default()
    })
    .await;
    let (admin, admin_id) = stack.scoped_token("billing", "admin").await;
    let admin_actor = format!("token:{admin_id}");
    let (editor, _) = stack.scoped_token("billing", "editor").await;
    let alice = "/v1/namespaces/billing/bindings/user:alice@corp.example";
    let devs = "/v1/namespaces/billing/bindings/group:Billing%20Devs";

    let (status, set) = stack
        .send(Method::PUT, alice, r#"{"role":"editor"}"#, Some(&admin))
        .await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(
        set["binding"],
        json!({"namespace": "billing", "subject": "user:alice@corp.example", "role": "editor"})
    );
    let (status, set) = stack
        .send(Method::PUT, devs, r#"{"role":"viewer"}"#, Some(&admin))
        .await;
    assert_eq!(status, 200, "{set}");
    // Changed: the same key, a new revision.
    let (status, set) = stack
        .send(
            Method::PUT,
            alice,
            r#"{"role":"operator"}"#,
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(status, 200, "{set}");
    let (status, list) = stack
        .send(
            Method::GET,
            "/v1/namespaces/billing/bindings",
            "",
            Some(&admin),
        )
        .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(
        listed(&list),
        [
            (
                "group:Billing Devs".into(),
                "viewer".into(),
                admin_actor.clone()
            ),
            (
                "user:alice@corp.example".into(),
                "operator".into(),
                "admin-token".into()
            ),
        ],
        "{list}"
    );

    // Refused, with nothing changed: an editor of billing, billing's admin
    // in another namespace or on `*`.
    let before = listed(&list);
    for (method, path, body, by, namespace) in [
        (
            Method::PUT,
            alice,
            r#"{"role":"admin"}"#,
            &editor,
            "billing",
        ),
        (Method::DELETE, alice, "", &editor, "billing"),
        (
            Method::GET,
            "/v1/namespaces/billing/bindings",
            "",
            &editor,
            "billing",
        ),
        (
            Method::PUT,
            "/v1/namespaces/ops/bindings/user:alice@corp.example",
            r#"{"role":"admin"}"#,
            &admin,
            "ops",
        ),
        (
            Method::PUT,
            "/v1/namespaces/*/bindings/user:alice@corp.example",
            r#"{"role":"admin"}"#,
            &admin,
            "*",
        ),
    ] {
        let (status, body) = stack.send(method.clone(), path, body, Some(by)).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert_eq!(body["error"]["namespace"], namespace, "{body}");
        assert_eq!(body["error"]["needs"], "admin", "{body}");
    }
    let (_, list) = stack
        .send(
            Method::GET,
            "/v1/namespaces/billing/bindings",
            "",
            Some(&admin),
        )
        .await;
    assert_eq!(listed(&list), before, "a refusal changed nothing");

    // Bad input names its field.
    for (path, body, field) in [
        (
            "/v1/namespaces/billing/bindings/robot:x",
            r#"{"role":"viewer"}"#,
            "subject",
        ),
        (alice, r#"{"role":"owner"}"#, "role"),
        (alice, r#"{"role":"viewer","extra":1}"#, "extra"),
        (
            "/v1/namespaces/a.b/bindings/user:x",
            r#"{"role":"viewer"}"#,
            "namespace",
        ),
    ] {
        let (status, body) = stack.send(Method::PUT, path, body, Some(API_TOKEN)).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["field"], field, "{path}: {body}");
    }

    // Bindings of every namespace: an admin of `*` only.
    let everywhere = "/v1/namespaces/*/bindings/group:platform";
    let (status, body) = stack
        .send(
            Method::PUT,
            everywhere,
            r#"{"role":"admin"}"#,
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, all) = stack
        .send(
            Method::GET,
            "/v1/namespaces/*/bindings",
            "",
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(
        listed(&all),
        [(
            "group:platform".into(),
            "admin".into(),
            "admin-token".into()
        )]
    );

    // Removed; the bucket's history keeps every revision with its author.
    let (status, removed) = stack.send(Method::DELETE, alice, "", Some(&admin)).await;
    assert_eq!(
        (status, &removed["removed"]),
        (200, &json!(true)),
        "{removed}"
    );
    let (status, again) = stack.send(Method::DELETE, alice, "", Some(&admin)).await;
    assert_eq!((status, &again["removed"]), (200, &json!(false)), "{again}");
    let (_, list) = stack
        .send(
            Method::GET,
            "/v1/namespaces/billing/bindings",
            "",
            Some(&admin),
        )
        .await;
    assert_eq!(listed(&list).len(), 1, "{list}");
    let bucket = stack
        .js
        .get_key_value(jetcron_core::subjects::BINDINGS_BUCKET)
        .await
        .expect("bindings bucket");
    let subject = jetcron_core::binding::Subject::parse("subject", "user:alice@corp.example")
        .expect("subject");
    let key = jetcron_core::binding::binding_key(
        &jetcron_core::access::Scope::One("billing".into()),
        &subject,
    );
    let mut history = bucket.history(&key).await.expect("history");
    let mut authors = Vec::new();
    while let Some(entry) = futures::StreamExt::next(&mut history).await {
        let entry = entry.expect("entry");
        let message = bucket
            .stream
            .get_raw_message(entry.revision)
            .await
            .expect("message");
        let actor = message
            .headers
            .get(jetcron_core::audit::ACTOR_HEADER)
            .map(|v| v.as_str().to_string())
            .unwrap_or_default();
        authors.push((format!("{:?}", entry.operation), actor));
    }
    assert_eq!(
        authors,
        [
            ("Put".to_string(), admin_actor.clone()),
            ("Put".to_string(), "admin-token".to_string()),
            ("Delete".to_string(), admin_actor),
        ]
    );
    stack.stop().await;
}
