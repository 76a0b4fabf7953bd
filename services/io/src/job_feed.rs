//! The reads of `jetcron_jobs` a process's services share.
//!
//! The ticker, the gateway's job catalog and the executors' chain index each
//! keep a view of every job. Run as separate processes, each follows the
//! bucket itself. In `jetcron all` that read the same values three times at
//! start: the server delivered a million definitions three times and the
//! process decoded them twice, most of a cold start's CPU on two cores.
//!
//! A [`JobFeed`] made for `readers` readers opens one watch once they have
//! all subscribed, decodes each entry once ([`parse_written_with`], the check
//! every door uses) and hands the same [`JobEntry`] to each reader.
//!
//! - **Pace.** The feed moves at the pace of its slowest reader (each has a
//!   queue of [`QUEUE`] entries). No reader misses an entry, so none needs a
//!   watch of its own to catch up. Once loaded, the ticker queues what its
//!   loop has not taken yet itself, so that a shard takeover does not hold
//!   its feed back.
//! - **What can wait.** A feed [`JobFeed::opened_after`] another opens its
//!   watch once the other's first read has reached its readers. In `jetcron
//!   all` the ticker reads first, on a feed of its own, and the chain index
//!   and the catalog share a second feed after it: two watches, so every
//!   definition and every later change is delivered and decoded twice.
//! - **Late readers.** A reader that subscribes after the watch opened (its
//!   service started more than [`GATHER_WAIT`] after the first) follows the
//!   bucket on a watch of its own, which costs one more read, nothing else.
//! - **Breaks.** When the watch breaks it is opened again: every reader
//!   hears [`FeedEvent::Opened`] and every current value again, so readers
//!   must take a value they already hold (they compare revisions).
//! - **Two reads.** A watch first reads every key's current value, on a
//!   consumer whose creation may take long: the server finds every key's
//!   last value before it answers (at ten million keys, longer than the 2 s
//!   other requests get; [`topology::WHOLE_STREAM_TIMEOUT`]). That read is
//!   a [`StreamPass`], which goes at the pace of the feed's readers with a
//!   few thousand messages out, not a KV watch, which leaves what they have
//!   not taken yet in the client's subscription buffer (tens of megabytes
//!   at a million jobs). It then follows every change after the last
//!   revision read, on a KV watch that starts at a sequence and is
//!   recreated on the usual timeout.
//! - **End.** The watch closes when the last reader is dropped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::consumer;
use async_nats::jetstream::kv::{self, Operation};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use jetcron_core::job::{parse_written_with, FieldError, ValidJob};
use jetcron_core::schedule_lines::SharedLines;
use jetcron_core::subjects;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{info, warn};

use crate::stream_pass::{PassOf, StreamPass};
use crate::topology;

/// Entries of a first read between two asks for freed memory back.
const GIVE_BACK_EVERY: u64 = 1 << 14;

/// Entries a reader may have waiting before the feed waits for it.
pub const QUEUE: usize = 4096;

/// Entries of a first read handed over together. One event per entry cost
/// each reader a queue operation and often a wake-up for every job: with
/// three readers and the ticker's relay, about a tenth of the CPU of a
/// cold start at a million jobs (docs/benchmarks.md).
const FIRST_READ_BATCH: usize = 256;

// Memory is asked back after whole batches only.
const _: () = assert!(GIVE_BACK_EVERY.is_multiple_of(FIRST_READ_BATCH as u64));

/// Events a reader's queue holds: [`QUEUE`] entries of a first read. A
/// reader that passes events on (the ticker's relay) queues as many.
pub const READER_EVENTS: usize = QUEUE / FIRST_READ_BATCH;

/// How long the first reader waits for the others before the watch opens
/// without them (they then read on their own).
pub const GATHER_WAIT: Duration = Duration::from_secs(5);

