//! An R1 deployment on a 3-node cluster (started with the default
//! `JETCRON_REPLICAS=1`) moved to R3 with `jetcron migrate --replicas 3`,
//! online: the jobs with their history, the ticker's progress and the due
//! events no executor took yet are all there afterwards, on three replicas,
//! every stream jetcron makes is R3, and a ticker, an executor and a
//! projector started with `JETCRON_REPLICAS=3` accept the topology (the
//! ticker refused it before the migration).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use async_nats::jetstream;
use futures::TryStreamExt as _;
use jetcron_core::subjects;
use jetcron_io::topology;
use jetcron_testkit::{wait_until, ClickHouseServer, JetcronProcess, NatsCluster};

fn jetcron() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_jetcron"))
}

/// `jetcron migrate <args>` against `urls`: (success, stdout + stderr).
fn migrate(urls: &str, args: &[&str]) -> (bool, String) {
    let output = std::process::Command::new(jetcron())
        .arg("migrate")
        .args(args)
        .env("JETCRON_NATS_URL", urls)
        .output()
        .expect("run jetcron migrate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// (replicas, messages, last sequence) of a stream.
async fn shape(js: &jetstream::Context, name: &str) -> (usize, u64, u64) {
    let mut stream = js.get_stream(name).await.expect("stream");
    let info = stream.info().await.expect("info");
    (
        info.config.num_replicas,
        info.state.messages,
        info.state.last_sequence,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_r1_deployment_moves_to_r3_online_keeping_jobs_progress_and_due_events() {
    let cluster = NatsCluster::start(3).await;
    let urls = cluster.urls();
    let js = jetstream::new(cluster.client().await);
    let clickhouse = ClickHouseServer::start();
    let clickhouse_url = clickhouse.url();
    // R1, as a deployment started without JETCRON_REPLICAS: a ticker, a
    // projector, an executor of another pool (so the default pool's due
    // events stay in JETCRON_DUE) and a gateway, jobs edited twice. Between them they
    // make every stream jetcron has.
    let r1: Vec<(&str, &str)> = vec![
        ("JETCRON_NATS_URL", urls.as_str()),
        ("JETCRON_CLICKHOUSE_URL", clickhouse_url.as_str()),
    ];
    let mut ticker = JetcronProcess::start(jetcron(), &["ticker"], &r1);
    let http_addr = format!("127.0.0.1:{}", jetcron_testkit::free_port());
    let others: Vec<JetcronProcess> = [
        &["projector"][..],
        &["executor", "--pool", "migration-other"][..],
        &["gateway", "--http-addr", &http_addr][..],
    ]
    .iter()
    .map(|args| JetcronProcess::start(jetcron(), args, &r1))
    .collect();
    let jobs = wait_until("the jobs bucket", Duration::from_secs(60), || {
        let js = js.clone();
        async move { js.get_key_value(subjects::JOBS_BUCKET).await.ok() }
    })
    .await;
    for i in 0..5 {
        for schedule in ["@every 1h", "* * * * * *"] {
            let body = format!(
                r#"{{"schedule":"{schedule}","target":{{"type":"nats","subject":"svc.m{i}"}}}}"#
            );
            jobs.put(format!("m{i}"), body.into())
                .await
                .expect("put job");
        }
    }
    wait_until("due events stored", Duration::from_secs(30), || {
        let js = js.clone();
        async move { (shape(&js, subjects::DUE_STREAM).await.1 >= 15).then_some(()) }
    })
    .await;
    // Every stream jetcron made is one `jetcron migrate` knows (and none
    // it knows is missing): a stream left out stays R1 and the services
    // that want R3 refuse it.
    let every_stream: BTreeSet<String> = topology::stream_names().into_iter().collect();
    let made = wait_until("every stream made", Duration::from_secs(60), || {
        let (js, every_stream) = (js.clone(), every_stream.clone());
        async move {
            let made: BTreeSet<String> = js.stream_names().try_collect().await.ok()?;
            every_stream.is_subset(&made).then_some(made)
        }
    })
    .await;
    assert_eq!(made, every_stream, "streams made against the migrated list");
    ticker.terminate();
    for mut process in others {
        process.terminate();
    }

    let streams = [
        format!("KV_{}", subjects::JOBS_BUCKET),
        format!("KV_{}", subjects::TICKER_BUCKET),
        subjects::DUE_STREAM.to_string(),
        subjects::RUNS_STREAM.to_string(),
    ];
    let mut before = Vec::new();
    for name in &streams {
        let (replicas, messages, last) = shape(&js, name).await;
        assert_eq!(replicas, 1, "{name} starts R1");
        before.push((messages, last));
    }
    let history_before = jobs.history("m0").await.expect("history");
    let ticker_progress_before: Vec<_> = {
        let kv = js
            .get_key_value(subjects::TICKER_BUCKET)
            .await
            .expect("ticker bucket");
        let mut values = Vec::new();
        for shard in 0..16 {
            if let Ok(Some(value)) = kv.get(format!("shard.{shard}")).await {
                values.push((shard, value));
            }
        }
        values
    };
    assert!(
        !ticker_progress_before.is_empty(),
        "the ticker recorded its progress"
    );

    // Processes that want R3 refuse the R1 topology, naming the way out.
    let r3: Vec<(&str, &str)> = vec![
        ("JETCRON_NATS_URL", urls.as_str()),
        ("JETCRON_REPLICAS", "3"),
        ("JETCRON_CLICKHOUSE_URL", clickhouse_url.as_str()),
    ];
    let mut refused = JetcronProcess::start(jetcron(), &["ticker"], &r3);
    let status = refused
        .wait_for_exit(Duration::from_secs(60))
        .expect("an R3 ticker on R1 streams exits");
    assert!(!status.success());
    assert!(
        refused.log().contains("jetcron migrate --replicas 3"),
        "{}",
        refused.log()
    );

    // A dry run changes nothing.
    let (ok, text) = migrate(&urls, &["--replicas", "3", "--dry-run"]);
    assert!(ok, "{text}");
    assert!(
        text.contains("JETCRON_DUE: R1 -> R3") && text.contains("dry run"),
        "{text}"
    );
    assert_eq!(shape(&js, subjects::DUE_STREAM).await.0, 1, "{text}");

    let (ok, text) = migrate(&urls, &["--replicas", "3"]);
    assert!(ok, "{text}");
    println!("{text}");
    for (name, (messages, last)) in streams.iter().zip(&before) {
        let (replicas, messages_after, last_after) = shape(&js, name).await;
        assert_eq!(replicas, 3, "{name}: {text}");
        assert_eq!(
            (messages_after, last_after),
            (*messages, *last),
            "{name} kept its messages and sequences"
        );
    }
    for name in &every_stream {
        assert_eq!(shape(&js, name).await.0, 3, "{name} is R3: {text}");
    }
    let jobs = js.get_key_value(subjects::JOBS_BUCKET).await.expect("jobs");
    let history_after = jobs.history("m0").await.expect("history");
    use futures::StreamExt as _;
    let revisions = |h: Vec<Result<jetstream::kv::Entry, _>>| -> Vec<(u64, Vec<u8>)> {
        h.into_iter()
            .map(|e| e.expect("entry"))
            .map(|e| (e.revision, e.value.to_vec()))
            .collect()
    };
    let before_entries = revisions(history_before.collect().await);
    let after_entries = revisions(history_after.collect().await);
    assert_eq!(before_entries.len(), 2, "two revisions of m0");
    assert_eq!(before_entries, after_entries, "job history kept");
    let kv = js
        .get_key_value(subjects::TICKER_BUCKET)
        .await
        .expect("ticker bucket");
    for (shard, value) in &ticker_progress_before {
        let now = kv.get(format!("shard.{shard}")).await.expect("read shard");
        assert_eq!(now.as_ref(), Some(value), "shard {shard} progress kept");
    }

    // Again: nothing to do. And an R3 ticker now starts and goes on firing,
    // beside an R3 executor and projector (the executor opens the alert
    // buckets too, the ticker its snapshot store).
    let (ok, text) = migrate(&urls, &["--replicas", "3"]);
    assert!(ok && text.contains("nothing to change"), "{text}");
    let mut others: Vec<JetcronProcess> = [
        &["projector"][..],
        &["executor", "--pool", "migration-other"][..],
    ]
    .iter()
    .map(|args| JetcronProcess::start(jetcron(), args, &r3))
    .collect();
    let mut ticker = JetcronProcess::start(jetcron(), &["ticker"], &r3);
    let due_before = shape(&js, subjects::DUE_STREAM).await.1;
    wait_until("the R3 ticker fires", Duration::from_secs(30), || {
        let js = js.clone();
        async move { (shape(&js, subjects::DUE_STREAM).await.1 >= due_before + 10).then_some(()) }
    })
    .await;
    assert!(ticker.is_running(), "{}", ticker.log());
    for process in std::iter::once(&mut ticker).chain(&mut others) {
        wait_until("an R3 process ready", Duration::from_secs(30), || {
            let ready = process.log().contains("ready: NATS topology verified");
            async move { ready.then_some(()) }
        })
        .await;
        assert!(process.is_running(), "{}", process.log());
        assert!(
            !process.log().contains("shard snapshots off"),
            "{}",
            process.log()
        );
    }
    ticker.terminate();
    for process in &mut others {
        process.terminate();
    }

    // Copying from a standalone server is refused with where to read on.
    let (ok, text) = migrate(&urls, &["--replicas", "3", "--from", "nats://127.0.0.1:1"]);
    assert!(!ok && text.contains("From one node to three"), "{text}");
}
