//! The clustered form as a new user starts it: three nats-server nodes,
//! `JETCRON_REPLICAS=3`, every jetcron service a separate process given the
//! list of servers. Connecting through a list whose first server is down,
//! processes started together with a cluster that is still electing, and an
//! existing R1 topology under processes that want R3.

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream;
use jetcron_core::subjects;
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_testkit::{wait_until, ClickHouseServer, JetcronProcess, NatsCluster};

fn jetcron() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_jetcron"))
}

/// `jetcron req` through `urls`; the reply's body.
fn request(urls: &str, subject: &str, body: &str) -> String {
    let output = std::process::Command::new(jetcron())
        .args(["req", subject, body, "--timeout", "10s"])
        .env("JETCRON_NATS_URL", urls)
        .output()
        .expect("run jetcron req");
    assert!(
        output.status.success(),
        "jetcron req failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The first answer of `url` (a probe), waiting up to 20 s for one.
async fn first_answer(url: &str, when: &str) -> (u16, serde_json::Value) {
    wait_until(
        &format!("{url} answering {when}"),
        Duration::from_secs(20),
        || http_status(url),
    )
    .await
}

/// Status and JSON body of a GET, `None` while nothing answers.
async fn http_status(url: &str) -> Option<(u16, serde_json::Value)> {
    let response = jetcron_testkit::reqwest::get(url).await.ok()?;
    let status = response.status().as_u16();
    let body = response.json().await.ok()?;
    Some((status, body))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_list_whose_first_server_is_down_connects_through_the_next() {
    let mut cluster = NatsCluster::start(3).await;
    cluster.kill(0);
    // The dead node first, as `jetcron --help` shows the list form.
    let urls = cluster.urls();
    assert!(urls.starts_with(&cluster.node(0).url()), "{urls}");
    let http_port = jetcron_testkit::free_port();
    let http_addr = format!("127.0.0.1:{http_port}");
    let mut gateway = JetcronProcess::start(
        jetcron(),
        &["gateway", "--http-addr", &http_addr],
        &[
            ("JETCRON_NATS_URL", urls.as_str()),
            ("JETCRON_REPLICAS", "3"),
            ("JETCRON_CLICKHOUSE_URL", "http://127.0.0.1:1"),
            ("JETCRON_MISSED_SCAN_INTERVAL", "0s"),
        ],
    );
    let urls_for_req = urls.clone();
    // After the kill the cluster elects a new meta leader before streams can
    // be made: seconds alone, longer under a loaded CI machine.
    let reply = wait_until("a job stored through the list", Duration::from_secs(90), || {
        let urls = urls_for_req.clone();
        async move {
            let output = std::process::Command::new(jetcron())
                .args([
                    "req",
                    subjects::API_JOBS_PUT,
                    r#"{"id":"listed","schedule":"@daily","target":{"type":"nats","subject":"svc.listed"}}"#,
                ])
                .env("JETCRON_NATS_URL", &urls)
                .output()
                .ok()?;
            output
                .status
                .success()
                .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
        }
    })
    .await;
    assert!(reply.contains(r#""ok":true"#), "{reply}");
    assert!(gateway.is_running(), "{}", gateway.log());
    let log = gateway.log();
    assert!(!log.contains("invalid port number"), "{log}");
    assert!(log.contains("ready: NATS topology verified"), "{log}");

    // The job is in an R3 bucket, read back through the list.
    let js = jetstream::new(cluster.client().await);
    let mut stream = js
        .get_stream(format!("KV_{}", subjects::JOBS_BUCKET))
        .await
        .expect("jobs bucket stream");
    let info = stream.info().await.expect("info");
    assert_eq!(info.config.num_replicas, 3);
    let got = request(&urls, "jetcron.api.jobs.get", r#"{"id":"listed"}"#);
    assert!(got.contains(r#""schedule":"@daily""#), "{got}");
}

#[tokio::test(flavor = "multi_thread")]
async fn processes_started_with_an_electing_cluster_converge_and_say_ready() {
    let clickhouse = ClickHouseServer::start();
    // One node of three: no JetStream meta leader, so no stream can be made.
    let mut cluster = NatsCluster::start_without_waiting(3);
    cluster.kill(1);
    cluster.kill(2);
    let urls = cluster.urls();
    let env = [
        ("JETCRON_NATS_URL", urls.as_str()),
        ("JETCRON_REPLICAS", "3"),
        ("JETCRON_CLICKHOUSE_URL", &clickhouse.url()),
    ];
    let http_port = jetcron_testkit::free_port();
    let http_addr = format!("127.0.0.1:{http_port}");
    let mut processes = vec![
        JetcronProcess::start(jetcron(), &["gateway", "--http-addr", &http_addr], &env),
        JetcronProcess::start(jetcron(), &["ticker"], &env),
        JetcronProcess::start(jetcron(), &["ticker"], &env),
        JetcronProcess::start(jetcron(), &["executor"], &env),
        JetcronProcess::start(jetcron(), &["executor"], &env),
        JetcronProcess::start(jetcron(), &["projector"], &env),
    ];
    let readyz = format!("http://{http_addr}/readyz");
    let (status, body) = first_answer(&readyz, "while the cluster elects").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["services"]["gateway"]
            .as_str()
            .is_some_and(|s| s.starts_with("waiting")),
        "{body}"
    );
    // A few seconds without a cluster: every process keeps trying.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for process in &mut processes {
        assert!(
            process.is_running(),
            "exited without a cluster:\n{}",
            process.log()
        );
    }
    cluster.restart(1);
    cluster.restart(2);
    let body = wait_until(
        "/readyz 200 once the cluster formed",
        Duration::from_secs(60),
        || {
            let readyz = readyz.clone();
            async move {
                let (status, body) = http_status(&readyz).await?;
                (status == 200).then_some(body)
            }
        },
    )
    .await;
    assert_eq!(body["services"]["gateway"], "ready", "{body}");
    for process in &mut processes {
        wait_until("every process ready", Duration::from_secs(60), || {
            let log = process.log();
            async move { log.contains("ready: NATS topology verified").then_some(()) }
        })
        .await;
        assert!(process.is_running(), "{}", process.log());
        let log = process.log();
        assert!(!log.contains("jetcron failed"), "{log}");
    }
    // Every stream and bucket was made with three replicas, once.
    let js = jetstream::new(cluster.client().await);
    for name in [
        subjects::DUE_STREAM,
        subjects::RUNS_STREAM,
        subjects::NOTIFY_STREAM,
        subjects::DEAD_LETTER_STREAM,
        "KV_jetcron_jobs",
        "KV_jetcron_ticker",
        "KV_jetcron_running",
    ] {
        let mut stream = js.get_stream(name).await.expect(name);
        let info = stream.info().await.expect("stream info");
        assert_eq!(info.config.num_replicas, 3, "{name}");
    }
    // Retries were logged at a bounded rate, a line per 10 s of waiting
    // and the first (a few lines, not hundreds). A fixed count failed once
    // on a loaded CI machine where the cluster took 74 s to answer: six
    // lines, one per 10-14 s.
    for process in &processes {
        let log = jetcron_testkit::without_colour_codes(&process.log());
        let retries = log.matches("NATS topology not available yet").count() as u64;
        let waited_s = ready_after_ms(&log) / 1000;
        assert!(
            retries <= 2 + waited_s / 10,
            "{retries} retry lines in {waited_s} s:\n{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_r1_topology_under_processes_that_want_r3_is_refused_with_the_way_to_migrate() {
    let cluster = NatsCluster::start(3).await;
    let js = jetstream::new(cluster.client().await);
    topology::ensure_due_stream(&js, &TopologyOptions::default())
        .await
        .expect("an R1 due stream, as a one-node deployment made it");
    let mut ticker = JetcronProcess::start(
        jetcron(),
        &["ticker"],
        &[
            ("JETCRON_NATS_URL", cluster.urls().as_str()),
            ("JETCRON_REPLICAS", "3"),
        ],
    );
    let status = ticker
        .wait_for_exit(Duration::from_secs(30))
        .expect("a mismatch ends the process");
    assert!(!status.success());
    let log = ticker.log();
    assert!(
        log.contains("stream JETCRON_DUE exists with settings jetcron cannot use: 1 replica(s), this process wants 3"),
        "{log}"
    );
    assert!(log.contains("jetcron migrate --replicas 3"), "{log}");
    // Said when the process ends (log line and stderr), not in a loop.
    assert!(log.matches("exists with settings").count() <= 3, "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_that_cannot_reach_nats_names_every_service_it_waits_for() {
    // Nothing listens on this port: every service stays at connecting.
    let nats_url = format!("nats://127.0.0.1:{}", jetcron_testkit::free_port());
    let metrics_addr = format!("127.0.0.1:{}", jetcron_testkit::free_port());
    let http_addr = format!("127.0.0.1:{}", jetcron_testkit::free_port());
    let env = [("JETCRON_NATS_URL", nats_url.as_str())];
    let mut process = JetcronProcess::start(
        jetcron(),
        &[
            "--metrics-addr",
            &metrics_addr,
            "all",
            "--http-addr",
            &http_addr,
        ],
        &env,
    );
    let readyz = format!("http://{metrics_addr}/readyz");
    let (status, body) = first_answer(&readyz, "without NATS").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ok"], false, "{body}");
    // The very first answer already lists all four, none ready: a probe
    // never sees an empty list or a process ready before a service began.
    for service in ["gateway", "projector", "executor", "ticker"] {
        let state = body["services"][service].as_str().unwrap_or_default();
        assert!(state.starts_with("waiting: starting"), "{service}: {body}");
    }
    assert!(process.is_running(), "{}", process.log());
}

/// How long a process waited for the topology (`waited_ms` of its
/// `ready: NATS topology verified` line).
fn ready_after_ms(log: &str) -> u64 {
    log.lines()
        .find(|line| line.contains("ready: NATS topology verified"))
        .and_then(|line| line.split("waited_ms=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no ready line with waited_ms:\n{log}"))
}
