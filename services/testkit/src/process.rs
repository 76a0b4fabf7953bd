//! A `jetcron` subcommand as a separate OS process, the way operators run
//! the services: SIGKILL it, SIGTERM it, start it again with the same
//! command line, read what it logged. Killed and its log removed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// One `jetcron …` process (the binary is the test's `CARGO_BIN_EXE_jetcron`).
pub struct JetcronProcess {
    binary: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
    log: tempfile::NamedTempFile,
    starts: u32,
}

impl JetcronProcess {
    /// Start `binary args…` with `env` added (`RUST_LOG` defaults to info).
    pub fn start(binary: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut process = Self {
            binary: binary.to_path_buf(),
            args: args.iter().map(ToString::to_string).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            child: None,
            log: tempfile::Builder::new()
                .prefix("jetcron-process-")
                .suffix(".log")
                .tempfile()
                .expect("process log file"),
            starts: 0,
        };
        process.spawn();
        process
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.log.path())
            .expect("open process log");
        let mut command = Command::new(&self.binary);
        command
            .args(&self.args)
            .env("RUST_LOG", "info,async_nats=warn")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.child = Some(command.spawn().expect("start jetcron process"));
        self.starts += 1;
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL (nothing is flushed, nothing released). Works on a paused
    /// process too.
    pub fn kill_9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for the exit. A paused process is continued after
    /// the SIGTERM, which it could not handle while stopped.
    pub fn terminate(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        crate::stall::continue_quietly(child.id());
        child.wait().ok()
    }

    /// Freeze the process (SIGSTOP) until [`JetcronProcess::resume`]: a
    /// stall — a long pause, a frozen VM — with its connections left open,
    /// so NATS sees a consumer that stops acking and a lease holder that
    /// stops renewing, not one that left. Returns once every thread is
    /// stopped. Panics when the process does not run.
    pub fn pause(&self) {
        crate::stall::pause(self.running_pid("pause"), "jetcron process");
    }

    /// Thaw a paused process (SIGCONT); it carries on from where it stopped,
    /// its clocks having moved on meanwhile.
    pub fn resume(&self) {
        crate::stall::resume(self.running_pid("resume"), "jetcron process");
    }

    /// Whether the process is paused now.
    pub fn is_paused(&self) -> bool {
        self.pid().is_some_and(crate::stall::is_paused)
    }

    fn running_pid(&self, action: &str) -> u32 {
        self.pid()
            .unwrap_or_else(|| panic!("{action}: the jetcron process is not running"))
    }

    /// Start again with the same command line (after a kill or an exit).
    pub fn restart(&mut self) {
        self.kill_9();
        self.spawn();
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// Wait up to `timeout` for the process to exit on its own.
    pub fn wait_for_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Everything the process wrote to stderr (its log), over all its starts.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// How many times it was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }
}

impl Drop for JetcronProcess {
    fn drop(&mut self) {
        self.kill_9();
    }
}

/// The number `field=` holds on the last line of `log` that says
/// `message` (colour codes or not); `None` when no such line names it.
pub fn last_logged_number(log: &str, message: &str, field: &str) -> Option<usize> {
    let log = without_colour_codes(log);
    let line = log.lines().rev().find(|line| line.contains(message))?;
    let start = line.find(&format!(" {field}="))? + field.len() + 2;
    line[start..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A log (of a [`JetcronProcess`], say) without its terminal colour codes.
pub fn without_colour_codes(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
