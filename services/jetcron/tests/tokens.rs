//! Scoped API tokens and roles, as an admin hands them out: a token of each
//! role in namespace `billing`, made with `POST /v1/tokens` by the
//! bootstrap token, tried on every job operation over HTTP in `billing`
//! (allowed by role) and in `ops` (always refused with 403 naming the
//! namespace and the role needed), with nothing changed on a refusal: the
//! job's revision stays, no due event is stored. Lists show only the
//! token's namespace; admins see and revoke their namespace's tokens only;
//! a revoked or expired token is refused at once.

use std::time::Duration;

use jetcron_core::access::Role;
use jetcron_testkit::reqwest::Method;
use jetcron_testkit::{Stack, StackOptions, API_TOKEN};
use serde_json::{json, Value};

const FAR: &str = r#""schedule":"0 0 0 1 1 * 2090""#;

fn job(id: &str) -> String {
    format!(r#"{{"id":"{id}",{FAR},"target":{{"type":"nats","subject":"svc.tokens"}}}}"#)
}

/// `POST /v1/tokens` with the bootstrap token: the token's text and id.
async fn make_token(stack: &Stack, by: &str, namespace: &str, role: &str) -> (u16, Value) {
    let body = json!({"namespace": namespace, "role": role, "description": format!("{role} of {namespace}")});
    stack
        .send(Method::POST, "/v1/tokens", &body.to_string(), Some(by))
        .await
}

async fn token(stack: &Stack, namespace: &str, role: &str) -> (String, String) {
    let (status, body) = make_token(stack, API_TOKEN, namespace, role).await;
    assert_eq!(status, 201, "{body}");
    let text = body["token"].as_str().expect("token").to_string();
    assert!(text.starts_with("jct_"), "{text}");
    assert_eq!(body["record"]["namespace"], namespace);
    assert_eq!(body["record"]["role"], role);
    assert_eq!(body["record"]["created_by"], "admin-token");
    assert!(body["record"].get("secret_sha256").is_none(), "{body}");
    (text, body["record"]["id"].as_str().expect("id").to_string())
}

/// The revision of `id` in the jobs bucket (0: none).
async fn revision(stack: &Stack, id: &str) -> u64 {
    match stack.jobs_bucket().await.entry(id).await.expect("entry") {
        Some(entry) if entry.operation == async_nats::jetstream::kv::Operation::Put => {
            entry.revision
        }
        _ => 0,
    }
}

/// The sequence of the last due event stored for `id` (0: none; the stack
/// runs no executor, so they stay).
async fn last_due_event(stack: &Stack, id: &str) -> u64 {
    let stream = stack
        .js
        .get_stream(jetcron_core::subjects::DUE_STREAM)
        .await
        .expect("due stream");
    let subject = jetcron_core::subjects::due_subject("default", id);
    stream
        .get_last_raw_message_by_subject(&subject)
        .await
        .map_or(0, |message| message.sequence)
}

/// What one operation on job `id` needs, and the request for it.
fn operations(id: &str) -> Vec<(Role, Method, String, String)> {
    vec![
        (
            Role::Viewer,
            Method::GET,
            format!("/v1/jobs/{id}"),
            String::new(),
        ),
        (
            Role::Viewer,
            Method::GET,
            format!("/v1/jobs/{id}/history"),
            String::new(),
        ),
        (
            Role::Operator,
            Method::POST,
            format!("/v1/jobs/{id}/pause"),
            String::new(),
        ),
        (
            Role::Operator,
            Method::POST,
            format!("/v1/jobs/{id}/resume"),
            String::new(),
        ),
        (
            Role::Operator,
            Method::POST,
            format!("/v1/jobs/{id}/trigger"),
            String::new(),
        ),
        (Role::Editor, Method::PUT, format!("/v1/jobs/{id}"), job(id)),
        (
            Role::Editor,
            Method::DELETE,
            format!("/v1/jobs/{id}"),
            String::new(),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_role_does_what_it_may_in_its_namespace_and_nothing_elsewhere() {
    let stack = Stack::start(StackOptions {
        executor: false,
        protect_reads: true,
        ..StackOptions::default()
    })
    .await;
    let mut tokens = Vec::new();
    for role in Role::ALL {
        tokens.push((role, token(&stack, "billing", role.as_str()).await));
    }

    for (role, (text, _)) in &tokens {
        for namespace in ["billing", "ops"] {
            let id = format!("{namespace}.job-{role}");
            stack.put_job(&job(&id)).await;
            for (needs, method, path, body) in operations(&id) {
                let before = (
                    revision(&stack, &id).await,
                    last_due_event(&stack, &id).await,
                );
                let (status, reply) = stack.send(method.clone(), &path, &body, Some(text)).await;
                let allowed = namespace == "billing" && *role >= needs;
                let what = format!("{role} {method} {path}: {status} {reply}");
                if allowed {
                    assert!((200..300).contains(&status), "{what}");
                    continue;
                }
                assert_eq!(status, 403, "{what}");
                assert_eq!(reply["ok"], false, "{what}");
                assert_eq!(reply["error"]["code"], "forbidden", "{what}");
                assert_eq!(reply["error"]["namespace"], namespace, "{what}");
                assert_eq!(reply["error"]["needs"], needs.as_str(), "{what}");
                let after = (
                    revision(&stack, &id).await,
                    last_due_event(&stack, &id).await,
                );
                assert_eq!(before, after, "nothing changes on a refusal: {what}");
            }
        }
        // A new job of the namespace: an editor's put, nobody else's.
        let id = format!("billing.new-{role}");
        let (status, reply) = stack
            .send(Method::POST, "/v1/jobs", &job(&id), Some(text))
            .await;
        match *role >= Role::Editor {
            true => assert_eq!(status, 201, "{role}: {reply}"),
            false => {
                assert_eq!(status, 403, "{role}: {reply}");
                assert_eq!(revision(&stack, &id).await, 0);
            }
        }
    }

    // Lists show the token's namespace only, over jobs and runs.
    let (viewer, viewer_id) = &tokens[0].1;
    let (status, list) = stack.send(Method::GET, "/v1/jobs", "", Some(viewer)).await;
    assert_eq!(status, 200, "{list}");
    let ids: Vec<&str> = list["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_str().expect("id"))
        .collect();
    assert!(
        !ids.is_empty() && ids.iter().all(|id| id.starts_with("billing.")),
        "{ids:?}"
    );
    let (status, _) = stack
        .send(Method::GET, "/v1/jobs?namespace=ops", "", Some(viewer))
        .await;
    assert_eq!(status, 403);
    let (status, runs) = stack.send(Method::GET, "/v1/runs", "", Some(viewer)).await;
    assert_eq!(status, 200, "{runs}");
    assert!(runs["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .all(|r| r["job_id"]
            .as_str()
            .is_some_and(|j| j.starts_with("billing."))));
    let (status, _) = stack
        .send(Method::GET, "/v1/runs?namespace=ops", "", Some(viewer))
        .await;
    assert_eq!(status, 403);

    // Tokens: made, listed and revoked by a namespace's admins only.
    let (admin, _) = &tokens[3].1;
    let (editor, _) = &tokens[2].1;
    let (_, ops_viewer_id) = token(&stack, "ops", "viewer").await;
    let (status, reply) = make_token(&stack, admin, "billing", "viewer").await;
    assert_eq!(status, 201, "{reply}");
    assert_eq!(
        reply["record"]["created_by"],
        format!("token:{}", tokens[3].1 .1)
    );
    let (status, reply) = make_token(&stack, admin, "ops", "viewer").await;
    assert_eq!(
        (status, &reply["error"]["needs"]),
        (403, &json!("admin")),
        "{reply}"
    );
    let (status, reply) = make_token(&stack, admin, "*", "viewer").await;
    assert_eq!(
        (status, &reply["error"]["namespace"]),
        (403, &json!("*")),
        "{reply}"
    );
    let (status, reply) = make_token(&stack, editor, "billing", "viewer").await;
    assert_eq!(status, 403, "{reply}");
    for (body, field) in [
        (
            json!({"namespace":"billing","role":"root","description":"x"}),
            "role",
        ),
        (
            json!({"namespace":"a.b","role":"viewer","description":"x"}),
            "namespace",
        ),
        (
            json!({"namespace":"billing","role":"viewer","description":""}),
            "description",
        ),
        (
            json!({"namespace":"billing","role":"viewer","description":"x","expires_in":"soon"}),
            "expires_in",
        ),
    ] {
        let (status, reply) = stack
            .send(
                Method::POST,
                "/v1/tokens",
                &body.to_string(),
                Some(API_TOKEN),
            )
            .await;
        assert_eq!(status, 400, "{body}: {reply}");
        assert_eq!(reply["error"]["field"], field, "{body}: {reply}");
    }
    let (status, listed) = stack.send(Method::GET, "/v1/tokens", "", Some(admin)).await;
    assert_eq!(status, 200, "{listed}");
    let listed = listed["tokens"].as_array().expect("tokens").clone();
    assert!(
        listed.iter().all(|t| t["namespace"] == "billing"),
        "{listed:?}"
    );
    assert!(listed.iter().all(|t| t.get("secret_sha256").is_none()));
    assert_eq!(listed.len(), 5, "{listed:?}");
    let (status, all) = stack
        .send(Method::GET, "/v1/tokens", "", Some(API_TOKEN))
        .await;
    assert_eq!(status, 200);
    assert_eq!(all["tokens"].as_array().expect("tokens").len(), 6, "{all}");
    let (status, _) = stack
        .send(Method::GET, "/v1/tokens", "", Some(editor))
        .await;
    assert_eq!(status, 403);
    let (status, _) = stack
        .send(
            Method::DELETE,
            &format!("/v1/tokens/{ops_viewer_id}"),
            "",
            Some(admin),
        )
        .await;
    assert_eq!(status, 403);
    let (status, reply) = stack
        .send(
            Method::DELETE,
            &format!("/v1/tokens/{viewer_id}"),
            "",
            Some(admin),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    let (status, _) = stack.send(Method::GET, "/v1/jobs", "", Some(viewer)).await;
    assert_eq!(status, 401, "a revoked token is refused at once");
    let wrong = format!("{}0", &viewer[..viewer.len() - 1]);
    let (status, _) = stack.send(Method::GET, "/v1/jobs", "", Some(&wrong)).await;
    assert_eq!(status, 401);

    // A token that expires.
    let body =
        json!({"namespace":"billing","role":"viewer","description":"short","expires_in":"2s"});
    let (status, made) = stack
        .send(
            Method::POST,
            "/v1/tokens",
            &body.to_string(),
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let short = made["token"].as_str().expect("token").to_string();
    let (status, _) = stack.send(Method::GET, "/v1/jobs", "", Some(&short)).await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (status, _) = stack.send(Method::GET, "/v1/jobs", "", Some(&short)).await;
    assert_eq!(status, 401, "an expired token is refused");

    // Channels are shared: only an admin of every namespace changes them.
    let channel = r#"{"name":"pager","type":"webhook","url":"http://127.0.0.1:9/x"}"#;
    let (status, reply) = stack
        .send(Method::POST, "/v1/channels", channel, Some(admin))
        .await;
    assert_eq!(
        (status, &reply["error"]["namespace"]),
        (403, &json!("*")),
        "{reply}"
    );
    // The bootstrap token still does everything.
    let (status, _) = stack
        .send(
            Method::POST,
            "/v1/jobs/ops.job-viewer/trigger",
            "",
            Some(API_TOKEN),
        )
        .await;
    assert_eq!(status, 202);
    stack.stop().await;
}
