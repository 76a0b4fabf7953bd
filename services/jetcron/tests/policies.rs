//! A namespace's target policy, as a platform team sets one for team
//! `billing`: its jobs may call `svc.pol.billing.>` only, in pool
//! `default`, without shell and without chains from other namespaces.
//! Puts that break it are refused with the field named and store nothing;
//! a definition put past the API (`nats kv put`) is recorded as rejected
//! by the ticker, and each of its fires is refused by the executor (a
//! failed run, its target never called) until the policy allows it, when
//! the next fire calls it without a new put. The default namespace is not
//! limited; the policy is read by the namespace's viewers, set by its
//! admins, and once locked by an admin of `*` only.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use jetcron_testkit::reqwest::Method;
use jetcron_testkit::{wait_until, Stack, StackOptions, API_TOKEN};
use serde_json::{json, Value};

const POLICY: &str = "/v1/namespaces/billing/policy";

/// Count the requests to `subject` (wildcards allowed), answering each.
async fn answer(stack: &Stack, subject: &str) -> Arc<AtomicUsize> {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut requests = stack
        .client
        .subscribe(subject.to_string())
        .await
        .expect("subscribe");
    let (client, counted) = (stack.client.clone(), calls.clone());
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            counted.fetch_add(1, Ordering::SeqCst);
            if let Some(reply) = request.reply {
                let _ = client.publish(reply, "ok".into()).await;
            }
        }
    });
    calls
}