/// One entry of the bucket, decoded.
#[derive(Debug)]
pub struct JobEntry {
    pub key: String,
    /// The entry's revision (its sequence in the bucket's stream).
    pub revision: u64,
    /// When it was written (server time).
    pub written_at: DateTime<Utc>,
    pub written: Written,
}

/// What an entry holds.
// Entries live in one `Arc` each, mostly valid: boxing the large variant
// would add an allocation per job and save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Written {
    /// A delete or purge marker.
    Removed,
    Valid(ValidJob),
    /// A value that does not validate, with every problem found.
    Invalid {
        value: Bytes,
        problems: Vec<FieldError>,
    },
    /// A value that names no parents, not decoded: the feed's readers
    /// need only chained jobs ([`Needs::Chained`]).
    NotChained,
}

/// Which values a feed's readers need decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Every value (the ticker, the catalog).
    Every,
    /// Only values that name parents in `after` (a chain index on its
    /// own: a standalone executor). Others are handed on as
    /// [`Written::NotChained`] without a parse.
    Chained,
}

impl Written {
    /// The value `value` of `key`, written at `written_at`, checked as
    /// every door checks a definition ([`parse_written_with`]).
    fn read(key: &str, value: Bytes, written_at: DateTime<Utc>, lines: &SharedLines) -> Self {
        match parse_written_with(&value, Some(key), written_at, &mut |line| lines.parse(line)) {
            Ok(job) => Written::Valid(job),
            Err(problems) => Written::Invalid { value, problems },
        }
    }
}

impl JobEntry {
    /// Decode `entry` as `needs` asks, its schedule line parsed through
    /// `lines`.
    pub fn decode(entry: kv::Entry, needs: Needs, lines: &SharedLines) -> Self {
        Self::decode_value(
            CurrentValue {
                key: entry.key,
                value: entry.value,
                revision: entry.revision,
                written_at: entry.created,
                operation: entry.operation,
            },
            needs,
            lines,
        )
    }

    fn decode_value(value: CurrentValue, needs: Needs, lines: &SharedLines) -> Self {
        let CurrentValue {
            key,
            value,
            revision,
            written_at,
            operation,
        } = value;
        let written = match operation {
            Operation::Delete | Operation::Purge => Written::Removed,
            // A definition with parents names them under this key.
            Operation::Put
                if needs == Needs::Chained && !value.windows(7).any(|w| w == b"\"after\"") =>
            {
                Written::NotChained
            }
            Operation::Put => Written::read(&key, value, written_at, lines),
        };
        Self {
            key,
            revision,
            written_at,
            written,
        }
    }

    /// The definition, when the entry is a valid one.
    pub fn valid(&self) -> Option<&ValidJob> {
        match &self.written {
            Written::Valid(job) => Some(job),
            Written::Removed | Written::Invalid { .. } | Written::NotChained => None,
        }
    }
}

/// What a reader is told.
#[derive(Debug, Clone)]
pub enum FeedEvent {
    /// A watch opens on a bucket of about this many keys (deleted ones
    /// included): room for them can be made at once, rather than by
    /// growing a table a million entries long step by step.
    Opened { keys: usize },
    /// Entries in the bucket's order: up to [`FIRST_READ_BATCH`] of a
    /// first read together, each later change on its own.
    Entries(Arc<[Arc<JobEntry>]>),
    /// Every value the bucket held when the watch opened has been delivered
    /// (once per opened watch).
    Synced,
}

/// The feed of one process, shared by its readers (clone it to each).
#[derive(Clone)]
pub struct JobFeed(Arc<Mutex<Gathering>>);

struct Gathering {
    readers: usize,
    needs: Needs,
    waiting: Vec<mpsc::Sender<FeedEvent>>,
    /// Kept by every reader of the shared watch (and by the feed until the
    /// watch opens): when the last is dropped, the watch closes.
    alive: Option<Arc<DropGuard>>,
    closed: CancellationToken,
    /// Whether the first read has reached every reader (or the feed ended
    /// before).
    first_read: Arc<watch::Sender<ReadState>>,
    /// The connection and lines the watch reads with (the first reader's).
    source: Option<(async_nats::Client, SharedLines)>,
    /// Another feed, whose first read this one's watch waits for
    /// ([`JobFeed::opened_after`]).
    after: Option<JobFeed>,
}

