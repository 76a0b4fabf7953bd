//! The namespace doors, enforced by nats-server: users whose permissions
//! are `jetcron nats-permissions --namespace billing --role <role>`,
//! pasted into a real nats-server's `users`, put, list, trigger and read
//! their runs in `billing` over `jetcron.api.ns.billing.>` and
//! `nats kv put`, and the server refuses them (a permissions violation)
//! everywhere else; a door's request that names another namespace's job is
//! refused by the gateway (403) with nothing stored.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event};
use futures::StreamExt as _;
use jetcron_core::access::Role;
use jetcron_core::nats_doors::{inbox_prefix, nats_permissions};
use jetcron_testkit::{wait_until, Stack, StackOptions};
use serde_json::Value;

use crate::cli_client::jetcron;

/// The server's users: the stack's services log in as `jetcron` (every
/// permission, the `no_auth_user`), each team user with the permissions the
/// command prints.
fn server_config() -> String {
    let mut users = vec![r#"{ user: "jetcron", password: "jetcron-pw" }"#.to_string()];
    for role in [Role::Viewer, Role::Operator, Role::Editor] {
        let permissions =
            serde_json::to_string(&nats_permissions("billing", role)).expect("permissions");
        users.push(format!(
            r#"{{ user: "billing-{role}", password: "{role}-pw", permissions: {permissions} }}"#
        ));
    }
    format!(
        "authorization {{\n  users = [\n    {}\n  ]\n}}\nno_auth_user: \"jetcron\"\n",
        users.join("\n    ")
    )
}

/// A team member's connection and the server's complaints to it.
struct Member {
    client: Client,
    violations: Arc<Mutex<Vec<String>>>,
}

async fn member(stack: &Stack, role: Role) -> Member {
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = violations.clone();
    let client =
        ConnectOptions::with_user_and_password(format!("billing-{role}"), format!("{role}-pw"))
            .custom_inbox_prefix(inbox_prefix("billing"))
            .event_callback(move |event| {
                let seen = seen.clone();
                async move {
                    if let Event::ServerError(error) = event {
                        seen.lock().expect("violations").push(error.to_string());
                    }
                }
            })
            .connect(stack.nats.url())
            .await
            .expect("connect as a team member");
    Member { client, violations }
}

impl Member {
    /// A request: the reply as JSON with its service error code, or `None`
    /// when nothing answered (the server dropped it).
    async fn request(&self, subject: &str, body: &str) -> Option<(Value, Option<String>)> {
        let request = self
            .client
            .request(subject.to_string(), body.to_string().into());
        let reply = tokio::time::timeout(Duration::from_secs(2), request)
            .await
            .ok()?
            .ok()?;
        let code = reply
            .headers
            .as_ref()
            .and_then(|h| h.get(async_nats::service::NATS_SERVICE_ERROR_CODE))
            .map(|v| v.as_str().to_string());
        Some((serde_json::from_slice(&reply.payload).expect("JSON"), code))
    }

    /// Wait until the server has said `subject` is not allowed.
    async fn refused(&self, subject: &str) {
        wait_until(
            &format!("a permissions violation for {subject}"),
            Duration::from_secs(5),
            || async {
                self.violations
                    .lock()
                    .expect("violations")
                    .iter()
                    .any(|v| v.contains("Permissions Violation") && v.contains(subject))
                    .then_some(())
            },
        )
        .await;
    }
}

fn job(id: &str) -> String {
    format!(
        r#"{{"id":"{id}","schedule":"0 0 0 1 1 * 2090","target":{{"type":"nats","subject":"svc.doors"}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_teams_user_acts_in_its_namespace_and_the_server_refuses_it_elsewhere() {
    let stack = Stack::start(StackOptions {
        nats_config: Some(server_config()),
        ..StackOptions::default()
    })
    .await;
    // A target that answers, and the jobs of another team.
    let mut target = stack.client.subscribe("svc.doors").await.expect("target");
    let answering = stack.client.clone();
    tokio::spawn(async move {
        while let Some(call) = target.next().await {
            if let Some(reply) = call.reply {
                let _ = answering.publish(reply, "ok".into()).await;
            }
        }
    });
    stack.put_job(&job("ops.secret")).await;
    let editor = member(&stack, Role::Editor).await;
    let operator = member(&stack, Role::Operator).await;
    let viewer = member(&stack, Role::Viewer).await;

    // The editor puts through its door and straight into the bucket.
    let (reply, code) = editor
        .request("jetcron.api.ns.billing.jobs.put", &job("billing.export"))
        .await
        .expect("answered");
    assert_eq!(code, None, "{reply}");
    let bucket = async_nats::jetstream::new(editor.client.clone())
        .get_key_value("jetcron_jobs")
        .await
        .expect("the editor binds the jobs bucket");
    bucket
        .put("billing.direct", job("billing.direct").into())
        .await
        .expect("kv put under its namespace");
    // Another namespace's job through its own door: the gateway refuses it.
    let (reply, code) = editor
        .request("jetcron.api.ns.billing.jobs.put", &job("ops.intruder"))
        .await
        .expect("answered");
    assert_eq!(code.as_deref(), Some("403"), "{reply}");
    assert_eq!(reply["error"]["namespace"], "ops", "{reply}");
    // The server refuses the rest: another door, the plain API, another
    // namespace's keys.
    for subject in ["jetcron.api.ns.ops.jobs.put", "jetcron.api.jobs.put"] {
        assert!(editor
            .request(subject, &job("ops.intruder"))
            .await
            .is_none());
        editor.refused(subject).await;
    }
    let put = bucket.put("ops.intruder", job("ops.intruder").into());
    assert!(tokio::time::timeout(Duration::from_secs(3), put)
        .await
        .map_or(true, |put| put.is_err()));
    editor.refused("$KV.jetcron_jobs.ops.intruder").await;
    assert!(
        stack
            .jobs_bucket()
            .await
            .get("ops.intruder")
            .await
            .expect("get")
            .is_none(),
        "nothing of another namespace is stored"
    );

    // The viewer lists its namespace only, and may not put or trigger.
    let (list, code) = viewer
        .request("jetcron.api.ns.billing.jobs.list", "{}")
        .await
        .expect("answered");
    assert_eq!(code, None, "{list}");
    let ids: Vec<&str> = list["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["billing.direct", "billing.export"]);
    for subject in [
        "jetcron.api.ns.billing.jobs.put",
        "jetcron.api.ns.billing.jobs.trigger",
    ] {
        assert!(viewer.request(subject, &job("billing.x")).await.is_none());
        viewer.refused(subject).await;
    }

    // The operator triggers, and hears its job's run events; another
    // namespace's events it may not subscribe to.
    let mut events = operator
        .client
        .subscribe("jetcron.runs.billing.*.*")
        .await
        .expect("subscribe");
    operator.client.flush().await.expect("flush");
    let (reply, code) = operator
        .request(
            "jetcron.api.ns.billing.jobs.trigger",
            r#"{"id":"billing.export"}"#,
        )
        .await
        .expect("answered");
    assert_eq!(code, None, "{reply}");
    let run_id = reply["run_id"].as_str().expect("run id").to_string();
    let event = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(message) = events.next().await {
            let event: Value = serde_json::from_slice(&message.payload).expect("event");
            if event["run_id"] == run_id.as_str() && event["kind"] == "succeeded" {
                return Some(message.subject.to_string());
            }
        }
        None
    })
    .await
    .expect("the run's end heard")
    .expect("events");
    assert_eq!(event, "jetcron.runs.billing.export.succeeded");
    let (reply, code) = operator
        .request(
            "jetcron.api.ns.billing.jobs.trigger",
            r#"{"id":"ops.secret"}"#,
        )
        .await
        .expect("answered");
    assert_eq!(code.as_deref(), Some("403"), "{reply}");
    let _denied = operator
        .client
        .subscribe("jetcron.runs.ops.*.*")
        .await
        .expect("subscribe call");
    operator.refused("jetcron.runs.ops.*.*").await;

    // The viewer reads its namespace's runs over its door, and is refused
    // another namespace's, by the gateway (403) and not only by the list.
    let listed = wait_until(
        "the run listed over NATS",
        Duration::from_secs(20),
        || async {
            let (page, code) = viewer
                .request("jetcron.api.ns.billing.runs.list", "{}")
                .await?;
            let found = page["runs"]
                .as_array()?
                .iter()
                .any(|r| r["run_id"] == run_id.as_str() && r["status"] == "succeeded");
            (code.is_none() && found).then_some(page)
        },
    )
    .await;
    assert!(
        listed["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .all(|r| r["job_id"]
                .as_str()
                .is_some_and(|j| j.starts_with("billing."))),
        "{listed}"
    );
    let (run, code) = viewer
        .request(
            "jetcron.api.ns.billing.runs.get",
            &format!(r#"{{"run_id":"{run_id}"}}"#),
        )
        .await
        .expect("answered");
    assert_eq!(code, None, "{run}");
    assert_eq!(run["run"]["status"], "succeeded", "{run}");
    assert_eq!(run["run"]["job_id"], "billing.export", "{run}");
    let ops_run = stack.trigger("ops.secret").await;
    stack
        .wait_for_run_status(&ops_run, "succeeded", Duration::from_secs(20))
        .await;
    let (reply, code) = viewer
        .request(
            "jetcron.api.ns.billing.runs.get",
            &format!(r#"{{"run_id":"{ops_run}"}}"#),
        )
        .await
        .expect("answered");
    assert_eq!(code.as_deref(), Some("403"), "{reply}");
    let (reply, code) = viewer
        .request("jetcron.api.ns.billing.runs.list", r#"{"namespace":"ops"}"#)
        .await
        .expect("answered");
    assert_eq!(code.as_deref(), Some("403"), "{reply}");

    // The client commands as the team's users: apply and prune stay in
    // billing, a file of another namespace is refused, nothing leaks.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("export.json"), job("billing.export")).expect("write");
    std::fs::write(dir.path().join("cli.json"), job("billing.cli")).expect("write");
    let as_editor = [
        "--door",
        "billing",
        "--nats-user",
        "billing-editor",
        "--nats-password",
        "editor-pw",
    ];
    let folder = dir.path().to_str().expect("path");
    let applied = jetcron(
        &stack,
        &[&["apply", "-f", folder, "--prune"][..], &as_editor[..]].concat(),
        "",
    )
    .await;
    assert_eq!(applied.code, 2, "{}{}", applied.stdout, applied.stderr);
    assert!(
        applied.stdout.contains("+ create billing.cli"),
        "{}",
        applied.stdout
    );
    assert!(
        applied.stdout.contains("- delete billing.direct"),
        "{}",
        applied.stdout
    );
    assert!(!applied.stdout.contains("ops."), "{}", applied.stdout);
    let ops = tempfile::tempdir().expect("tempdir");
    std::fs::write(ops.path().join("x.json"), job("ops.intruder")).expect("write");
    let refused = jetcron(
        &stack,
        &[
            &["apply", "-f", ops.path().to_str().expect("path")][..],
            &as_editor[..],
        ]
        .concat(),
        "",
    )
    .await;
    assert_eq!(refused.code, 1, "{}{}", refused.stdout, refused.stderr);
    assert!(
        refused.stderr.contains("403 forbidden"),
        "{}",
        refused.stderr
    );
    let as_viewer = [
        "--door",
        "billing",
        "--nats-user",
        "billing-viewer",
        "--nats-password",
        "viewer-pw",
    ];
    let listed = jetcron(
        &stack,
        &[&["jobs", "list", "-o", "json"][..], &as_viewer[..]].concat(),
        "",
    )
    .await
    .json();
    let ids: Vec<&str> = listed["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["billing.cli", "billing.export"]);
    let (kept, _) = stack
        .api("jetcron.api.jobs.get", r#"{"id":"ops.secret"}"#)
        .await;
    assert_eq!(kept["job"]["id"], "ops.secret", "{kept}");
    stack.stop().await;
}
