//! A shard's held jobs as one object: what a replica taking the shard over
//! reads instead of the whole jobs bucket.
//!
//! A replica that takes over a shard whose jobs it does not hold must find
//! them. The keys do not name their shard, so the server cannot filter
//! them: a pass over the bucket reads every key's current value (28-66 s at
//! ten million jobs), far past the lease TTL it should take. So the owner of
//! a planned shard writes the shard's jobs in their held form
//! ([`HeldJob`]), together with the bucket revision `read_to` they are
//! current at, into the object store `jetcron_ticker_snapshots`
//! ([`crate::snapshot_store`]). The next owner reads that object (about 56 bytes
//! a job) and then only the bucket's changes after `read_to`.
//!
//! Why that equals a read of the bucket: the jobs bucket denies deletes,
//! purges and rollups (`topology::ensure_jobs_bucket`), and its history
//! limit only ever drops a key's older values. So every key changed after
//! `read_to` still has its latest value after `read_to`, and replaying the
//! changes after it in order over the snapshot gives every key's current
//! value. A snapshot of a bucket created again since (sequences start over)
//! is told apart by the bucket stream's creation time it records.
//!
//! The format is postcard (serde, compact): a [`Header`], then one
//! [`JobRecord`] per job. A cron line is kept as its text and parsed again
//! through the process's shared lines; a zone by its IANA name.

use std::time::Duration;

use anyhow::{bail, Context as _};
use chrono::{DateTime, Utc};
use compact_str::CompactString;
use jetcron_core::job::MisfirePolicy;
use jetcron_core::schedule::fire_times::{RareTiming, Timing};
use jetcron_core::schedule::shared_lines::SharedLines;
use jetcron_core::schedule::{parse_timezone, Schedule};
use serde::{Deserialize, Serialize};

use crate::compact_job::HeldJob;
use crate::millis::Millis;
use crate::pool_name::PoolName;
use crate::shards::shard_of;

/// Bumped when the layout changes: an object of another format is not read.
pub const FORMAT: u32 = 1;

/// What an object starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    format: u32,
    pub shard: u32,
    /// Every change of the bucket up to this revision is in the jobs.
    pub read_to: u64,
    /// The jobs bucket stream's creation time (Unix nanoseconds): a bucket
    /// created again restarts its revisions.
    pub bucket_created: i64,
    pub jobs: u64,
}

/// An instant to the nanosecond.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Instant {
    secs: i64,
    nanos: u32,
}

impl Instant {
    fn of(at: DateTime<Utc>) -> Self {
        Self {
            secs: at.timestamp(),
            nanos: at.timestamp_subsec_nanos(),
        }
    }

    fn at(self) -> anyhow::Result<DateTime<Utc>> {
        DateTime::from_timestamp(self.secs, self.nanos).context("instant out of range")
    }
}

#[derive(Debug, Serialize, Deserialize)]
enum ScheduleRecord<'a> {
    Cron(&'a str),
    EveryMs(i64),
    At(Instant),
    AfterOnly,
}

/// One held job.
#[derive(Debug, Serialize, Deserialize)]
struct JobRecord<'a> {
    id: &'a str,
    revision: u64,
    defined_at_ms: i64,
    pool: &'a str,
    paused: bool,
    #[serde(borrow)]
    schedule: ScheduleRecord<'a>,
    timezone: &'a str,
    misfire: MisfirePolicy,
    start_at: Option<Instant>,
    end_at: Option<Instant>,
    jitter: Duration,
    catchup_window: Duration,
}

/// A shard's jobs as read back.
#[derive(Debug)]
pub struct ShardSnapshot {
    pub header: Header,
    pub jobs: Vec<HeldJob>,
}

/// Bytes of an encoded object per piece ([`encode`]): the object store's
/// chunk size.
pub const PIECE: usize = 128 * 1024;

/// The object of `shard`'s `jobs`, current at bucket revision `read_to`,
/// in pieces of about [`PIECE`] bytes: a shard of 625,000 jobs is 35 MB,
/// and one buffer of that size (grown by doubling, freed by the task that
/// stores it) stayed in the process's resident memory.
pub fn encode<'a>(
    shard: u32,
    read_to: u64,
    bucket_created: i64,
    jobs: impl ExactSizeIterator<Item = &'a HeldJob>,
) -> anyhow::Result<Vec<bytes::Bytes>> {
    let header = Header {
        format: FORMAT,
        shard,
        read_to,
        bucket_created,
        jobs: jobs.len() as u64,
    };
    // A record is about 56 bytes; an id or line may make one longer.
    let piece = || Vec::with_capacity(PIECE + 1024);
    let mut pieces = Vec::new();
    let mut out = postcard::to_extend(&header, piece()).context("encode snapshot header")?;
    for job in jobs {
        if out.len() >= PIECE {
            pieces.push(bytes::Bytes::from(std::mem::replace(&mut out, piece())));
        }
        let pool = job.pool.name();
        let timing = &job.timing;
        let schedule = match &timing.schedule {
            Schedule::Cron(line) => ScheduleRecord::Cron(line.pattern()),
            Schedule::Every { period_ms } => ScheduleRecord::EveryMs(*period_ms),
            Schedule::At(at) => ScheduleRecord::At(Instant::of(*at)),
            Schedule::AfterOnly => ScheduleRecord::AfterOnly,
        };
        let record = JobRecord {
            id: &job.id,
            revision: job.revision,
            defined_at_ms: job.defined_at.unix_ms(),
            pool: &pool,
            paused: job.paused,
            schedule,
            timezone: timing.timezone.name(),
            misfire: timing.misfire,
            start_at: timing.start_at().map(Instant::of),
            end_at: timing.end_at().map(Instant::of),
            jitter: timing.jitter(),
            catchup_window: timing.catchup_window(),
        };
        out = postcard::to_extend(&record, out)
            .with_context(|| format!("encode job {:?}", job.id))?;
    }
    pieces.push(bytes::Bytes::from(out));
    Ok(pieces)
}