fn job(id: &str, schedule: &str, target: &str, extra: &str) -> String {
    format!(r#"{{"id":"{id}","schedule":"{schedule}","target":{target}{extra}}}"#)
}

fn nats(subject: &str) -> String {
    format!(r#"{{"type":"nats","subject":"{subject}"}}"#)
}

const FAR: &str = "0 0 0 1 1 * 2090";

/// The revision of `id` in the jobs bucket (0: none).
async fn revision(stack: &Stack, id: &str) -> u64 {
    match stack.jobs_bucket().await.entry(id).await.expect("entry") {
        Some(entry) if entry.operation == async_nats::jetstream::kv::Operation::Put => {
            entry.revision
        }
        _ => 0,
    }
}

/// The field and code of each problem of a refused put.
fn problems(body: &Value) -> Vec<(String, String)> {
    body["error"]["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .map(|p| {
            (
                p["field"].as_str().unwrap_or_default().to_string(),
                p["code"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_namespaces_policy_holds_at_the_put_and_at_every_fire() {
    let stack = Stack::start(StackOptions::default()).await;
    let allowed_calls = answer(&stack, "svc.pol.billing.>").await;
    let other_team_calls = answer(&stack, "payments.charge").await;
    let (admin, _) = stack.scoped_token("billing", "admin").await;
    let (editor, _) = stack.scoped_token("billing", "editor").await;

    // Set by billing's admin; an editor reads it but may not change it.
    let policy = json!({"nats_subjects": ["svc.pol.billing.>"], "pools": ["default"], "shell": false, "chain_from": []});
    let (status, set) = stack
        .send(Method::PUT, POLICY, &policy.to_string(), Some(&admin))
        .await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["refused_jobs"], json!([]), "{set}");
    let first_revision = set["revision"].as_u64().expect("revision");
    let (status, read) = stack.send(Method::GET, POLICY, "", Some(&editor)).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["policy"], policy, "{read}");
    let (status, refused) = stack.send(Method::PUT, POLICY, "{}", Some(&editor)).await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["error"]["needs"], "admin", "{refused}");

    // A bad policy names its field and changes nothing.
    let (status, bad) = stack
        .send(
            Method::PUT,
            POLICY,
            r#"{"nats_subjects":["svc.>.x"],"url_prefixes":["ftp://x"]}"#,
            Some(&admin),
        )
        .await;
    assert_eq!(status, 400, "{bad}");
    let fields: Vec<String> = problems(&bad).into_iter().map(|(f, _)| f).collect();
    assert_eq!(fields, ["nats_subjects[0]", "url_prefixes[0]"], "{bad}");
    let (_, read) = stack.get(POLICY).await;
    assert_eq!(read["revision"], first_revision, "{read}");

    // Puts are checked against it, field by field; nothing refused is stored.
    let every_second = "* * * * * *";
    let (status, ok) = stack
        .send(
            Method::POST,
            "/v1/jobs",
            &job(
                "billing.ok",
                every_second,
                &nats("svc.pol.billing.export"),
                "",
            ),
            Some(&editor),
        )
        .await;
    assert_eq!(status, 201, "{ok}");
    for (id, target, extra, field) in [
        ("billing.out", nats("payments.charge"), "", "target.subject"),
        (
            "billing.sh",
            r#"{"type":"shell","command":"true"}"#.to_string(),
            "",
            "target.type",
        ),
        (
            "billing.pool",
            nats("svc.pol.billing.x"),
            r#","pool":"gpu""#,
            "pool",
        ),
    ] {
        let (status, body) = stack
            .send(
                Method::POST,
                "/v1/jobs",
                &job(id, FAR, &target, extra),
                Some(&editor),
            )
            .await;
        assert_eq!(status, 400, "{id}: {body}");
        assert_eq!(
            problems(&body),
            [(field.to_string(), "forbidden_by_policy".to_string())],
            "{id}: {body}"
        );
        assert_eq!(revision(&stack, id).await, 0, "{id} was stored");
    }
    let chained = r#"{"id":"billing.after","after":[{"job":"ops.parent"}],"target":{"type":"nats","subject":"svc.pol.billing.x"}}"#;
    let (status, body) = stack
        .send(Method::POST, "/v1/jobs", chained, Some(&editor))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(problems(&body)[0].0, "after[0].job", "{body}");
    // The default namespace has no policy: anything goes, as before.
    stack
        .put_job(&job("free", FAR, &nats("payments.charge"), ""))
        .await;

    // Past the API: the ticker records it as rejected, the executor
    // refuses every fire, the other team's service is never called.
    stack
        .kv_put(
            "billing.sneaky",
            job("billing.sneaky", every_second, &nats("payments.charge"), "").as_bytes(),
        )
        .await;
    let rejection = wait_until(
        "the sneaky job's rejection",
        Duration::from_secs(30),
        || async {
            let (_, history) = stack.get("/v1/jobs/billing.sneaky/history").await;
            history["rejections"]
                .as_array()
                .and_then(|r| r.first().cloned())
        },
    )
    .await;
    assert_eq!(
        rejection["problems"][0]["field"], "target.subject",
        "{rejection}"
    );
    assert_eq!(
        rejection["problems"][0]["code"], "forbidden_by_policy",
        "{rejection}"
    );
    let refused_runs = stack
        .wait_for_runs("billing.sneaky", "failed", 2, Duration::from_secs(30))
        .await;
    for run in &refused_runs {
        let error = run["error"].as_str().unwrap_or_default();
        assert!(
            error.starts_with("rejected by policy: target.subject"),
            "{run}"
        );
    }
    stack
        .wait_for_runs("billing.ok", "succeeded", 2, Duration::from_secs(30))
        .await;
    assert!(allowed_calls.load(Ordering::SeqCst) >= 2);
    assert_eq!(
        other_team_calls.load(Ordering::SeqCst),
        0,
        "a refused fire called its target"
    );

    // Allowed now: its next fires are called, with no new put.
    let wider = json!({"nats_subjects": ["svc.pol.billing.>", "payments.charge"], "pools": ["default"], "shell": false, "chain_from": []});
    let (status, set) = stack
        .send(Method::PUT, POLICY, &wider.to_string(), Some(&admin))
        .await;
    assert_eq!(status, 200, "{set}");
    stack
        .wait_for_runs("billing.sneaky", "succeeded", 2, Duration::from_secs(30))
        .await;
    assert!(other_team_calls.load(Ordering::SeqCst) >= 2);

    // Narrowed again: the answer names the job it now refuses.
    let (status, set) = stack
        .send(Method::PUT, POLICY, &policy.to_string(), Some(&admin))
        .await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["refused_jobs"][0]["id"], "billing.sneaky", "{set}");
    assert_eq!(
        set["refused_jobs"][0]["refusals"][0]["field"], "target.subject",
        "{set}"
    );
    stack.kv_delete("billing.sneaky").await;
    stack.kv_delete("billing.ok").await;

    // Locked by an admin of `*`: billing's admin can no longer change it.
    let locked = json!({"nats_subjects": ["svc.pol.billing.>"], "locked": true});
    let (status, body) = stack
        .send(Method::PUT, POLICY, &locked.to_string(), Some(&admin))
        .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["namespace"], "*", "{body}");
    let (status, body) = stack
        .send(Method::PUT, POLICY, &locked.to_string(), Some(API_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    for (method, body) in [(Method::PUT, "{}"), (Method::DELETE, "")] {
        let (status, answer) = stack.send(method, POLICY, body, Some(&admin)).await;
        assert_eq!(status, 403, "{answer}");
    }
    let (_, read) = stack.get(POLICY).await;
    assert_eq!(read["policy"], locked, "{read}");
    let (status, removed) = stack
        .send(Method::DELETE, POLICY, "", Some(API_TOKEN))
        .await;
    assert_eq!(
        (status, &removed["removed"]),
        (200, &json!(true)),
        "{removed}"
    );
    let (_, read) = stack.get(POLICY).await;
    assert_eq!(read["policy"], Value::Null, "{read}");
    stack.stop().await;
}

/// A policy value that is no policy (put past the API) refuses every job
/// of its namespace rather than limiting nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreadable_policy_refuses_its_namespaces_jobs() {
    let stack = Stack::start(StackOptions {
        executor: false,
        ..StackOptions::default()
    })
    .await;
    let policies = stack
        .js
        .get_key_value(jetcron_core::subjects::POLICIES_BUCKET)
        .await
        .expect("policies bucket");
    policies
        .put("ops", br#"{"shell":"no"}"#.to_vec().into())
        .await
        .expect("kv put");
    // The gateway checks puts against its in-memory book of the bucket,
    // which the watch brings the direct put to a moment later: probe with
    // a fresh id each time (a probe put before the book has the policy is
    // stored and proves nothing), then put the job once.
    let probes = AtomicUsize::new(0);
    wait_until("the book refuses", Duration::from_secs(10), || async {
        let n = probes.fetch_add(1, Ordering::Relaxed);
        let probe = job(&format!("ops.probe{n}"), FAR, &nats("svc.ops.p"), "");
        let (status, _) = stack.post("/v1/jobs", &probe).await;
        (status == 400).then_some(())
    })
    .await;
    let body = job("ops.x", FAR, &nats("svc.ops.x"), "");
    let (status, refused) = stack.post("/v1/jobs", &body).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        problems(&refused),
        [("id".to_string(), "forbidden_by_policy".to_string())],
        "{refused}"
    );
    assert_eq!(revision(&stack, "ops.x").await, 0);
    let (status, read) = stack.get("/v1/namespaces/ops/policy").await;
    assert_eq!(status, 200, "{read}");
    assert!(read["unreadable"].as_str().is_some(), "{read}");
    let (status, bad) = stack.get("/v1/namespaces/ops.x/policy").await;
    assert_eq!(status, 400, "{bad}");
    stack.stop().await;
}