/// How far a feed's first read has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadState {
    Reading,
    /// Every key's current value has been handed to every reader.
    Delivered,
    /// The feed ended (its readers gone) before that.
    Ended,
}

impl Default for JobFeed {
    /// A feed for one reader: a service running on its own.
    fn default() -> Self {
        Self::new(1)
    }
}

impl std::fmt::Debug for JobFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gathering = self.lock();
        f.debug_struct("JobFeed")
            .field("readers", &gathering.readers)
            .field("waiting", &gathering.waiting.len())
            .field("opened", &gathering.alive.is_none())
            .finish()
    }
}

impl JobFeed {
    /// A feed whose watch opens when `readers` have subscribed, each
    /// value decoded.
    pub fn new(readers: usize) -> Self {
        Self::needing(readers, Needs::Every)
    }

    /// A feed for a chain index alone ([`Needs::Chained`]).
    pub fn chains_only() -> Self {
        Self::needing(1, Needs::Chained)
    }

    fn needing(readers: usize, needs: Needs) -> Self {
        let closed = CancellationToken::new();
        Self(Arc::new(Mutex::new(Gathering {
            readers: readers.max(1),
            needs,
            waiting: Vec::new(),
            alive: Some(Arc::new(closed.clone().drop_guard())),
            closed,
            first_read: Arc::new(watch::Sender::new(ReadState::Reading)),
            source: None,
            after: None,
        })))
    }

