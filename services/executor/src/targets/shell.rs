//! `shell` targets: `/bin/sh -c <command>` in its own process group, stdout and
//! stderr captured together up to the output limit, success on exit 0.
//!
//! The child is a group leader so a timeout (or a kill, later) can stop the
//! whole tree it started: the guard kills the group when the attempt's future
//! is dropped. An executor killed with SIGKILL drops nothing, so a small
//! watcher (`/bin/sh` in its own group, polling once a second) kills the job's
//! group when the executor is gone: the attempt JetStream redelivers elsewhere
//! never runs beside an orphan of the lost one.

use std::io::Read as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use jetcron_core::job::ShellTarget;

use super::{cap_output, Outcome, RunContext};

/// Shell settings of an executor.
#[derive(Debug, Clone, Default)]
pub struct ShellOptions {
    /// Shell targets run only when this is set.
    pub enabled: bool,
    /// Working directory of commands; the executor's own when `None`.
    pub workdir: Option<PathBuf>,
}

/// Variables a command inherits from the executor; everything else is cleared.
const INHERITED_ENV: [&str; 8] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ",
];

/// How long output is still read after the shell exited (a detached child
/// that keeps the pipe open must not hold the attempt).
const OUTPUT_DRAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Kills the process group when dropped (on timeout or cancellation).
struct GroupGuard {
    pgid: Option<i32>,
    /// Stopped (and reaped) with the guard.
    _orphan_watch: Option<tokio::process::Child>,
}

/// `$1` = executor pid, `$2` = the job's process group: while both live,
/// wait; if the executor went first, kill the group.
const ORPHAN_WATCH: &str = r#"while kill -0 "$1" 2>/dev/null && kill -0 "-$2" 2>/dev/null; do sleep 1; done; kill -0 "$1" 2>/dev/null || kill -9 "-$2" 2>/dev/null"#;

/// Start the watcher of process group `pgid` (none if it cannot start: the
/// attempt runs all the same, as before).
fn watch_for_orphaning(pgid: i32) -> Option<tokio::process::Child> {
    let mut command = tokio::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(ORPHAN_WATCH)
        .arg("jetcron-orphan-watch")
        .arg(std::process::id().to_string())
        .arg(pgid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .env_clear()
        .process_group(0)
        .kill_on_drop(true);
    match command.spawn() {
        Ok(child) => Some(child),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the orphan watcher of a shell target");
            None
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

pub async fn run(
    options: &ShellOptions,
    target: &ShellTarget,
    ctx: &RunContext,
    output_limit: usize,
) -> Outcome {
    if !options.enabled {
        return Outcome::failed(
            "shell targets are disabled on this executor (start it with --enable-shell)",
        );
    }
    let (reader, writer) = match std::io::pipe() {
        Ok(pair) => pair,
        Err(e) => return Outcome::failed(format!("cannot create output pipe: {e}")),
    };
    let stderr = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return Outcome::failed(format!("cannot create output pipe: {e}")),
    };
    let mut command = std::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(&target.command)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(stderr)
        .process_group(0)
        // Only an allowlist of the executor's environment: its own settings
        // (credentials included) must not leak into job output.
        .env_clear();
    for name in INHERITED_ENV {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    for (name, value) in &target.env {
        command.env(name, value);
    }
    // The run context last: JETCRON_* cannot be overridden by the job.
    for (name, value) in ctx.pairs() {
        command.env(name.to_ascii_uppercase().replace('-', "_"), value);
    }
    if let Some(dir) = target
        .working_dir
        .as_deref()
        .map(PathBuf::from)
        .or_else(|| options.workdir.clone())
    {
        command.current_dir(dir);
    }
    let mut tokio_command = tokio::process::Command::from(command);
    tokio_command.kill_on_drop(true);
    let mut child = match tokio_command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let dir = target
                .working_dir
                .as_deref()
                .map(PathBuf::from)
                .or_else(|| options.workdir.clone());
            return Outcome::failed(match dir {
                Some(dir) => format!("cannot start /bin/sh in {}: {e}", dir.display()),
                None => format!("cannot start /bin/sh: {e}"),
            });
        }
    };
    // The pipe's write ends now live only in the child (and its descendants).
    drop(tokio_command);
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    let guard = GroupGuard {
        pgid,
        _orphan_watch: pgid.and_then(watch_for_orphaning),
    };
    let captured = Arc::new(Mutex::new(Captured::default()));
    let sink = captured.clone();
    let reading = tokio::task::spawn_blocking(move || read_capped(reader, output_limit, &sink));
    let status = child.wait().await;
    // The shell exited: its descendants still hold the pipe open, stop them too.
    drop(guard);
    // A child that left the group (setsid) may keep the pipe open: take what
    // was read so far after a short drain instead of waiting for it.
    let _ = tokio::time::timeout(OUTPUT_DRAIN, reading).await;
    let (bytes, truncated) = {
        let captured = captured.lock().unwrap_or_else(|e| e.into_inner());
        (captured.bytes.clone(), captured.truncated)
    };
    let (output, cut) = cap_output(&bytes, output_limit);
    let status = match status {
        Ok(status) => status,
        Err(e) => return Outcome::failed(format!("waiting for /bin/sh failed: {e}")),
    };
    let exit_code = status.code().or_else(|| status.signal().map(|s| 128 + s));
    Outcome {
        success: status.success(),
        exit_code,
        output: Some(output),
        output_truncated: truncated || cut,
        error: (!status.success()).then(|| match status.signal() {
            Some(signal) => format!("killed by signal {signal}"),
            None => format!("exit status {}", status.code().unwrap_or(-1)),
        }),
        ..Outcome::default()
    }
}

/// Output read so far, shared with the reading thread.
#[derive(Debug, Default)]
struct Captured {
    bytes: Vec<u8>,
    truncated: bool,
}

/// Read up to `limit` bytes into `sink`, then drain the rest so the writer never blocks.
fn read_capped(mut reader: std::io::PipeReader, limit: usize, sink: &Mutex<Captured>) {
    let mut chunk = [0u8; 8192];
    loop {
        match reader.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let mut captured = sink.lock().unwrap_or_else(|e| e.into_inner());
                let room = (limit + 1).saturating_sub(captured.bytes.len());
                captured.bytes.extend_from_slice(&chunk[..n.min(room)]);
                if n > room || captured.bytes.len() > limit {
                    captured.truncated = true;
                }
            }
        }
    }
}
