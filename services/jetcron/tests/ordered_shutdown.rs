//! `jetcron all` stopped by SIGTERM under load: the services stop in order
//! (ticker, executor, projector, gateway), every run that started is
//! recorded to its end, and every run event reached ClickHouse before the
//! process exited.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt as _;
use jetcron_core::events::{RunEvent, RunEventKind};
use jetcron_core::subjects;
use jetcron_testkit::{
    free_port, wait_until, without_colour_codes, ClickHouseServer, JetcronProcess, NatsServer,
};

const JOBS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_mid_load_stops_in_order_and_loses_no_run_event() {
    let nats = NatsServer::start();
    let clickhouse = ClickHouseServer::start();
    let http_addr = format!("127.0.0.1:{}", free_port());
    let mut all = JetcronProcess::start(
        Path::new(env!("CARGO_BIN_EXE_jetcron")),
        &["all", "--http-addr", &http_addr],
        &[
            ("JETCRON_NATS_URL", nats.url().as_str()),
            ("JETCRON_CLICKHOUSE_URL", clickhouse.url().as_str()),
        ],
    );
    let http = jetcron_testkit::reqwest::Client::new();
    wait_until("jetcron all is ready", Duration::from_secs(60), || async {
        let ready = http.get(format!("http://{http_addr}/readyz")).send().await;
        ready.ok().filter(|r| r.status().is_success()).map(|_| ())
    })
    .await;

    // A service that takes 300 ms per call: calls are in flight at any instant.
    let client = nats.client().await;
    let mut requests = client.subscribe("svc.load.>").await.expect("subscribe");
    let responder = client.clone();
    let service = tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let responder = responder.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                if let Some(reply) = request.reply {
                    let _ = responder.publish(reply, "ok".into()).await;
                }
            });
        }
    });
    for i in 0..JOBS {
        let job = format!(
            r#"{{"id":"load-{i}","schedule":"* * * * * *","timeout":"5s","target":{{"type":"nats","subject":"svc.load.{i}"}}}}"#
        );
        let reply = client
            .request(subjects::API_JOBS_PUT, job.into())
            .await
            .expect("jobs.put");
        assert!(
            String::from_utf8_lossy(&reply.payload).contains(r#""ok":true"#),
            "{}",
            String::from_utf8_lossy(&reply.payload)
        );
    }
    tokio::time::sleep(Duration::from_secs(6)).await;

    // SIGTERM mid-load: the process ends cleanly, stage by stage.
    let status = tokio::task::block_in_place(|| all.terminate()).expect("exit status");
    let log = without_colour_codes(&all.log());
    assert!(status.success(), "jetcron all exited with {status}:\n{log}");
    let order: Vec<&str> = ["Ticker", "Executor", "Projector", "Gateway"]
        .into_iter()
        .collect();
    let mut last = 0;
    for stage in &order {
        for what in ["stopping", "stopped"] {
            let line = log
                .lines()
                .position(|l| l.contains(what) && l.contains(&format!("stage={stage}")))
                .unwrap_or_else(|| panic!("no {what:?} of {stage} in the log:\n{log}"));
            assert!(
                line >= last,
                "{what} {stage} came before the stage ahead of it:\n{log}"
            );
            last = line;
        }
    }
    service.abort();

    // Every run that started reached its end in JETCRON_RUNS.
    let js = async_nats::jetstream::new(client.clone());
    let mut stream = js
        .get_stream(subjects::RUNS_STREAM)
        .await
        .expect("runs stream");
    let info = stream.info().await.expect("stream info").state.clone();
    let mut by_run: BTreeMap<String, Vec<RunEventKind>> = BTreeMap::new();
    let mut event_ids = std::collections::BTreeSet::new();
    for seq in info.first_sequence..=info.last_sequence {
        let Ok(message) = stream.get_raw_message(seq).await else {
            continue;
        };
        let Ok(event) = serde_json::from_slice::<RunEvent>(&message.payload) else {
            continue;
        };
        event_ids.insert(event.event_id.clone());
        by_run
            .entry(event.run_id.as_str().to_string())
            .or_default()
            .push(event.kind);
    }
    assert!(
        by_run.len() >= JOBS * 3,
        "only {} runs in 6 s of {JOBS} jobs a second",
        by_run.len()
    );
    let half_recorded: Vec<_> = by_run
        .iter()
        .filter(|(_, kinds)| {
            kinds.contains(&RunEventKind::Started) && !kinds.iter().any(|k| k.is_terminal())
        })
        .collect();
    assert!(
        half_recorded.is_empty(),
        "runs started and never ended: {half_recorded:?}\n{log}"
    );

    // Every run event is in ClickHouse: the projector flushed before exiting.
    let count = http
        .post(clickhouse.url())
        .body("SELECT count(DISTINCT event_id) FROM jetcron.run_events")
        .send()
        .await
        .expect("ClickHouse answers")
        .text()
        .await
        .expect("count");
    assert_eq!(
        count.trim().parse::<usize>().expect("a number"),
        event_ids.len(),
        "run events in JETCRON_RUNS and in ClickHouse differ"
    );
}
