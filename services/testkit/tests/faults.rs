//! The fault menu of issue 39, tried on real processes: stalls (SIGSTOP),
//! partitions (a node cut from its peers, its clients still connected) and
//! skewed clocks (libfaketime). Each test says what the fault looks like
//! from outside, so that the tests of jetcron built on them can rely on it.
//!
//! The timings they print (`--no-capture`) say how long a partitioned or
//! paused node takes to lose its stream to the majority (6-8 s here), how
//! long a cut leader keeps naming itself leader to its own clients (20 s),
//! and how long a healed node takes to serve again (0.2-20 s: its routes'
//! TCP retransmissions back off while the partition lasts).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, stream};
use jetcron_testkit::{faketime_env, wait_until, JetcronProcess, NatsCluster, NatsServer};

const STREAM: &str = "FAULTS";

/// JetStream through `client`, giving up on any request after 2 s.
fn impatient_jetstream(client: async_nats::Client) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(client)
}

/// An R3 stream on `cluster`, and the node leading it once every replica
/// is current.
async fn replicated_stream(cluster: &NatsCluster) -> usize {
    let js = impatient_jetstream(cluster.client().await);
    js.create_stream(stream::Config {
        name: STREAM.into(),
        subjects: vec!["faults.>".into()],
        num_replicas: 3,
        ..Default::default()
    })
    .await
    .expect("create the R3 stream");
    wait_until(
        "the R3 stream led, all replicas current",
        Duration::from_secs(20),
        || settled_leader(&js),
    )
    .await
}

/// The stream's leader, if it has one and every other replica is current.
async fn settled_leader(js: &jetstream::Context) -> Option<usize> {
    let info = js.get_stream(STREAM).await.ok()?.info().await.ok()?.clone();
    let cluster = info.cluster?;
    let all_current = cluster.replicas.len() == 2
        && cluster
            .replicas
            .iter()
            .all(|peer| peer.current && !peer.offline);
    let leader = cluster.leader?.strip_prefix('n')?.parse().ok()?;
    all_current.then_some(leader)
}

/// A leader of the stream other than `former`, as `js` sees it.
async fn leader_other_than(js: &jetstream::Context, former: usize) -> Option<usize> {
    NatsCluster::stream_leader(js, STREAM)
        .await
        .filter(|&leader| leader != former)
}

/// Whether a message published through `js` is acknowledged (stored on a
/// quorum).
async fn publish_is_acked(js: &jetstream::Context, subject: &str) -> bool {
    match js.publish(subject.to_string(), "fault".into()).await {
        Ok(ack) => ack.await.is_ok(),
        Err(_) => false,
    }
}

/// Whether the server of `client` itself answers within a second: a
/// request nobody subscribes to gets its "no responders" status from the
/// server the client is connected to (a flush would not leave the client).
async fn server_answers(client: &async_nats::Client) -> bool {
    let request = client.request("nobody.listens", "ping".into());
    match tokio::time::timeout(Duration::from_secs(1), request).await {
        Ok(Err(e)) => e.kind() == async_nats::client::RequestErrorKind::NoResponders,
        _ => false,
    }
}