/// The jobs of an object written by [`encode`], their lines parsed through
/// `lines`. Any fault (another format, a truncated object, a job of another
/// shard, a line or zone that no longer parses) refuses the whole object:
/// the caller then reads the bucket.
pub fn decode(bytes: &[u8], lines: &SharedLines) -> anyhow::Result<ShardSnapshot> {
    let (header, mut rest) =
        postcard::take_from_bytes::<Header>(bytes).context("decode snapshot header")?;
    if header.format != FORMAT {
        bail!(
            "snapshot format {} (this build reads {FORMAT})",
            header.format
        );
    }
    let mut jobs = Vec::with_capacity(usize::try_from(header.jobs).unwrap_or(0).min(1 << 24));
    for i in 0..header.jobs {
        let (record, after) = postcard::take_from_bytes::<JobRecord>(rest)
            .with_context(|| format!("decode job {i} of {}", header.jobs))?;
        rest = after;
        let job = held_job_of(&record, lines).with_context(|| format!("job {:?}", record.id))?;
        if shard_of(&job.id) != header.shard {
            bail!("job {:?} is not of shard {}", job.id, header.shard);
        }
        jobs.push(job);
    }
    if !rest.is_empty() {
        bail!("{} bytes after the last job", rest.len());
    }
    Ok(ShardSnapshot { header, jobs })
}

fn held_job_of(record: &JobRecord, lines: &SharedLines) -> anyhow::Result<HeldJob> {
    let schedule = match &record.schedule {
        ScheduleRecord::Cron(text) => match lines.parse(text) {
            Ok(schedule @ Schedule::Cron(_)) => schedule,
            Ok(_) => bail!("cron line {text:?} parsed as another kind of schedule"),
            Err(e) => bail!("cron line {text:?}: {e}"),
        },
        ScheduleRecord::EveryMs(period_ms) if *period_ms > 0 => Schedule::Every {
            period_ms: *period_ms,
        },
        ScheduleRecord::EveryMs(period_ms) => bail!("period of {period_ms} ms"),
        ScheduleRecord::At(at) => Schedule::At(at.at()?),
        ScheduleRecord::AfterOnly => Schedule::AfterOnly,
    };
    let timezone = parse_timezone(record.timezone)?;
    let rare = RareTiming {
        start_at: record.start_at.map(Instant::at).transpose()?,
        end_at: record.end_at.map(Instant::at).transpose()?,
        jitter: record.jitter,
        catchup_window: record.catchup_window,
    };
    let timing = Timing::new(schedule, timezone, record.misfire, rare);
    let defined_at =
        DateTime::from_timestamp_millis(record.defined_at_ms).context("write time out of range")?;
    Ok(HeldJob {
        id: CompactString::from(record.id),
        pool: PoolName::of(record.pool),
        paused: record.paused,
        timing,
        revision: record.revision,
        defined_at: Millis::of(defined_at),
    })
}

#[cfg(test)]
mod tests {
    use jetcron_core::job::parse_job;

    use super::*;

