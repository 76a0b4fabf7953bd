//! A real NATS cluster: `n` nats-server processes with JetStream, each on a
//! free client port and a free route port, every node listing every route.
//!
//! Nodes are [`NatsServer`]s, so each can be SIGKILLed and restarted on its
//! own store ([`NatsCluster::kill`], [`NatsCluster::restart`]) while the
//! others keep the cluster going; dropping the cluster kills them all and
//! removes their stores. Server names are `n0`, `n1`, …, which is how
//! JetStream names a stream's leader ([`NatsCluster::stream_leader`]).
//!
//! The faults of issue 39 beyond crashes: any node can be paused and resumed
//! ([`NatsCluster::pause`], a hung server), and a cluster started with
//! [`NatsCluster::start_partitionable`] runs each node in a network
//! namespace of its own, so that a node can be cut from the other nodes
//! ([`NatsCluster::partition`]) while every client keeps its connection to
//! it — the minority side of a split, still serving its clients what it can.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream;

use crate::cluster_network::ClusterNetwork;
use crate::NatsServer;

/// The cluster name every node is configured with.
pub const CLUSTER_NAME: &str = "jetcron-test";

/// The route port of a node in a namespace of its own (nothing else there).
const NAMESPACED_ROUTE_PORT: u16 = 6222;

/// `n` routed nats-server nodes with JetStream.
pub struct NatsCluster {
    /// Declared before `network`: fields drop in order, so the servers are
    /// killed before their namespaces are removed.
    nodes: Vec<NatsServer>,
    /// The namespaces and bridge of a partitionable cluster.
    network: Option<ClusterNetwork>,
}

impl NatsCluster {
    /// Start `size` nodes and wait until JetStream has a meta leader.
    pub async fn start(size: usize) -> Self {
        let cluster = Self::start_without_waiting(size);
        cluster.wait_for_jetstream(Duration::from_secs(30)).await;
        cluster
    }

    /// Start `size` nodes without waiting for JetStream to be usable (a
    /// cluster still electing, as processes that start with it see it).
    pub fn start_without_waiting(size: usize) -> Self {
        let route_addresses: Vec<(Ipv4Addr, u16)> = (0..size)
            .map(|_| (Ipv4Addr::LOCALHOST, crate::free_port()))
            .collect();
        let nodes = (0..size)
            .map(|index| NatsServer::start_with_config(&node_config(index, &route_addresses)))
            .collect();
        Self {
            nodes,
            network: None,
        }
    }

    /// Start `size` nodes, each in a network namespace of its own on an
    /// address of a private bridge, and wait until JetStream has a meta
    /// leader. Clients (and jetcron processes) of this process reach every
    /// node at its [`NatsServer::url`]; [`NatsCluster::partition`] cuts one
    /// node from the others without touching them. Everything else works
    /// as on [`NatsCluster::start`].
    ///
    /// Fails when the network cannot be built: namespaces need root.
    pub async fn start_partitionable(size: usize) -> anyhow::Result<Self> {
        let network = ClusterNetwork::create(size)?;
        let route_addresses: Vec<(Ipv4Addr, u16)> = (0..size)
            .map(|index| (network.address(index), NAMESPACED_ROUTE_PORT))
            .collect();
        let nodes = (0..size)
            .map(|index| {
                NatsServer::start_in_namespace(
                    &node_config(index, &route_addresses),
                    &network.namespace(index),
                    network.address(index),
                )
            })
            .collect();
        let cluster = Self {
            nodes,
            network: Some(network),
        };
        cluster.wait_for_jetstream(Duration::from_secs(30)).await;
        Ok(cluster)
    }

    /// Every node's client URL, comma separated (what `--nats-url` takes).
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn node(&self, index: usize) -> &NatsServer {
        &self.nodes[index]
    }