#[tokio::test]
async fn a_paused_server_answers_nothing_until_resumed() {
    let server = NatsServer::start();
    let responder = server.client().await;
    let mut requests = responder.subscribe("echo").await.expect("subscribe");
    tokio::spawn(async move {
        use futures::StreamExt as _;
        while let Some(request) = requests.next().await {
            if let Some(reply) = request.reply {
                let _ = responder.publish(reply, request.payload).await;
            }
        }
    });
    let requester = server.client().await;
    let ask = || async {
        let request = requester.request("echo", "ping".into());
        matches!(
            tokio::time::timeout(Duration::from_secs(1), request).await,
            Ok(Ok(_))
        )
    };
    assert!(ask().await, "answered before the pause");

    server.pause();
    assert!(server.is_paused());
    assert!(!ask().await, "a paused server answered");
    assert!(
        !server_answers(&requester).await,
        "a paused server answered"
    );

    server.resume();
    assert!(!server.is_paused());
    wait_until(
        "an answer after resume",
        Duration::from_secs(10),
        || async { ask().await.then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn a_paused_process_is_terminated_and_dropped_without_hanging() {
    // A shell that exits on SIGTERM only once it runs again: a stopped
    // process keeps the SIGTERM pending (as a jetcron service would).
    let shell = Path::new("/bin/sh");
    let script = "trap 'exit 0' TERM; echo trapping >&2; while true; do sleep 0.1; done";
    let mut process = JetcronProcess::start(shell, &["-c", script], &[]);
    wait_until("the TERM trap set", Duration::from_secs(10), || async {
        process.log().contains("trapping").then_some(())
    })
    .await;
    process.pause();
    assert!(process.is_paused());
    process.resume();
    assert!(!process.is_paused());
    process.pause();
    let status = process.terminate().expect("terminated while paused");
    assert!(status.success(), "the TERM trap ran: {status}");

    let mut process = JetcronProcess::start(shell, &["-c", script], &[]);
    process.pause();
    process.kill_9();
    assert!(!process.is_running());
    process.restart();
    process.pause();
    drop(process);
}

#[tokio::test]
async fn a_partitioned_node_loses_its_stream_to_the_majority_and_catches_up_after_heal() {
    let cluster = NatsCluster::start_partitionable(3)
        .await
        .expect("start a partitionable cluster");
    let cut = replicated_stream(&cluster).await;
    let majority = (cut + 1) % 3;
    let cut_client = cluster.node(cut).client().await;
    let cut_js = impatient_jetstream(cut_client.clone());
    let majority_js = impatient_jetstream(cluster.node(majority).client().await);
    assert!(publish_is_acked(&cut_js, "faults.before").await);

    let partitioned = Instant::now();
    cluster.partition(cut).expect("partition the leader");
    let successor = wait_until(
        "a stream leader on the majority side",
        Duration::from_secs(30),
        || leader_other_than(&majority_js, cut),
    )
    .await;
    let elected_after = partitioned.elapsed();
    assert!(publish_is_acked(&majority_js, "faults.during").await);
    assert!(
        server_answers(&cut_client).await,
        "the cut node's client lost its connection"
    );
    assert!(
        !publish_is_acked(&cut_js, "faults.cut").await,
        "the cut node acknowledged a message without a quorum"
    );

    cluster.heal(cut).expect("heal");
    let healed = Instant::now();
    wait_until(
        "the cut node's client publishing again",
        Duration::from_secs(40),
        || async {
            publish_is_acked(&cut_js, "faults.after")
                .await
                .then_some(())
        },
    )
    .await;
    let serving_after = healed.elapsed();
    wait_until(
        "every replica current after the heal",
        Duration::from_secs(30),
        || settled_leader(&majority_js),
    )
    .await;
    eprintln!(
        "partition of n{cut}: n{successor} elected after {elected_after:?}; \
         the cut node's client published again {serving_after:?} after the heal, \
         all replicas current {:?} after it",
        healed.elapsed()
    );
}

#[tokio::test]
async fn a_partitioned_leader_claims_its_stream_until_it_sees_it_lost_quorum() {
    let cluster = NatsCluster::start_partitionable(3)
        .await
        .expect("start a partitionable cluster");
    let cut = replicated_stream(&cluster).await;
    let cut_js = impatient_jetstream(cluster.node(cut).client().await);

    let partitioned = Instant::now();
    cluster.partition(cut).expect("partition the leader");
    // Until then the cut node answers stream info itself, naming itself
    // leader: what its clients read meanwhile may be stale.
    wait_until(
        "the cut node no longer naming itself leader",
        Duration::from_secs(45),
        || async {
            let seen = NatsCluster::stream_leader(&cut_js, STREAM).await;
            (seen != Some(cut)).then_some(())
        },
    )
    .await;
    eprintln!(
        "partition of n{cut}: the cut node stopped naming itself leader after {:?}",
        partitioned.elapsed()
    );
}

#[tokio::test]
async fn a_paused_node_loses_its_stream_and_catches_up_after_resume() {
    let mut cluster = NatsCluster::start_partitionable(3)
        .await
        .expect("start a partitionable cluster");
    let hung = replicated_stream(&cluster).await;
    let hung_client = cluster.node(hung).client().await;
    let hung_js = impatient_jetstream(hung_client.clone());
    let majority_js = impatient_jetstream(cluster.node((hung + 1) % 3).client().await);

    let paused = Instant::now();
    cluster.pause(hung);
    assert!(cluster.node(hung).is_paused());
    assert!(
        !server_answers(&hung_client).await,
        "a paused node answered"
    );
    let successor = wait_until(
        "a stream leader other than the paused node",
        Duration::from_secs(30),
        || leader_other_than(&majority_js, hung),
    )
    .await;
    let elected_after = paused.elapsed();
    assert!(publish_is_acked(&majority_js, "faults.during").await);

    cluster.resume(hung);
    let resumed = Instant::now();
    wait_until(
        "the resumed node's client publishing again",
        Duration::from_secs(30),
        || async {
            publish_is_acked(&hung_js, "faults.after")
                .await
                .then_some(())
        },
    )
    .await;
    eprintln!(
        "pause of n{hung}: n{successor} elected after {elected_after:?}; \
         the paused node's client published again {:?} after the resume",
        resumed.elapsed()
    );

    // Killed while paused, restarted in its namespace on its store.
    cluster.pause(hung);
    cluster.kill(hung);
    cluster.restart(hung);
    wait_until(
        "the restarted node's client publishing",
        Duration::from_secs(30),
        || async {
            let js = impatient_jetstream(cluster.node(hung).client().await);
            publish_is_acked(&js, "faults.restarted")
                .await
                .then_some(())
        },
    )
    .await;
}

#[test]
fn faketime_env_shifts_the_wall_clock_of_date() {
    for offset in [3600, -3600] {
        let skew = faketime_env(offset).expect("libfaketime installed");
        let skewed: i64 = date_seconds(&skew);
        let real: i64 = date_seconds(&[]);
        let seen = skewed - real;
        assert!(
            (seen - offset).abs() <= 2,
            "date under FAKETIME {offset:+}: off by {seen} s"
        );
    }
}

fn date_seconds(env: &[(String, String)]) -> i64 {
    let output = std::process::Command::new("date")
        .arg("+%s")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run date");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("date +%s prints seconds")
}

/// Run in a child process by the test below, under libfaketime: prints this
/// process's wall and monotonic clocks to stderr, as seen by Rust's std.
#[test]
#[ignore = "a child of faketime_env_shifts_rust_wall_clock_but_not_monotonic"]
fn report_clocks() {
    let wall = wall_seconds();
    let monotonic = monotonic_seconds();
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(200));
    let slept = started.elapsed().as_secs_f64();
    eprintln!("clocks: wall={wall} monotonic={monotonic} slept={slept}");
}

fn wall_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

fn monotonic_seconds() -> f64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("monotonic");
    now.tv_sec() as f64 + now.tv_nsec() as f64 / 1e9
}

#[test]
fn faketime_env_shifts_rust_wall_clock_but_not_monotonic() {
    let offset = -90;
    let skew = faketime_env(offset).expect("libfaketime installed");
    let env: Vec<(&str, &str)> = skew.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let test_binary = std::env::current_exe().expect("this test binary");
    let real_wall_before = wall_seconds();
    let monotonic_before = monotonic_seconds();
    let mut child = JetcronProcess::start(
        &test_binary,
        &["--exact", "report_clocks", "--ignored", "--nocapture"],
        &env,
    );
    let status = child
        .wait_for_exit(Duration::from_secs(30))
        .expect("child exits");
    assert!(status.success(), "{}", child.log());
    let monotonic_after = monotonic_seconds();
    let log = child.log();
    let report = log
        .lines()
        .find_map(|line| line.strip_prefix("clocks: "))
        .unwrap_or_else(|| panic!("no clock report in:\n{log}"));
    let field = |name: &str| -> f64 {
        report
            .split_whitespace()
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {report}"))
    };
    let shift = field("wall") - real_wall_before;
    assert!(
        (shift - offset as f64).abs() <= 5.0,
        "SystemTime::now() under FAKETIME {offset:+} was {shift:.1} s off"
    );
    let monotonic = field("monotonic");
    assert!(
        (monotonic_before..=monotonic_after).contains(&monotonic),
        "CLOCK_MONOTONIC moved: {monotonic} not in {monotonic_before}..={monotonic_after}"
    );
    let slept = field("slept");
    assert!(
        (0.19..2.0).contains(&slept),
        "Instant measured a 200 ms sleep as {slept} s"
    );
}

/// How long a client with default options takes to notice that its server
/// hung: its request times out after 10 s, but the connection is declared
/// lost only after the pings of 60 s go unanswered (180 s here). The
/// "connected" event of the first connection is printed as it arrives.
#[tokio::test]
#[ignore = "measures minutes of default client pings; run by hand with --no-capture"]
async fn a_paused_server_is_noticed_by_a_default_client_after_its_pings() {
    let server = NatsServer::start();
    let (events, mut noticed) = tokio::sync::mpsc::unbounded_channel();
    let client = async_nats::ConnectOptions::new()
        .event_callback(move |event| {
            let events = events.clone();
            async move {
                let _ = events.send(event.to_string());
            }
        })
        .connect(server.url())
        .await
        .expect("connect");
    let paused = Instant::now();
    server.pause();
    let request = client.request("nobody.listens", "ping".into()).await;
    eprintln!(
        "default request to the paused server: {:?} after {:?}",
        request.err().map(|e| e.kind()),
        paused.elapsed()
    );
    while let Some(event) = noticed.recv().await {
        eprintln!("client event {event:?} after {:?}", paused.elapsed());
        if event == "disconnected" {
            break;
        }
    }
    server.resume();
}
