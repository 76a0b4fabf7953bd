//! What the benchmarks of `loadtest/` share: storing many job definitions
//! quickly and reading percentiles.

// A benchmark scenario reads from its set-up to its printed table in one
// function; the workspace's 120-line limit (clippy.toml) holds for the
// services, not here.
#![allow(clippy::too_many_lines)]

use std::ops::Range;

use anyhow::Context as _;
use async_nats::jetstream;
use jetcron_core::subjects;

/// Unacknowledged KV puts at most while loading jobs.
const PUTS_IN_FLIGHT: usize = 4096;

/// Store the definitions numbered `range` in the jobs bucket (key `key(i)`,
/// value `value(i)`) with pipelined publishes, waiting for every ack.
pub async fn put_jobs(
    js: &jetstream::Context,
    range: Range<usize>,
    key: impl Fn(usize) -> String,
    value: impl Fn(usize) -> String,
) -> anyhow::Result<()> {
    let mut pending = Vec::with_capacity(PUTS_IN_FLIGHT);
    for i in range {
        let subject = format!("$KV.{}.{}", subjects::JOBS_BUCKET, key(i));
        pending.push(js.publish(subject, value(i).into()).await?);
        if pending.len() >= PUTS_IN_FLIGHT {
            for ack in pending.drain(..) {
                ack.await.context("job put ack")?;
            }
        }
    }
    for ack in pending {
        ack.await.context("job put ack")?;
    }
    Ok(())
}

/// CPU seconds (user + system) a process has used so far.
pub fn cpu_seconds(pid: u32) -> f64 {
    // Fields after the command name (which may hold spaces) in /proc/<pid>/stat:
    // utime and stime are the 12th and 13th of them.
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some(utime + stime)
        })
        .unwrap_or(0);
    ticks as f64 / 100.0
}

/// CPU seconds used so far by this process and by a server's process,
/// and when: the start of a window that [`CpuMark::since`] measures.
pub struct CpuMark {
    own: f64,
    server: f64,
    at: std::time::Instant,
}

/// What a window used: its wall-clock seconds, and the CPU seconds of this
/// process and of the server.
pub struct CpuUsed {
    pub seconds: f64,
    pub own: f64,
    pub server: f64,
}

impl CpuMark {
    pub fn now(server_pid: Option<u32>) -> Self {
        Self {
            own: cpu_seconds(std::process::id()),
            server: server_pid.map_or(0.0, cpu_seconds),
            at: std::time::Instant::now(),
        }
    }

    /// What was used from this mark to now.
    pub fn since(&self, server_pid: Option<u32>) -> CpuUsed {
        let end = Self::now(server_pid);
        CpuUsed {
            seconds: end.at.duration_since(self.at).as_secs_f64(),
            own: end.own - self.own,
            server: end.server - self.server,
        }
    }
}

/// A size field of `/proc/<process>/status` (`VmRSS:`, `VmHWM:`), in bytes;
/// `process` is a pid or `self`.
pub fn status_bytes(process: &str, field: &str) -> anyhow::Result<u64> {
    proc_file_bytes(&format!("/proc/{process}/status"), field)
}

/// A size field in kB of a `/proc` file of `field: N kB` lines
/// (`status`, `smaps_rollup`), in bytes.
pub fn proc_file_bytes(path: &str, field: &str) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {path}"))?;
    text.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .with_context(|| format!("no {field} in {path}"))
}

/// The `p`-th percentile (0-100) of `sorted`; the default for none.
pub fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Header `name` of a call jetcron made (`Jetcron-Run-Id`, …).
pub fn call_header(request: &async_nats::Message, name: &str) -> Option<String> {
    request
        .headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().to_string())
}

/// The instant a call jetcron made was scheduled for (its
/// `Jetcron-Scheduled-At`).
pub fn call_scheduled_at(request: &async_nats::Message) -> Option<chrono::DateTime<chrono::Utc>> {
    let value = call_header(request, "Jetcron-Scheduled-At")?;
    let at = chrono::DateTime::parse_from_rfc3339(&value).ok()?;
    Some(at.with_timezone(&chrono::Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_by_rank() {
        let sorted: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&sorted, 50.0), 51);
        assert_eq!(percentile(&sorted, 99.0), 99);
        assert_eq!(percentile(&sorted, 100.0), 100);
        assert_eq!(percentile::<i64>(&[], 99.0), 0);
    }
}
