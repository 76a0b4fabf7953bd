//! A real `nats-server` with JetStream on a free port, optionally with a
//! configuration file (users and permissions, TLS) written by the test.
//!
//! A node of a partitionable [`crate::NatsCluster`] runs inside a network
//! namespace of its own (`ip netns exec`) and listens on that namespace's
//! address instead of 127.0.0.1; everything else is the same.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A running nats-server; killed and its store removed on drop.
pub struct NatsServer {
    child: Option<Child>,
    /// The address clients and routes reach it on: 127.0.0.1, or its
    /// namespace's address.
    host: Ipv4Addr,
    port: u16,
    /// The network namespace it runs in (`None`: this process's own).
    namespace: Option<String>,
    store: TempDir,
    /// Configuration file passed with `-c`, if the server was started with one.
    config: Option<PathBuf>,
    /// Extra environment of the process (`$VAR` references in the configuration).
    env: Vec<(String, String)>,
}

fn binary() -> PathBuf {
    let scripts = Command::new("python3")
        .args([
            "-c",
            "import sysconfig;print(sysconfig.get_path('scripts'))",
        ])
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("nats-server"));
    super::find_binary(
        "JETCRON_NATS_SERVER",
        "nats-server",
        &scripts.into_iter().collect::<Vec<_>>(),
    )
}

impl NatsServer {
    /// Start on a free port and wait until it accepts connections.
    pub fn start() -> Self {
        Self::start_inner(None, &[])
    }

    /// Start with `config` (nats-server configuration text: `authorization`,
    /// `tls`, …) on a free port. The listen address, port, JetStream and its
    /// store are those of [`NatsServer::start`]: the command line overrides
    /// the file. Panics with the server's log if it does not start.
    pub fn start_with_config(config: &str) -> Self {
        Self::start_inner(Some(config), &[])
    }

    /// [`NatsServer::start_with_config`] with `env` added to the server's
    /// environment, for the `$VARIABLE` references of the configuration.
    pub fn start_with_config_env(config: &str, env: &[(&str, &str)]) -> Self {
        Self::start_inner(Some(config), env)
    }

    /// [`NatsServer::start_with_config`] inside network namespace
    /// `namespace`, listening on `host` (an address of that namespace).
    pub(crate) fn start_in_namespace(config: &str, namespace: &str, host: Ipv4Addr) -> Self {
        let mut server = Self::unstarted(Some(config), &[]);
        server.host = host;
        server.namespace = Some(namespace.to_string());
        server.spawn();
        server
    }

    fn start_inner(config: Option<&str>, env: &[(&str, &str)]) -> Self {
        let mut server = Self::unstarted(config, env);
        server.spawn();
        server
    }

    fn unstarted(config: Option<&str>, env: &[(&str, &str)]) -> Self {
        let store = tempfile::Builder::new()
            .prefix("jetcron-nats-")
            .tempdir()
            .expect("create NATS store dir");
        let config = config.map(|text| {
            let path = store.path().join("server.conf");
            std::fs::write(&path, text).expect("write nats-server config");
            path
        });
        NatsServer {
            child: None,
            host: Ipv4Addr::LOCALHOST,
            port: super::free_port(),
            namespace: None,
            store,
            config,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn spawn(&mut self) {
        let log =
            std::fs::File::create(self.store.path().join("server.log")).expect("create NATS log");
        let mut command = self.launcher();
        if let Some(config) = &self.config {
            command.arg("-c").arg(config);
        }
        let child = command
            .args(["-js", "-a"])
            .arg(self.host.to_string())
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-sd")
            .arg(self.store.path().join("js"))
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        if self.config.is_some() {
            self.wait_for_listening(Duration::from_secs(15));
        } else {
            wait_for_port(self.port, Duration::from_secs(15), "nats-server");
        }
        if self.namespace.is_some() {
            self.check_pid_is_the_server();
        }
    }

    /// `nats-server`, or `ip netns exec <namespace> nats-server`: iproute2
    /// execs the server in place of itself, so the child's pid is the
    /// server's and signals reach it.
    fn launcher(&self) -> Command {
        match &self.namespace {
            None => Command::new(binary()),
            Some(namespace) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", namespace]).arg(binary());
                command
            }
        }
    }

    /// Panic unless the pid held is nats-server's own (not an `ip` that
    /// forked it), so that kill, pause and resume reach the server.
    fn check_pid_is_the_server(&self) {
        let pid = self.pid().expect("nats-server started");
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        let server = binary().canonicalize().unwrap_or_else(|_| binary());
        assert_eq!(
            exe, server,
            "pid {pid} started by `ip netns exec` is not nats-server's own"
        );
    }

    /// Like [`wait_for_port`], but a server that exits (a configuration it
    /// refuses) fails the test at once, with its log.
    fn wait_for_listening(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while std::net::TcpStream::connect((self.host, self.port)).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                panic!(
                    "nats-server exited ({status}) before listening:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "nats-server did not open port {} within {timeout:?}:\n{}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `nats://127.0.0.1:<port>` (a partitionable cluster's node: its
    /// namespace's address instead of 127.0.0.1).
    pub fn url(&self) -> String {
        format!("nats://{}:{}", self.host, self.port)
    }

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// What the server logged so far (permission violations, TLS errors, …).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.store.path().join("server.log")).unwrap_or_default()
    }

    /// The permission violations the server logged (a role refused
    /// something), one line each.
    pub fn permission_violations(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains("Violation"))
            .map(str::to_string)
            .collect()
    }

    /// The server's temporary directory (store, log, configuration), removed
    /// on drop; a test may keep its own files there (certificates, keys).
    pub fn dir(&self) -> &Path {
        self.store.path()
    }

    /// A new client connection (retried briefly: a loaded machine can be slow
    /// to send the first INFO).
    pub async fn client(&self) -> async_nats::Client {
        let mut last = None;
        for _ in 0..20 {
            match async_nats::connect(self.url()).await {
                Ok(client) => return client,
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
        panic!("connect to test nats-server: {last:?}")
    }

    /// Freeze the server (SIGSTOP) until [`NatsServer::resume`]: a hung
    /// server whose TCP connections stay open. Its clients' requests go
    /// unanswered and their pings unponged, so they notice only after their
    /// own ping interval or request timeout; routed peers treat it as gone
    /// once their raft heartbeats time out. Returns once every thread is
    /// stopped. Panics when the server does not run.
    pub fn pause(&self) {
        crate::stall::pause(self.running_pid("pause"), "nats-server");
    }

    /// Thaw a paused server (SIGCONT): it reads what queued up meanwhile.
    pub fn resume(&self) {
        crate::stall::resume(self.running_pid("resume"), "nats-server");
    }

    /// Whether the server is paused now.
    pub fn is_paused(&self) -> bool {
        self.pid().is_some_and(crate::stall::is_paused)
    }

    fn running_pid(&self, action: &str) -> u32 {
        self.pid()
            .unwrap_or_else(|| panic!("{action}: nats-server on port {} is not running", self.port))
    }

    /// Kill the process (SIGKILL), keeping its store. Works on a paused
    /// server too.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start again on the same port with the same store (and configuration).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Block until `port` on 127.0.0.1 accepts TCP connections.
pub(crate) fn wait_for_port(port: u16, timeout: Duration, what: &str) {
    let deadline = Instant::now() + timeout;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not open port {port} within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
