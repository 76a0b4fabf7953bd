//! One read of every current definition in `jetcron_jobs`, a chunk at a
//! time: what the missed-fire scan, the missed-fires gauge and `/v1/stats`
//! walk over.
//!
//! Why it streams: with a million jobs, listing the keys and reading each
//! (one request per key), then keeping every parsed job for the whole scan,
//! cost about 8 KB per job (a parsed cron line alone is about 6 KB). A pass
//! instead reads the bucket's current values in one go (an ephemeral push
//! consumer with `LastPerSubject`), hands them out [`JobPass::next_chunk`] by
//! chunk, and keeps nothing of a chunk once the caller drops it. Jobs with
//! the same schedule line share one parsed line (the process's
//! [`SharedLines`]).
//!
//! Why a [`StreamPass`] rather than a KV watch
//! ([`jetcron_io::bucket_follow`] follows the bucket for good, applying
//! each entry at once): a caller works on a chunk (ClickHouse, publishes)
//! before it asks for the next, and meanwhile the server keeps sending. A
//! watch leaves those messages in the client's subscription buffer of
//! 65,536 messages; small definitions overflow it, the client drops
//! messages, and the watch's ordered consumer restarts from the last
//! sequence it saw with every revision after it, old ones included. A
//! pass goes at its reader's pace (acks and flow control answered as it
//! reads). It needs consumer creation, acks and flow control replies on
//! `KV_jetcron_jobs`, which the gateway's NATS role has
//! (`infra/nats/roles.conf`): a chunk of the missed-fire scan can take
//! longer than the 2 minutes `allow_responses` alone would allow.
//!
//! As with the old per-key reads, a key written during a pass may be seen
//! at its old value, or at both (the new one later); deleted keys, delete
//! markers and definitions that do not validate are skipped.

use async_nats::jetstream::{self, consumer, kv};
use chrono::{DateTime, Utc};
use jetcron_core::job::{parse_written_with, ValidJob};
use jetcron_core::schedule_lines::SharedLines;
use jetcron_io::stream_pass::{PassOf, StreamPass};

/// A valid definition as a pass reads it, with the time its revision was
/// written (from when the missed fire count asks it).
pub struct CurrentJob {
    pub job: ValidJob,
    pub written_at: DateTime<Utc>,
}

/// One read of the current definitions of a bucket (see the module docs).
pub struct JobPass {
    pass: StreamPass,
    /// `$KV.<bucket>.`: what the subjects of values start with.
    prefix: String,
    /// The process's parsed lines (shared with the ticker in `jetcron all`).
    schedules: SharedLines,
}

impl JobPass {
    /// Open a pass over `bucket`'s current values, on `js`'s connection.
    pub async fn open(
        bucket: &kv::Store,
        js: &jetstream::Context,
        lines: SharedLines,
    ) -> anyhow::Result<Self> {
        // The pass starts at every key's last value: the server finds them
        // all before it answers the consumer's creation.
        let pass = StreamPass::open(
            &bucket.stream_name,
            &jetcron_io::topology::whole_stream_context(js.client()),
            PassOf {
                filter_subject: format!("{}>", bucket.prefix),
                deliver_policy: consumer::DeliverPolicy::LastPerSubject,
                description: "gateway: one read of every job".into(),
            },
        )
        .await?;
        Ok(Self {
            pass,
            prefix: bucket.prefix.clone(),
            schedules: lines,
        })
    }

    /// The next valid definitions, at most `max` (fewer at the end), each
    /// with the time its revision was written; `None` once every value has
    /// been read. The chunk is the caller's: the pass keeps none of it.
    pub async fn next_chunk(&mut self, max: usize) -> anyhow::Result<Option<Vec<CurrentJob>>> {
        let mut jobs = Vec::new();
        while !self.pass.done() && jobs.len() < max {
            let Some(value) = self.next_value().await? else {
                continue;
            };
            let Some(key) = value.subject.strip_prefix(self.prefix.as_str()) else {
                continue;
            };
            let schedules = &self.schedules;
            let parsed =
                parse_written_with(&value.payload, Some(key), value.written_at, &mut |line| {
                    schedules.parse(line)
                });
            if let Ok(job) = parsed {
                jobs.push(CurrentJob {
                    job,
                    written_at: value.written_at,
                });
            }
        }
        Ok((!jobs.is_empty()).then_some(jobs))
    }

    /// The next message of the pass if it is a value: `None` for a delete
    /// or purge marker, and once the pass is done.
    async fn next_value(&mut self) -> anyhow::Result<Option<RawDefinition>> {
        let Some(read) = self.pass.next_message().await? else {
            return Ok(None);
        };
        if !is_put(&read.message) {
            return Ok(None);
        }
        Ok(Some(RawDefinition {
            subject: read.message.subject,
            payload: read.message.payload,
            written_at: read.stored_at,
        }))
    }
}

/// A value read by a pass, not parsed yet.
struct RawDefinition {
    subject: async_nats::Subject,
    payload: bytes::Bytes,
    written_at: chrono::DateTime<chrono::Utc>,
}

/// Whether a message of a KV stream is a value (not a delete or purge marker).
fn is_put(message: &async_nats::Message) -> bool {
    jetcron_io::job_feed::kv_operation(message) == Some(kv::Operation::Put)
}

#[cfg(test)]
mod tests;
