//! Stalls: a process frozen with SIGSTOP and thawed with SIGCONT.
//!
//! A stopped process keeps its sockets open and the kernel keeps accepting
//! bytes for it, but it answers nothing: to its peers it looks like a long
//! garbage-collection pause, a VM frozen by its host, a machine swapping, or
//! a hung server — the faults where a process is neither dead nor alive.
//! Issue 39 asks that jobs still fire on time and exactly once through them.
//!
//! Both calls wait until every thread of the process shows the new state in
//! `/proc`, so a test that pauses and then acts knows the process is frozen
//! (SIGSTOP is delivered asynchronously). A stopped process can still be
//! SIGKILLed and reaped; a SIGTERM stays pending until SIGCONT, so callers
//! that terminate gracefully must resume the process too.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How long the kernel gets to stop or continue every thread.
const STATE_CHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// SIGSTOP `pid` and wait until all its threads are stopped. Panics (naming
/// `what`) when the process is gone or does not stop.
pub(crate) fn pause(pid: u32, what: &str) {
    send(pid, Signal::SIGSTOP, what);
    wait_for(pid, true, what);
}

/// SIGCONT `pid` and wait until none of its threads is stopped.
pub(crate) fn resume(pid: u32, what: &str) {
    send(pid, Signal::SIGCONT, what);
    wait_for(pid, false, what);
}

/// Send SIGCONT without waiting or failing: for a process about to be
/// terminated, so that a pending SIGTERM is handled.
pub(crate) fn continue_quietly(pid: u32) {
    let _ = kill(as_pid(pid), Signal::SIGCONT);
}

/// Whether every thread of `pid` is stopped (by SIGSTOP or a job-control
/// signal). `false` for a process that is gone.
pub(crate) fn is_paused(pid: u32) -> bool {
    matches!(thread_states(pid), Some(states) if !states.is_empty() && states.iter().all(|&s| s == 'T'))
}

fn send(pid: u32, signal: Signal, what: &str) {
    if let Err(e) = kill(as_pid(pid), signal) {
        panic!("send {signal} to {what} (pid {pid}): {e}");
    }
}

fn wait_for(pid: u32, stopped: bool, what: &str) {
    let deadline = Instant::now() + STATE_CHANGE_TIMEOUT;
    loop {
        let states = thread_states(pid).unwrap_or_default();
        if states.is_empty() || states.iter().any(|&s| s == 'Z' || s == 'X') {
            panic!("{what} (pid {pid}) exited while being paused or resumed");
        }
        if states.iter().all(|&s| (s == 'T') == stopped) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} (pid {pid}) threads not {} within {STATE_CHANGE_TIMEOUT:?}: {states:?}",
            if stopped { "stopped" } else { "running" },
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The state letter (`R`, `S`, `T`, `Z`, …) of every thread of `pid`, from
/// `/proc/<pid>/task/*/stat`; `None` when the process is gone.
fn thread_states(pid: u32) -> Option<Vec<char>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let states = tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter_map(|stat| state_of(&stat))
        .collect();
    Some(states)
}

/// The state field of a `/proc/…/stat` line: the first letter after the
/// command name, which is in parentheses and may itself hold `)` or spaces.
fn state_of(stat: &str) -> Option<char> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.trim_start().chars().next()
}

fn as_pid(pid: u32) -> Pid {
    Pid::from_raw(i32::try_from(pid).expect("pid fits in i32"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_is_read_after_a_command_name_with_parentheses() {
        assert_eq!(state_of("42 (a) b) T 1 42 42"), Some('T'));
        assert_eq!(state_of("7 (nats-server) S 1 7"), Some('S'));
        assert_eq!(state_of("garbage"), None);
    }

    #[test]
    fn a_paused_child_is_stopped_until_resumed_and_can_be_killed() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("start sleep");
        pause(child.id(), "sleep");
        assert!(is_paused(child.id()));
        resume(child.id(), "sleep");
        assert!(!is_paused(child.id()));
        pause(child.id(), "sleep");
        child.kill().expect("SIGKILL a stopped process");
        let status = child.wait().expect("reap a process killed while stopped");
        assert!(!status.success());
        assert!(!is_paused(child.id()));
    }
}
