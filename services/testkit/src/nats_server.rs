//! A real `nats-server` with JetStream on a free port.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A running nats-server; killed and its store removed on drop.
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    store: TempDir,
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
        let store = tempfile::Builder::new()
            .prefix("jetcron-nats-")
            .tempdir()
            .expect("create NATS store dir");
        let mut server = NatsServer {
            child: None,
            port: super::free_port(),
            store,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let log =
            std::fs::File::create(self.store.path().join("server.log")).expect("create NATS log");
        let child = Command::new(binary())
            .args(["-js", "-a", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .arg("-sd")
            .arg(self.store.path().join("js"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        wait_for_port(self.port, Duration::from_secs(15), "nats-server");
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A new client connection.
    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(self.url())
            .await
            .expect("connect to test nats-server")
    }

    /// Kill the process (SIGKILL), keeping its store.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start again on the same port with the same store.
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