    fn held(id: &str, fields: &str, revision: u64) -> HeldJob {
        let value = format!(r#"{{"target":{{"type":"nats","subject":"svc.x"}}{fields}}}"#);
        let job = parse_job(value.as_bytes(), Some(id)).expect("valid");
        HeldJob::of(
            &job,
            revision,
            "2026-11-28T10:00:00.123456Z".parse().expect("instant"),
        )
    }

    /// Every job of `shard` among `candidates`.
    fn of_shard(shard: u32, candidates: Vec<HeldJob>) -> Vec<HeldJob> {
        candidates
            .into_iter()
            .filter(|j| shard_of(&j.id) == shard)
            .collect()
    }

    fn same(a: &HeldJob, b: &HeldJob) {
        assert_eq!(a.id, b.id);
        assert_eq!(a.pool, b.pool);
        assert_eq!(a.paused, b.paused);
        assert_eq!(a.revision, b.revision);
        assert_eq!(a.defined_at, b.defined_at);
        let (x, y) = (&a.timing, &b.timing);
        assert_eq!(x.timezone, y.timezone);
        assert_eq!(x.misfire, y.misfire);
        assert_eq!(x.start_at(), y.start_at());
        assert_eq!(x.end_at(), y.end_at());
        assert_eq!(x.jitter(), y.jitter());
        assert_eq!(x.catchup_window(), y.catchup_window());
        // The schedule itself: the same fires from a few instants.
        for from in [
            "2026-03-29T00:30:00Z",
            "2026-11-28T10:00:00.500Z",
            "2027-01-01T00:00:00Z",
        ] {
            let from: DateTime<Utc> = from.parse().expect("instant");
            assert_eq!(
                x.next_scheduled(from),
                y.next_scheduled(from),
                "{} from {from}",
                a.id
            );
        }
    }

    #[test]
    fn every_kind_of_job_comes_back_as_it_was_held() {
        let shard = 3;
        let candidates: Vec<HeldJob> = (0..400)
            .map(|i| {
                let id = format!("job-{i}");
                match i % 5 {
                    0 => held(&id, r#","schedule":"0 30 2 * * *","timezone":"Europe/Berlin""#, i),
                    1 => held(&id, r#","schedule":"@every 90s","paused":true,"pool":"batch""#, i),
                    2 => held(&id, r#","schedule":"@at 2027-01-01T00:00:00.250Z""#, i),
                    3 => held(
                        &id,
                        r#","schedule":"*/5 * * * *","misfire":"fire_all","catchup_window":"2h","jitter":"30s","start_at":"2026-12-01T00:00:00.5Z","end_at":"2027-06-01T00:00:00Z""#,
                        i,
                    ),
                    _ => held(&id, r#","after":[{"job":"job-0"}]"#, i),
                }
            })
            .collect();
        let jobs = of_shard(shard, candidates);
        assert!(jobs.len() > 10, "a few of each kind land in the shard");
        let bytes = encode(shard, 777, 42, jobs.iter())
            .expect("encode")
            .concat();
        let back = decode(&bytes, &SharedLines::default()).expect("decode");
        assert_eq!(
            back.header,
            Header {
                format: FORMAT,
                shard,
                read_to: 777,
                bucket_created: 42,
                jobs: jobs.len() as u64
            }
        );
        assert_eq!(back.jobs.len(), jobs.len());
        for (a, b) in jobs.iter().zip(&back.jobs) {
            same(a, b);
        }
        // A few dozen bytes a job, not a definition's few hundred.
        assert!(
            bytes.len() < jobs.len() * 80,
            "{} bytes for {} jobs",
            bytes.len(),
            jobs.len()
        );
    }

    #[test]
    fn a_large_shard_is_encoded_in_pieces_that_read_back_as_one() {
        let jobs = of_shard(
            1,
            (0..80_000)
                .map(|i| held(&format!("daily-{i}"), r#","schedule":"0 15 3 * * *""#, i))
                .collect(),
        );
        let pieces = encode(1, 99, 7, jobs.iter()).expect("encode");
        assert!(pieces.len() > 1, "{} jobs in one piece", jobs.len());
        for piece in &pieces[..pieces.len() - 1] {
            assert!(
                (PIECE..PIECE + 1024).contains(&piece.len()),
                "a piece of {} bytes",
                piece.len()
            );
        }
        let back = decode(&pieces.concat(), &SharedLines::default()).expect("decode");
        assert_eq!(back.jobs.len(), jobs.len());
        for (a, b) in jobs.iter().zip(&back.jobs) {
            assert_eq!((&a.id, a.revision), (&b.id, b.revision));
        }
    }

    #[test]
    fn a_damaged_object_is_refused_whole() {
        let jobs = of_shard(
            5,
            (0..200)
                .map(|i| held(&format!("j{i}"), r#","schedule":"* * * * *""#, i))
                .collect(),
        );
        let bytes = encode(5, 10, 1, jobs.iter()).expect("encode").concat();
        let lines = SharedLines::default();
        let cut = decode(&bytes[..bytes.len() - 3], &lines).expect_err("truncated");
        assert!(format!("{cut:#}").contains("decode job"), "{cut:#}");
        let mut longer = bytes.clone();
        longer.push(0);
        let extra = decode(&longer, &lines).expect_err("trailing bytes");
        assert!(
            format!("{extra:#}").contains("after the last job"),
            "{extra:#}"
        );
        // Written as another shard: its jobs are not of that shard.
        let wrong = encode(6, 10, 1, jobs.iter()).expect("encode").concat();
        let other = decode(&wrong, &lines).expect_err("wrong shard");
        assert!(
            format!("{other:#}").contains("is not of shard 6"),
            "{other:#}"
        );
        let mut future = bytes;
        future[0] = 9;
        let format = decode(&future, &lines).expect_err("another format");
        assert!(
            format!("{format:#}").contains("snapshot format 9"),
            "{format:#}"
        );
    }
}
