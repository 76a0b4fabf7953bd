//! Namespaces, as teams use them: `billing.export` put with
//! `nats req jetcron.api.jobs.put`, `ops.cleanup` (a `forbid` job) and
//! `export` of the default namespace put with `nats kv put`, and
//! `ops.after-export` chained after `billing.export` across namespaces.
//! Each fires on time and its target is called once per fire; lists over
//! HTTP and NATS take `namespace`; a name with two dots or the default
//! namespace written out is refused with the field named, and nothing is
//! stored.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use jetcron_testkit::{Stack, StackOptions};
use serde_json::Value;

/// Calls of `svc.ns.*`: the job (header `Jetcron-Job-Id`) and run of each.
type Calls = Arc<Mutex<Vec<(String, String)>>>;

async fn serve(stack: &Stack) -> Calls {
    let calls: Calls = Arc::default();
    let mut requests = stack.client.subscribe("svc.ns.*").await.expect("subscribe");
    let client = stack.client.clone();
    let recorded = calls.clone();
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let header = |name: &str| {
                request
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .map(|v| v.as_str().to_string())
                    .unwrap_or_default()
            };
            let call = (header("Jetcron-Job-Id"), header("Jetcron-Run-Id"));
            recorded.lock().expect("calls").push(call);
            if let Some(reply) = request.reply {
                let _ = client.publish(reply, "ok".into()).await;
            }
        }
    });
    calls
}

fn every_second(target: &str, extra: &str) -> String {
    format!(
        r#"{{"schedule":"* * * * * *","target":{{"type":"nats","subject":"svc.ns.{target}"}}{extra}}}"#
    )
}

