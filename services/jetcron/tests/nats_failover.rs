//! A jetcron connection's watch (`jetcron_io::nats_failover`) on a real
//! 3-node cluster whose nodes run in network namespaces: a node cut from
//! the other two while its clients stay connected is left within seconds,
//! because the connections on the other servers stop answering its hellos
//! (`jetcron_io::peer_reach`) — sooner than JetStream's silence could tell,
//! which a cut meta leader keeps answering for 10-20 s. A node that dies
//! instead moves nothing else: the others' connections go on answering.

use std::time::{Duration, Instant};

use jetcron_io::nats_failover::{Failover, PEERS_SILENT_AFTER};
use jetcron_testkit::{wait_until, NatsCluster, NatsServer};

/// A connection to any node of `cluster` with a watch of its own, as
/// every jetcron service connects.
async fn watched(cluster: &NatsCluster) -> (async_nats::Client, Failover) {
    let failover = Failover::default();
    let urls: Vec<String> = (0..cluster.len()).map(|i| cluster.node(i).url()).collect();
    let options = failover.apply(async_nats::ConnectOptions::new(), Duration::from_secs(2));
    let client = options.connect(urls.as_slice()).await.expect("connect");
    tokio::spawn({
        let (failover, client) = (failover.clone(), client.clone());
        async move { failover.watch(client).await }
    });
    (client, failover)
}

/// A connection to `node` only that answers hellos, as the connections of
/// other jetcron processes there do.
async fn answering(node: &NatsServer) {
    tokio::spawn(jetcron_io::peer_reach::answer(node.client().await));
}

fn server_of(client: &async_nats::Client) -> String {
    client.server_info().server_name
}

/// Wait until `failover`'s connection has heard a connection on another
/// server.
async fn hears_the_others(failover: &Failover) {
    let reach = failover.peer_reach();
    wait_until(
        "an answer from a connection on another server",
        Duration::from_secs(10),
        || async { reach.heard_within(Duration::from_millis(750)).then_some(()) },
    )
    .await;
    assert!(!reach.cut_off(Duration::from_millis(750)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_leaves_a_cut_off_server_once_the_others_stop_answering_and_not_for_a_dead_node(
) {
    let mut cluster = NatsCluster::start_partitionable(3)
        .await
        .expect("start a partitionable cluster (needs root)");
    for node in 0..cluster.len() {
        answering(cluster.node(node)).await;
    }
    let (client, failover) = watched(&cluster).await;
    let home_name = server_of(&client);
    let home: usize = home_name[1..].parse().expect("node names are n<index>");
    hears_the_others(&failover).await;

    // Another node dies: the third's connections answer on.
    let other = (home + 1) % cluster.len();
    cluster.kill(other);
    tokio::time::sleep(PEERS_SILENT_AFTER * 3).await;
    assert_eq!(
        server_of(&client),
        home_name,
        "the connection left a healthy server when another node died"
    );
    cluster.restart(other);
    answering(cluster.node(other)).await;
    hears_the_others(&failover).await;

    // Its node cut from the others, its clients still connected to it.
    let reach = failover.peer_reach();
    cluster.partition(home).expect("cut the connection's node");
    let cut = Instant::now();
    let saw_the_cut = wait_until(
        "the watch hearing no other server",
        Duration::from_secs(10),
        || async {
            reach
                .cut_off(Duration::from_millis(750))
                .then_some(cut.elapsed())
        },
    )
    .await;
    let moved_after = wait_until(
        "the connection on another server",
        Duration::from_secs(30),
        || async { (server_of(&client) != home_name).then_some(cut.elapsed()) },
    )
    .await;
    println!("cut seen after {saw_the_cut:?}, connection moved after {moved_after:?}");
    assert!(
        moved_after < PEERS_SILENT_AFTER + Duration::from_secs(3),
        "the connection left the cut server only after {moved_after:?}"
    );
    // From there the others answer again.
    hears_the_others(&failover).await;
    cluster.heal(home).expect("heal the cut node");
}
