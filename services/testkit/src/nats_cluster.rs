//! A real NATS cluster: `n` nats-server processes with JetStream, each on a
//! free client port and a free route port, every node listing every route.
//!
//! Nodes are [`NatsServer`]s, so each can be SIGKILLed and restarted on its
//! own store ([`NatsCluster::kill`], [`NatsCluster::restart`]) while the
//! others keep the cluster going; dropping the cluster kills them all and
//! removes their stores. Server names are `n0`, `n1`, …, which is how
//! JetStream names a stream's leader ([`NatsCluster::stream_leader`]).

use std::time::{Duration, Instant};

use async_nats::jetstream;

use crate::NatsServer;

/// The cluster name every node is configured with.
pub const CLUSTER_NAME: &str = "jetcron-test";

/// `n` routed nats-server nodes with JetStream.
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
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
        let route_ports: Vec<u16> = (0..size).map(|_| crate::free_port()).collect();
        let routes: Vec<String> = route_ports
            .iter()
            .map(|port| format!("nats-route://127.0.0.1:{port}"))
            .collect();
        let nodes = route_ports
            .iter()
            .enumerate()
            .map(|(index, port)| {
                NatsServer::start_with_config(&format!(
                    "server_name: n{index}\n\
                     cluster {{\n  name: {CLUSTER_NAME}\n  listen: 127.0.0.1:{port}\n  routes: [{}]\n}}\n",
                    routes.join(", ")
                ))
            })
            .collect();
        Self { nodes }
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