    /// SIGKILL node `index`, keeping its store.
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
    }

    /// Start node `index` again on its port and store.
    pub fn restart(&mut self, index: usize) {
        self.nodes[index].restart();
    }

    /// Freeze node `index` (SIGSTOP), see [`NatsServer::pause`].
    pub fn pause(&self, index: usize) {
        self.nodes[index].pause();
    }

    /// Thaw node `index` (SIGCONT).
    pub fn resume(&self, index: usize) {
        self.nodes[index].resume();
    }

    /// Cut node `index` from every other node, both ways, by dropping their
    /// packets silently; clients keep their connections to it. The majority
    /// elects new leaders for what the node led once raft heartbeats stop;
    /// the node's raft groups lose quorum and its JetStream requests go
    /// unanswered. Several nodes may be cut at once, each from all others.
    /// Only on a cluster from [`NatsCluster::start_partitionable`].
    pub fn partition(&self, index: usize) -> anyhow::Result<()> {
        self.network()?.isolate(index)
    }

    /// Undo [`NatsCluster::partition`] of node `index`: its routes' TCP
    /// connections resume (or reconnect) and it catches up.
    pub fn heal(&self, index: usize) -> anyhow::Result<()> {
        self.network()?.reconnect(index)
    }

    fn network(&self) -> anyhow::Result<&ClusterNetwork> {
        self.network
            .as_ref()
            .context("only a cluster from NatsCluster::start_partitionable can be partitioned")
    }

    /// A client that may use every node (and moves on when one dies).
    pub async fn client(&self) -> async_nats::Client {
        let urls: Vec<String> = self.nodes.iter().map(NatsServer::url).collect();
        let mut last = None;
        for _ in 0..40 {
            match async_nats::ConnectOptions::new()
                .retry_on_initial_connect()
                .connect(urls.as_slice())
                .await
            {
                Ok(client) => return client,
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("connect to test NATS cluster: {last:?}")
    }

    /// Wait until the JetStream API answers through any node.
    pub async fn wait_for_jetstream(&self, timeout: Duration) {
        let js = jetstream::new(self.client().await);
        let deadline = Instant::now() + timeout;
        loop {
            match js.query_account().await {
                Ok(_) => return,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "JetStream of the test cluster not ready within {timeout:?}: {e}\n{}",
                    self.logs_tail()
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Index of the node leading `stream`'s raft group, if it has a leader
    /// now (asked through `js`, a client of a cluster started here).
    pub async fn stream_leader(js: &jetstream::Context, stream: &str) -> Option<usize> {
        let mut handle = js.get_stream(stream).await.ok()?;
        let info = handle.info().await.ok()?;
        let leader = info.cluster.as_ref()?.leader.clone()?;
        leader.strip_prefix('n')?.parse().ok()
    }

    /// Wait until every stream has a leader and all its replicas are
    /// current and online, asked through node `through`: a healed or
    /// restarted node has caught up, and the cluster can lose another.
    /// (A cut node's routes come back with TCP's retransmission backoff,
    /// up to 20 s after the heal: a node hung meanwhile left one of three,
    /// and every stream waited for the hung one.) Returns how long it took.
    pub async fn wait_until_whole(&self, through: usize, timeout: Duration) -> Duration {
        let began = Instant::now();
        let js = jetstream::new(self.node(through).client().await);
        crate::wait_until("every stream's replicas current", timeout, || async {
            Self::every_replica_current(&js).await.then_some(())
        })
        .await;
        began.elapsed()
    }

    async fn every_replica_current(js: &jetstream::Context) -> bool {
        use futures::TryStreamExt as _;
        let Ok(names) = js.stream_names().try_collect::<Vec<String>>().await else {
            return false;
        };
        for name in names {
            let Ok(mut stream) = js.get_stream(&name).await else {
                return false;
            };
            let Ok(info) = stream.info().await else {
                return false;
            };
            let Some(cluster) = &info.cluster else {
                return false;
            };
            let current = cluster.leader.is_some()
                && cluster.replicas.iter().all(|r| r.current && !r.offline);
            if !current {
                return false;
            }
        }
        true
    }

    /// The last lines of every node's log, for failure messages.
    pub fn logs_tail(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(index, node)| {
                let log = node.log();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                format!("--- n{index} ---\n{tail}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The configuration of node `index` of a cluster whose nodes take routes
/// at `route_addresses`, with the route pings docs/operations.md asks for
/// (a silent route dropped within about 3 s, not 2 minutes x 2).
fn node_config(index: usize, route_addresses: &[(Ipv4Addr, u16)]) -> String {
    let (host, port) = route_addresses[index];
    let routes: Vec<String> = route_addresses
        .iter()
        .map(|(host, port)| format!("nats-route://{host}:{port}"))
        .collect();
    format!(
        "server_name: n{index}\n\
         cluster {{\n  name: {CLUSTER_NAME}\n  listen: {host}:{port}\n  ping_interval: \"1s\"\n  ping_max: 3\n  routes: [{}]\n}}\n",
        routes.join(", ")
    )
}