    /// This feed, its watch opened only once `first`'s first read has
    /// reached its readers (and this feed's readers have subscribed, or
    /// [`GATHER_WAIT`] has passed since then). In `jetcron all` the chain
    /// index and the gateway's catalog read after the ticker has every
    /// job: a cold start is CPU-bound, and its first due event comes
    /// sooner when the ticker's read has the CPU to itself.
    ///
    /// `first` is not waited for when it has not opened [`GATHER_WAIT`]
    /// after this feed's readers came (its reader never came: a ticker
    /// still waiting for its streams must not keep the console's list and
    /// the chains from loading). When `first` ends before its read is done
    /// (its readers stopped: the process is stopping), this feed never
    /// opens.
    pub fn opened_after(self, first: &JobFeed) -> Self {
        self.lock().after = Some(first.clone());
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gathering> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Told once every key's current value of the feed's first read has
    /// been handed to its readers (or the feed ended).
    pub fn first_read(&self) -> FirstRead {
        FirstRead(self.lock().first_read.subscribe())
    }

    /// Subscribe to the entries of `jetcron_jobs` (read on `client`'s
    /// connection), decoded with `lines`. Must be called from within the
    /// tokio runtime (it may start the watch).
    pub fn subscribe(&self, client: &async_nats::Client, lines: &SharedLines) -> FeedReceiver {
        let (queue, events) = mpsc::channel(READER_EVENTS);
        let mut gathering = self.lock();
        let Some(alive) = gathering.alive.clone() else {
            info!("job feed already open: this reader follows the bucket on its own watch");
            let own = JobFeed::needing(1, gathering.needs);
            drop(gathering);
            return own.subscribe(client, lines);
        };
        gathering.waiting.push(queue);
        gathering
            .source
            .get_or_insert_with(|| (client.clone(), lines.clone()));
        let receiver = FeedReceiver {
            events,
            _alive: alive,
        };
        let after = gathering.after.clone();
        if gathering.waiting.len() >= gathering.readers {
            match after {
                None => open(&mut gathering),
                Some(after) => {
                    let feed = self.clone();
                    tokio::spawn(async move {
                        if may_open_after(&after).await {
                            feed.open_unless_open();
                        }
                    });
                }
            }
        } else if gathering.waiting.len() == 1 {
            let feed = self.clone();
            tokio::spawn(async move {
                if let Some(after) = after {
                    if !may_open_after(&after).await {
                        return;
                    }
                }
                tokio::time::sleep(GATHER_WAIT).await;
                let mut gathering = feed.lock();
                if gathering.alive.is_some() {
                    warn!(
                        readers = gathering.waiting.len(),
                        expected = gathering.readers,
                        "job feed opens without every reader: the others follow the bucket on their own"
                    );
                    open(&mut gathering);
                }
            });
        }
        receiver
    }

    fn open_unless_open(&self) {
        let mut gathering = self.lock();
        if gathering.alive.is_some() {
            open(&mut gathering);
        }
    }

    /// Whether the watch has opened.
    fn opened(&self) -> bool {
        self.lock().alive.is_none()
    }
}

/// Wait for `first`'s first read ([`JobFeed::opened_after`]); whether the
/// feed waiting may open then.
async fn may_open_after(first: &JobFeed) -> bool {
    let read = first.first_read();
    if let Ok(done) = tokio::time::timeout(GATHER_WAIT, read.clone().done()).await {
        return done;
    }
    if !first.opened() {
        warn!("the job feed this one waits for has not opened: opening without waiting for it");
        return true;
    }
    read.done().await
}

fn open(gathering: &mut Gathering) {
    let queues = std::mem::take(&mut gathering.waiting);
    let Some((client, lines)) = gathering.source.take() else {
        return;
    };
    // The feed's own handle goes: the readers now hold the watch open.
    gathering.alive = None;
    tokio::spawn(follow(
        client,
        gathering.needs,
        lines,
        queues,
        gathering.closed.clone(),
        gathering.first_read.clone(),
    ));
}

/// Whether a feed's first read has reached its readers
/// ([`JobFeed::first_read`]): work that can wait, such as projecting every
/// job's revisions, waits for it so that a start loads the jobs first.
#[derive(Debug, Clone)]
pub struct FirstRead(watch::Receiver<ReadState>);

impl FirstRead {
    /// Wait until the first read has reached every reader, or the feed
    /// ended.
    pub async fn delivered(self) {
        self.done().await;
    }

