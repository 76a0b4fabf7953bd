//! A real `clickhouse-server` on free ports with a throwaway data dir.
//!
//! The config is generated here, minimal and valid for Debian's 18.16 as well
//! as current releases (`<yandex>` root, which current servers still accept).
//!
//! [`ClickHouseServer::pause`] stops the process (SIGSTOP) the way a hung
//! server looks from outside: its port still takes connections (the kernel
//! completes the handshakes) and nothing answers.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

/// A running clickhouse-server; resumed if paused, killed and its data
/// removed on drop.
pub struct ClickHouseServer {
    child: Option<Child>,
    http_port: u16,
    dir: TempDir,
    paused: AtomicBool,
}

fn binary() -> PathBuf {
    super::find_binary(
        "JETCRON_CLICKHOUSE_SERVER",
        "clickhouse-server",
        &[
            PathBuf::from("/usr/sbin/clickhouse-server"),
            PathBuf::from("/usr/bin/clickhouse-server"),
        ],
    )
}

fn write_config(dir: &Path, http_port: u16, tcp_port: u16) -> PathBuf {
    let d = dir.display();
    let config = format!(
        r#"<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>{d}/server.log</log><errorlog>{d}/server.err.log</errorlog><console>0</console></logger>
  <http_port>{http_port}</http_port>
  <tcp_port>{tcp_port}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{d}/data/</path>
  <tmp_path>{d}/data/tmp/</tmp_path>
  <user_files_path>{d}/data/user_files/</user_files_path>
  <format_schema_path>{d}/data/format_schemas/</format_schema_path>
  <mark_cache_size>67108864</mark_cache_size>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <max_concurrent_queries>100</max_concurrent_queries>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
</yandex>
"#
    );
    let users = r#"<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default><readonly><readonly>1</readonly></readonly></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
"#;
    std::fs::write(dir.join("users.xml"), users).expect("write users.xml");
    let path = dir.join("config.xml");
    std::fs::write(&path, config).expect("write config.xml");
    path
}

/// Starts tried on other ports when the first one's port was taken.
const PORT_TRIES: usize = 5;

impl ClickHouseServer {
    /// Start on free ports and wait until `/ping` answers.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("jetcron-clickhouse-")
            .tempdir()
            .expect("create ClickHouse dir");
        let mut server = ClickHouseServer {
            child: None,
            http_port: super::free_port(),
            dir,
            paused: AtomicBool::new(false),
        };
        // A port found free can be taken by another test's process before
        // this one binds it: try again on other ports then.
        for _ in 0..PORT_TRIES {
            match server.try_spawn() {
                Ok(()) => return server,
                Err(log) if log.contains("Address already in use") => {
                    server.http_port = super::free_port();
                }
                Err(log) => panic!("clickhouse-server exited: {log}"),
            }
        }
        panic!("clickhouse-server found no free port in {PORT_TRIES} tries");
    }

    /// Start the process on `http_port` (and a fresh TCP port).
    fn spawn(&mut self) {
        if let Err(log) = self.try_spawn() {
            panic!("clickhouse-server exited: {log}");
        }
    }

    /// Start the process and wait for `/ping`; its exit status and error
    /// log when it exits first.
    fn try_spawn(&mut self) -> Result<(), String> {
        let config = write_config(self.dir.path(), self.http_port, super::free_port());
        let child = Command::new(binary())
            .arg(format!("--config-file={}", config.display()))
            .current_dir(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start clickhouse-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.ping() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                let log = std::fs::read_to_string(self.dir.path().join("server.err.log"))
                    .unwrap_or_default();
                // The next try appends to the same log: start it afresh.
                let _ = std::fs::remove_file(self.dir.path().join("server.err.log"));
                self.child = None;
                return Err(format!("{status}: {log}"));
            }
            assert!(
                Instant::now() < deadline,
                "clickhouse-server did not answer /ping within 30s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn ping(&self) -> bool {
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.http_port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        if stream.write_all(b"GET /ping HTTP/1.0\r\n\r\n").is_err() {
            return false;
        }
        let mut reply = String::new();
        let _ = stream.read_to_string(&mut reply);
        reply.ends_with("Ok.\n")
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stop the process (SIGSTOP): it keeps its port and answers nothing
    /// until [`Self::resume`].
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
        self.paused.store(true, Ordering::SeqCst);
    }

    /// Let a paused process go on (SIGCONT).
    pub fn resume(&self) {
        if self.paused.swap(false, Ordering::SeqCst) {
            self.signal(Signal::SIGCONT);
        }
    }

    fn signal(&self, signal: Signal) {
        let pid = self.pid().expect("clickhouse-server is running");
        kill(Pid::from_raw(pid as i32), signal)
            .unwrap_or_else(|e| panic!("{signal} clickhouse-server {pid}: {e}"));
    }

    /// Kill the process (SIGKILL), keeping its data.
    pub fn kill(&mut self) {
        // A stopped process dies of SIGKILL too; resumed first, it is a
        // plain process again for whatever looks at it meanwhile.
        if self.child.is_some() {
            self.resume();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start again on the same HTTP port with the same data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for ClickHouseServer {
    fn drop(&mut self) {
        self.kill();
    }
}
