//! Running a target: one module per target type, one [`Outcome`] shape.
//!
//! Each runner gets the run's [`RunContext`] and returns whether the attempt
//! succeeded plus what it said (status, exit code, output, error). Timeouts and
//! kills are applied around the runner by the caller: dropping the future
//! aborts an HTTP request or abandons a NATS request, and the shell runner
//! kills its process group when dropped.
//!
//! A `nats` or `http` target may answer "accepted" and report later on
//! `jetcron.runs.<run_id>.complete` ([`completion`]); [`run`] then waits for
//! that report, still under the caller's timeout.

pub mod completion;
pub mod http;
pub mod nats;
pub mod shell;

use chrono::{DateTime, Utc};
use jetcron_core::events::{ParentRun, RunId};
use jetcron_core::job::Target;
use jetcron_core::time_format::rfc3339_millis;

use crate::ExecutorContext;

/// What a target is told about the run it serves.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub run_id: RunId,
    pub job_id: String,
    pub scheduled_at: DateTime<Utc>,
    pub attempt: u32,
    /// (index, count) of a sharded run.
    pub shard: Option<(u32, u32)>,
    /// The parent run whose end started this one (a chained run).
    pub parent: Option<ParentRun>,
}

impl RunContext {
    /// Header / environment pairs describing the run.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = vec![
            ("Jetcron-Run-Id", self.run_id.to_string()),
            ("Jetcron-Job-Id", self.job_id.clone()),
            ("Jetcron-Scheduled-At", rfc3339_millis(self.scheduled_at)),
            ("Jetcron-Attempt", self.attempt.to_string()),
        ];
        if let Some((index, count)) = self.shard {
            pairs.push(("Jetcron-Shard", index.to_string()));
            pairs.push(("Jetcron-Shards", count.to_string()));
        }
        if let Some(parent) = &self.parent {
            pairs.push(("Jetcron-Parent-Run-Id", parent.run_id.to_string()));
            pairs.push(("Jetcron-Parent-Job-Id", parent.job_id.clone()));
            pairs.push((
                "Jetcron-Parent-Scheduled-At",
                rfc3339_millis(parent.scheduled_at),
            ));
            pairs.push(("Jetcron-Parent-Status", parent.status.as_str().to_string()));
        }
        pairs
    }

    /// JSON body sent to targets that were given none.
    pub fn to_json(&self) -> serde_json::Value {
        let mut body = serde_json::json!({
            "run_id": self.run_id,
            "job_id": self.job_id,
            "scheduled_at": rfc3339_millis(self.scheduled_at),
            "attempt": self.attempt,
        });
        if let Some((index, count)) = self.shard {
            body["shard"] = index.into();
            body["shards"] = count.into();
        }
        if let Some(parent) = &self.parent {
            body["parent"] = serde_json::json!({
                "run_id": parent.run_id,
                "job_id": parent.job_id,
                "scheduled_at": rfc3339_millis(parent.scheduled_at),
                "status": parent.status.as_str(),
            });
        }
        body
    }
}

/// Run `target` once; for an asynchronous target, until it reports completion.
pub async fn run(ctx: &ExecutorContext, target: &Target, run: &RunContext) -> Outcome {
    let limit = ctx.config.output_limit;
    match target {
        Target::Shell(t) => shell::run(&ctx.config.shell, t, run, limit).await,
        Target::Nats(t) => {
            completion::run_async_aware(ctx, run, nats::run(&ctx.calls, t, run, limit)).await
        }
        Target::Http(t) => {
            completion::run_async_aware(ctx, run, http::run(&ctx.http, t, run, limit)).await
        }
    }
}

/// The result of one attempt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub success: bool,
    /// The target took the work and will report its result later.
    pub accepted: bool,
    pub status_code: Option<i32>,
    pub exit_code: Option<i32>,
    pub output: Option<String>,
    pub output_truncated: bool,
    pub error: Option<String>,
}

impl Outcome {
    pub fn failed(error: impl Into<String>) -> Self {
        Self {
            success: false,
            error: Some(error.into()),
            ..Self::default()
        }
    }
}

/// Output capped at `limit` bytes (cut on a character boundary), and whether it was cut.
pub fn cap_output(bytes: &[u8], limit: usize) -> (String, bool) {
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= limit {
        return (text.into_owned(), false);
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_string(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_capped_on_a_char_boundary() {
        assert_eq!(cap_output(b"hello", 10), ("hello".into(), false));
        assert_eq!(cap_output(b"hello", 3), ("hel".into(), true));
        let (text, cut) = cap_output("aé".as_bytes(), 2);
        assert_eq!((text.as_str(), cut), ("a", true));
        assert_eq!(cap_output(&[0xff, b'a'], 10).0, "\u{fffd}a");
    }
}