fn ids(list: &Value) -> Vec<String> {
    list["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_str().expect("id").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_of_namespaces_fire_chain_and_list_apart() {
    let stack = Stack::start(StackOptions::default()).await;
    let calls = serve(&stack).await;

    let billing = every_second("billing-export", r#","id":"billing.export""#);
    stack.put_job(&billing).await;
    stack
        .kv_put("export", every_second("export", "").as_bytes())
        .await;
    stack
        .kv_put(
            "ops.cleanup",
            every_second("ops-cleanup", r#","concurrency":"forbid""#).as_bytes(),
        )
        .await;
    stack
        .put_job(
            r#"{"id":"ops.after-export","after":[{"job":"billing.export"}],
                "target":{"type":"nats","subject":"svc.ns.after"}}"#,
        )
        .await;

    // Refused with the field named, and nothing stored.
    let bad = |id: &str| every_second("x", &format!(r#","id":"{id}""#));
    for (id, code) in [
        ("default.export", "reserved_namespace"),
        ("deliver.export", "reserved_namespace"),
        ("billing.export.daily", "invalid_id"),
        ("billing.", "required"),
    ] {
        let (status, body) = stack.post("/v1/jobs", &bad(id)).await;
        assert_eq!(status, 400, "{id}: {body}");
        let problem = &body["error"]["problems"][0];
        assert_eq!(
            (problem["field"].as_str(), problem["code"].as_str()),
            (Some("id"), Some(code)),
            "{id}: {body}"
        );
        let (reply, error) = stack.api_put(&bad(id)).await;
        assert_eq!(error.as_deref(), Some("400"), "{id}: {reply}");
    }
    let (status, body) = stack
        .post(
            "/v1/jobs",
            &every_second("x", r#","id":"ops.x","after":[{"job":"a.b.c"}]"#),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["error"]["problems"][0]["field"], "after[0].job",
        "{body}"
    );

    for job in [
        "billing.export",
        "export",
        "ops.cleanup",
        "ops.after-export",
    ] {
        stack
            .wait_for_runs(job, "succeeded", 2, Duration::from_secs(30))
            .await;
    }

    // Lists, over HTTP and NATS, by namespace.
    let listed = |ns: &'static str| {
        let stack = &stack;
        async move {
            let (status, body) = stack.get(&format!("/v1/jobs?namespace={ns}")).await;
            assert_eq!(status, 200, "{body}");
            ids(&body)
        }
    };
    assert_eq!(listed("billing").await, ["billing.export"]);
    assert_eq!(listed("ops").await, ["ops.after-export", "ops.cleanup"]);
    assert_eq!(listed("default").await, ["export"]);
    assert_eq!(listed("nobody").await, Vec::<String>::new());
    let (all_status, all) = stack.get("/v1/jobs").await;
    assert_eq!(all_status, 200);
    assert_eq!(ids(&all).len(), 4, "{all}");
    let (reply, error) = stack
        .api("jetcron.api.jobs.list", r#"{"namespace":"ops"}"#)
        .await;
    assert_eq!(error, None, "{reply}");
    assert_eq!(ids(&reply), ["ops.after-export", "ops.cleanup"]);
    for bad in ["a.b", "deliver", "-x"] {
        let (status, body) = stack.get(&format!("/v1/jobs?namespace={bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"]["field"], "namespace", "{bad}: {body}");
        let (status, body) = stack.get(&format!("/v1/runs?namespace={bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }

    // Runs by namespace, from ClickHouse.
    for (ns, expected) in [
        ("billing", vec!["billing.export"]),
        ("ops", vec!["ops.after-export", "ops.cleanup"]),
        ("default", vec!["export"]),
    ] {
        let (status, body) = stack
            .get(&format!("/v1/runs?namespace={ns}&limit=500"))
            .await;
        assert_eq!(status, 200, "{body}");
        let jobs: BTreeSet<&str> = body["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .map(|r| r["job_id"].as_str().expect("job_id"))
            .collect();
        assert_eq!(jobs, expected.into_iter().collect(), "{ns}: {body}");
    }
    // A token of billing lists billing's runs and figures only, without
    // naming the namespace.
    let (status, made) = stack
        .post(
            "/v1/tokens",
            r#"{"namespace":"billing","role":"viewer","description":"billing's board"}"#,
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let token = made["token"].as_str().expect("token");
    for (path, rows) in [("/v1/runs?limit=500", "runs"), ("/v1/stats", "jobs")] {
        let (status, body) = stack
            .send(jetcron_testkit::reqwest::Method::GET, path, "", Some(token))
            .await;
        assert_eq!(status, 200, "{path}: {body}");
        let jobs: BTreeSet<&str> = body[rows]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| r["job_id"].as_str().expect("job_id"))
            .collect();
        assert_eq!(
            jobs,
            ["billing.export"].into_iter().collect(),
            "{path}: {body}"
        );
    }
    let (_, detail) = stack.get("/v1/jobs/billing.export").await;
    assert_eq!(detail["job"]["id"], "billing.export", "{detail}");
    assert_eq!(detail["children"][0]["job"], "ops.after-export", "{detail}");
    let ended = stack
        .runs_stream_payloads("jetcron.runs.billing.export.succeeded")
        .await;
    assert!(!ended.is_empty(), "billing.export's events on its subject");

    // Every call once: no run's target was called twice, and each call was
    // of the job its run belongs to.
    let calls = calls.lock().expect("calls").clone();
    let mut by_run: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (job, run) in &calls {
        by_run.entry(run.as_str()).or_default().push(job.as_str());
    }
    let twice: Vec<_> = by_run.iter().filter(|(_, jobs)| jobs.len() > 1).collect();
    assert!(twice.is_empty(), "called twice: {twice:?}");
    let called: BTreeSet<&str> = calls.iter().map(|(job, _)| job.as_str()).collect();
    assert_eq!(
        called,
        [
            "billing.export",
            "export",
            "ops.after-export",
            "ops.cleanup"
        ]
        .into_iter()
        .collect()
    );
    let keys: Vec<String> = {
        let bucket = stack.jobs_bucket().await;
        let keys = bucket.keys().await.expect("keys");
        let mut keys: Vec<String> = keys.map(|k| k.expect("key")).collect().await;
        keys.sort();
        keys
    };
    assert_eq!(
        keys,
        [
            "billing.export",
            "export",
            "ops.after-export",
            "ops.cleanup"
        ],
        "only the accepted jobs are stored"
    );
    stack.stop().await;
}

/// A `chains` consumer made before namespaces (filters for one-token names
/// only) hears the endings of namespaced parents once an executor starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_old_chains_consumer_learns_two_token_names() {
    use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
    use jetcron_core::subjects;

    let mut stack = Stack::start(StackOptions {
        executor: false,
        ..StackOptions::default()
    })
    .await;
    let old_filters: Vec<String> = ["succeeded", "failed", "timed_out", "killed"]
        .iter()
        .map(|kind| format!("jetcron.runs.*.{kind}"))
        .collect();
    let runs = stack
        .js
        .get_stream(subjects::RUNS_STREAM)
        .await
        .expect("runs stream");
    runs.create_consumer(pull::Config {
        durable_name: Some(subjects::CHAINS_CONSUMER.to_string()),
        filter_subjects: old_filters,
        deliver_policy: DeliverPolicy::New,
        ack_policy: AckPolicy::Explicit,
        ..Default::default()
    })
    .await
    .expect("the chains consumer of before");
    let calls = serve(&stack).await;
    stack
        .spawn_executor(jetcron_testkit::test_executor_config("e1", false))
        .await;

    stack
        .put_job(
            r#"{"id":"billing.extract","schedule":"0 0 0 1 1 * 2090",
                "target":{"type":"nats","subject":"svc.ns.extract"}}"#,
        )
        .await;
    stack
        .put_job(
            r#"{"id":"ops.load","after":[{"job":"billing.extract"}],
                "target":{"type":"nats","subject":"svc.ns.load"}}"#,
        )
        .await;
    stack.trigger("billing.extract").await;
    stack
        .wait_for_runs("ops.load", "succeeded", 1, Duration::from_secs(30))
        .await;
    let mut consumer: async_nats::jetstream::consumer::PullConsumer = runs
        .get_consumer(subjects::CHAINS_CONSUMER)
        .await
        .expect("chains consumer");
    let filters = consumer
        .info()
        .await
        .expect("info")
        .config
        .filter_subjects
        .clone();
    assert_eq!(filters, subjects::chain_filter_subjects());
    let called: Vec<String> = calls
        .lock()
        .expect("calls")
        .iter()
        .map(|(job, _)| job.clone())
        .collect();
    assert_eq!(called, ["billing.extract", "ops.load"]);
    stack.stop().await;
}

/// A namespaced job's failure alert (`jetcron.notify.billing.flaky`, two
/// tokens after the prefix, as an alert delivery's are) reaches its webhook
/// naming the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_namespaced_jobs_failure_alert_names_it() {
    use axum::routing::post;

    let stack = Stack::start(StackOptions::default()).await;
    let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = bodies.clone();
    let app = axum::Router::new().route(
        "/alert",
        post(move |body: String| {
            let seen = seen.clone();
            async move {
                let body = serde_json::from_str(&body).unwrap_or(Value::Null);
                seen.lock().expect("bodies").push(body);
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    // Nobody answers its subject: every call fails.
    stack
        .put_job(&format!(
            r#"{{"id":"billing.flaky","schedule":"0 0 0 1 1 * 2090","retry":{{"max_attempts":1}},
                "notify":{{"webhook":"{base}/alert"}},
                "target":{{"type":"nats","subject":"svc.nobody-answers"}}}}"#
        ))
        .await;
    let run_id = stack.trigger("billing.flaky").await;
    let run = jetcron_testkit::wait_until("the alert sent", Duration::from_secs(30), || async {
        stack
            .run(&run_id)
            .await
            .filter(|r| r["notification"] == "notified")
    })
    .await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["job_id"], "billing.flaky", "{run}");
    let bodies = bodies.lock().expect("bodies").clone();
    assert_eq!(bodies.len(), 1, "{bodies:#?}");
    assert_eq!(bodies[0]["run"]["job_id"], "billing.flaky", "{bodies:#?}");
    assert_eq!(bodies[0]["run"]["run_id"], run_id.as_str());
    stack.stop().await;
}