    /// [`FirstRead::delivered`]; whether the read was done (not the feed
    /// ended before).
    async fn done(mut self) -> bool {
        // An error: the feed is gone, and with it anything to wait for.
        match self.0.wait_for(|state| *state != ReadState::Reading).await {
            Ok(state) => *state == ReadState::Delivered,
            Err(_) => false,
        }
    }
}

/// A reader's side of the feed.
#[derive(Debug)]
pub struct FeedReceiver {
    events: mpsc::Receiver<FeedEvent>,
    _alive: Arc<DropGuard>,
}

impl FeedReceiver {
    /// The next event; `None` once the feed has ended (never while readers
    /// are left, unless the task reading the bucket panicked).
    pub async fn recv(&mut self) -> Option<FeedEvent> {
        self.events.recv().await
    }
}

/// Read the bucket into `queues` until every reader is gone (`closed`);
/// `first_read` is told when the first read has reached them, and at the
/// end at the latest.
async fn follow(
    client: async_nats::Client,
    needs: Needs,
    lines: SharedLines,
    queues: Vec<mpsc::Sender<FeedEvent>>,
    closed: CancellationToken,
    first_read: Arc<watch::Sender<ReadState>>,
) {
    follow_until_closed(client, needs, lines, queues, closed, &first_read).await;
    first_read.send_if_modified(|state| {
        let reading = *state == ReadState::Reading;
        if reading {
            *state = ReadState::Ended;
        }
        reading
    });
}

async fn follow_until_closed(
    client: async_nats::Client,
    needs: Needs,
    lines: SharedLines,
    mut queues: Vec<mpsc::Sender<FeedEvent>>,
    closed: CancellationToken,
    first_read: &watch::Sender<ReadState>,
) {
    loop {
        let outcome = tokio::select! {
            _ = closed.cancelled() => return,
            outcome = follow_once(&client, needs, &lines, &mut queues, first_read) => outcome,
        };
        if queues.is_empty() {
            return;
        }
        if let Err(e) = outcome {
            warn!(error = %format!("{e:#}"), "job feed watch broke, reopening");
        }
        tokio::select! {
            _ = closed.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// One watch, until it breaks or no reader is left (then `Ok`): every
/// key's current value first, then every change after them.
async fn follow_once(
    client: &async_nats::Client,
    needs: Needs,
    lines: &SharedLines,
    queues: &mut Vec<mpsc::Sender<FeedEvent>>,
    first_read: &watch::Sender<ReadState>,
) -> anyhow::Result<()> {
    let (bucket, held) = open_bucket(client).await?;
    let keys = usize::try_from(held.subjects_count).unwrap_or(usize::MAX);
    if !send(queues, FeedEvent::Opened { keys }).await {
        return Ok(());
    }
    let mut last = held.last_sequence;
    if held.messages > 0 {
        match read_current(client, needs, lines, queues).await? {
            Some(read_to) => last = last.max(read_to),
            None => return Ok(()),
        }
    }
    if !send(queues, FeedEvent::Synced).await {
        return Ok(());
    }
    first_read.send_replace(ReadState::Delivered);
    // Every change after what was read, on a consumer that starts at a
    // sequence: quick to create, and recreated on the usual timeout.
    let mut entries = bucket
        .watch_all_from_revision(last + 1)
        .await
        .context("watch job bucket")?;
    loop {
        let entry = next_entry(&mut entries).await?;
        let entry = Arc::new(JobEntry::decode(entry, needs, lines));
        if !send(queues, FeedEvent::Entries(Arc::new([entry]))).await {
            return Ok(());
        }
    }
}

/// The job bucket, and what its stream holds now: opening the store reads
/// its stream's info, so the state it keeps is of this moment.
pub async fn open_bucket(
    client: &async_nats::Client,
) -> anyhow::Result<(kv::Store, async_nats::jetstream::stream::State)> {
    let bucket: kv::Store = topology::context(client.clone())
        .get_key_value(subjects::JOBS_BUCKET)
        .await
        .context("open job bucket")?;
    let held = bucket.stream.cached_info().state.clone();
    Ok((bucket, held))
}

/// The watch's next entry; an error when it broke or ended.
async fn next_entry(entries: &mut kv::Watch) -> anyhow::Result<kv::Entry> {
    match entries.next().await {
        Some(entry) => entry.context("job bucket watch"),
        None => anyhow::bail!("job bucket watch ended"),
    }
}

/// One read of every key's current value, at its reader's pace: a
/// [`StreamPass`] from each key's last message. A KV watch leaves what its
/// reader has not taken yet in the client's subscription buffer: at a
/// start, tens of megabytes of a million definitions while the readers
/// built their views (and it starts over when that buffer overflows). A
/// pass has at most [`crate::stream_pass::IN_FLIGHT`] messages out.
struct CurrentValues {
    pass: StreamPass,
    /// `$KV.<bucket>.`: what the subjects of values start with.
    prefix: String,
    /// The stream sequence of the last message read (0: none yet).
    read_to: u64,
}

/// A key's value (or delete marker) as a pass read it.
struct CurrentValue {
    key: String,
    value: Bytes,
    revision: u64,
    written_at: DateTime<Utc>,
    operation: Operation,
}

impl CurrentValues {
    /// Open a read of `jetcron_jobs`' current values. The consumer starts
    /// at every key's last value, and the server answers its creation only
    /// once it has found them all: hence the long timeout.
    async fn open(client: &async_nats::Client, description: &str) -> anyhow::Result<Self> {
        let js = topology::whole_stream_context(client.clone());
        let bucket: kv::Store = js
            .get_key_value(subjects::JOBS_BUCKET)
            .await
            .context("open job bucket")?;
        let pass = StreamPass::open(
            &bucket.stream_name,
            &js,
            PassOf {
                filter_subject: format!("{}>", bucket.prefix),
                deliver_policy: consumer::DeliverPolicy::LastPerSubject,
                description: description.to_string(),
            },
        )
        .await
        .context("read job bucket")?;
        Ok(Self {
            pass,
            prefix: bucket.prefix,
            read_to: 0,
        })
    }

    /// The next value in stream order; `None` once nothing is pending.
    async fn next(&mut self) -> anyhow::Result<Option<CurrentValue>> {
        while let Some(read) = self.pass.next_message().await? {
            // Skipped messages count too: a watch from past the last value
            // handed out would deliver them again.
            self.read_to = self.read_to.max(read.stream_sequence);
            let Some(key) = read.message.subject.strip_prefix(self.prefix.as_str()) else {
                continue;
            };
            let Some(operation) = kv_operation(&read.message) else {
                warn!(
                    key,
                    revision = read.stream_sequence,
                    "job bucket entry with an unknown KV operation, skipped"
                );
                continue;
            };
            return Ok(Some(CurrentValue {
                key: key.to_string(),
                value: read.message.payload,
                revision: read.stream_sequence,
                written_at: read.stored_at,
                operation,
            }));
        }
        Ok(None)
    }
}

/// What a message of a KV stream does to its key
/// ([`crate::kv_entry::operation_in`]).
pub fn kv_operation(message: &async_nats::Message) -> Option<Operation> {
    crate::kv_entry::operation_in(message.headers.as_ref())
}

/// Hand `keep` every key's current value among the keys `wanted` accepts
/// (the others are not decoded), read apart from any feed: a ticker loads
/// the jobs of a shard it takes over this way when it does not hold them.
/// Only valid definitions are handed over: a reader loading from nothing
/// has no deleted or invalid key to remove. Returns the revision every
/// change up to which is in what was read.
pub async fn read_current_of(
    client: &async_nats::Client,
    lines: &SharedLines,
    wanted: impl Fn(&str) -> bool,
    mut keep: impl FnMut(JobEntry),
) -> anyhow::Result<u64> {
    let (_, held) = open_bucket(client).await?;
    let read_to = held.last_sequence;
    if held.messages == 0 {
        return Ok(read_to);
    }
    let mut values = CurrentValues::open(client, "ticker: the jobs of shards taken over").await?;
    while let Some(value) = values.next().await? {
        if wanted(&value.key) && value.operation == Operation::Put {
            let entry = JobEntry::decode_value(value, Needs::Every, lines);
            if entry.valid().is_some() {
                keep(entry);
            }
        }
    }
    Ok(read_to.max(values.read_to))
}

/// Hand every key's current value to `queues`; the highest revision read
/// (every change up to it is in what was read), or `None` when no reader
/// is left.
async fn read_current(
    client: &async_nats::Client,
    needs: Needs,
    lines: &SharedLines,
    queues: &mut Vec<mpsc::Sender<FeedEvent>>,
) -> anyhow::Result<Option<u64>> {
    let mut values = CurrentValues::open(client, "job feed: every job's current value").await?;
    let mut read = 0u64;
    let mut batch = Vec::with_capacity(FIRST_READ_BATCH);
    while let Some(value) = values.next().await? {
        batch.push(Arc::new(JobEntry::decode_value(value, needs, lines)));
        if batch.len() < FIRST_READ_BATCH {
            continue;
        }
        if !hand_over(queues, &mut batch).await {
            return Ok(None);
        }
        read += FIRST_READ_BATCH as u64;
        if read.is_multiple_of(GIVE_BACK_EVERY) {
            jetcron_allocator::give_back_freed_memory();
        }
    }
    if !batch.is_empty() && !hand_over(queues, &mut batch).await {
        return Ok(None);
    }
    // Delivered in stream order: nothing after `read_to` was read.
    jetcron_allocator::give_back_freed_memory();
    Ok(Some(values.read_to))
}

/// Hand the entries of `batch` to every reader left as one event, leaving
/// `batch` empty for the next ones; whether any reader is left.
async fn hand_over(
    queues: &mut Vec<mpsc::Sender<FeedEvent>>,
    batch: &mut Vec<Arc<JobEntry>>,
) -> bool {
    send(queues, FeedEvent::Entries(batch.drain(..).collect())).await
}

/// Hand `event` to every reader left, dropping those gone; whether any is
/// left.
async fn send(queues: &mut Vec<mpsc::Sender<FeedEvent>>, event: FeedEvent) -> bool {
    let mut gone = false;
    for queue in queues.iter() {
        gone |= queue.send(event.clone()).await.is_err();
    }
    if gone {
        queues.retain(|q| !q.is_closed());
    }
    !queues.is_empty()
}

/// What keeps a view of the jobs from the feed, applied in the feed's order.
pub trait JobView {
    /// About `keys` entries follow (see [`FeedEvent::Opened`]).
    fn expect(&self, _keys: usize) {}
    /// Take in one entry (a value already held must be taken again).
    fn apply(&self, entry: &JobEntry);
    /// Every value the bucket held has been applied.
    fn synced(&self);
}

/// Apply `feed` to `view` until `shutdown` or the feed's end.
pub async fn keep(mut feed: FeedReceiver, view: &impl JobView, shutdown: &CancellationToken) {
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            event = feed.recv() => event,
        };
        match event {
            Some(FeedEvent::Opened { keys }) => view.expect(keys),
            Some(FeedEvent::Entries(entries)) => entries.iter().for_each(|e| view.apply(e)),
            Some(FeedEvent::Synced) => view.synced(),
            None => {
                warn!("job feed ended");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(headers: &[(&str, &str)]) -> async_nats::Message {
        let headers = (!headers.is_empty()).then(|| {
            let mut map = async_nats::HeaderMap::new();
            for (name, value) in headers {
                map.insert(*name, *value);
            }
            map
        });
        async_nats::Message {
            subject: "$KV.jetcron_jobs.a".into(),
            reply: None,
            payload: Bytes::new(),
            headers,
            status: None,
            description: None,
            length: 0,
        }
    }

    #[test]
    fn a_kv_message_says_what_it_does_to_its_key() {
        for (headers, wanted) in [
            (vec![], Some(Operation::Put)),
            (vec![("Nats-Msg-Id", "x")], Some(Operation::Put)),
            (vec![("KV-Operation", "PUT")], Some(Operation::Put)),
            (vec![("KV-Operation", "DEL")], Some(Operation::Delete)),
            (vec![("KV-Operation", "PURGE")], Some(Operation::Purge)),
            (vec![("KV-Operation", "SWAP")], None),
            // Markers the server leaves (per-message TTLs, 2.11+).
            (
                vec![("Nats-Marker-Reason", "MaxAge")],
                Some(Operation::Purge),
            ),
            (
                vec![("Nats-Marker-Reason", "Purge")],
                Some(Operation::Purge),
            ),
            (
                vec![("Nats-Marker-Reason", "Remove")],
                Some(Operation::Delete),
            ),
            (vec![("Nats-Marker-Reason", "Later")], None),
            // The client's header wins over a marker's.
            (
                vec![("KV-Operation", "DEL"), ("Nats-Marker-Reason", "MaxAge")],
                Some(Operation::Delete),
            ),
        ] {
            assert_eq!(
                kv_operation(&message(&headers)),
                wanted,
                "headers {headers:?}"
            );
        }
    }
}
