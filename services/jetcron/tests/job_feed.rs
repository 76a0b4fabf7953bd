//! One read of `jetcron_jobs` for the readers of a feed
//! (`jetcron_io::job_feed`): readers such as the chain index and the catalog
//! of `jetcron all` are handed the same decoded entries from one watch, a
//! feed opened after another's first read waits for it, a reader that comes late reads on
//! its own, and a feed whose readers do not all come opens anyway.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::{self, kv};
use jetcron_core::schedule_lines::SharedLines;
use jetcron_io::job_feed::{FeedEvent, FeedReceiver, JobEntry, JobFeed, Written, GATHER_WAIT};
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_testkit::NatsServer;

/// What a reader was told up to the bucket's sync: the entries, in order.
async fn until_synced(reader: &mut FeedReceiver) -> Vec<Arc<JobEntry>> {
    until_synced_within(reader, Duration::from_secs(10)).await
}

/// [`until_synced`], the watch opening within `wait`.
async fn until_synced_within(reader: &mut FeedReceiver, wait: Duration) -> Vec<Arc<JobEntry>> {
    let mut entries = Vec::new();
    let first = tokio::time::timeout(wait, reader.recv()).await;
    assert!(
        matches!(first, Ok(Some(FeedEvent::Opened { keys })) if keys < 10_000),
        "a watch first says how many keys it opens on: {first:?}"
    );
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), reader.recv())
            .await
            .expect("an event within 10 s")
            .expect("the feed goes on");
        match event {
            FeedEvent::Entries(batch) => entries.extend(batch.iter().cloned()),
            FeedEvent::Synced => return entries,
            FeedEvent::Opened { keys } => panic!("a watch opened again ({keys} keys)"),
        }
    }
}

async fn next_entry(reader: &mut FeedReceiver) -> Arc<JobEntry> {
    match tokio::time::timeout(Duration::from_secs(10), reader.recv()).await {
        Ok(Some(FeedEvent::Opened { keys })) => panic!("a watch opened again ({keys} keys)"),
        Ok(Some(FeedEvent::Entries(batch))) if batch.len() == 1 => batch[0].clone(),
        other => panic!("expected an entry, got {other:?}"),
    }
}

/// `key revision what` of an entry.
fn described(entry: &JobEntry) -> String {
    let what = match &entry.written {
        Written::Valid(_) => "valid",
        Written::Invalid { .. } => "invalid",
        Written::Removed => "removed",
        Written::NotChained => "not chained",
    };
    format!("{} {} {what}", entry.key, entry.revision)
}

fn job(id: &str) -> Vec<u8> {
    format!(
        r#"{{"id":"{id}","schedule":"@every 1h","target":{{"type":"shell","command":"true"}}}}"#
    )
    .into_bytes()
}

/// The consumers on the bucket's stream: how many read every key's last
/// value (a first read; one that finished may already be gone), and how
/// many follow changes from a sequence (a live watch).
async fn consumers(js: &jetstream::Context) -> (usize, usize) {
    use futures::TryStreamExt as _;
    let stream = js.get_stream("KV_jetcron_jobs").await.expect("jobs stream");
    let infos: Vec<_> = stream
        .consumers()
        .try_collect()
        .await
        .expect("consumer list");
    let count = |wanted: fn(&DeliverPolicy) -> bool| {
        infos
            .iter()
            .filter(|info| wanted(&info.config.deliver_policy))
            .count()
    };
    (
        count(|p| matches!(p, DeliverPolicy::LastPerSubject)),
        count(|p| matches!(p, DeliverPolicy::ByStartSequence { .. })),
    )
}

/// A nats-server with the jobs bucket, and a client of it.
async fn server_with_jobs_bucket() -> (
    NatsServer,
    async_nats::Client,
    jetstream::Context,
    kv::Store,
) {
    let nats = NatsServer::start();
    let client = nats.client().await;
    let js = jetstream::new(client.clone());
    let bucket = topology::ensure_jobs_bucket(&js, &TopologyOptions::default())
        .await
        .expect("jobs bucket");
    (nats, client, js, bucket)
}

/// Each entry [`described`].
fn listed(entries: &[Arc<JobEntry>]) -> Vec<String> {
    entries.iter().map(|e| described(e)).collect()
}

#[tokio::test]
async fn the_services_of_a_process_share_one_watch_and_one_decoding() {
    let (_nats, client, js, bucket) = server_with_jobs_bucket().await;
    for id in ["alpha", "beta", "gamma"] {
        bucket.put(id, job(id).into()).await.expect("put");
    }
    bucket
        .put("broken", r#"{"schedule":"61 * * * *"}"#.into())
        .await
        .expect("put");
    bucket.delete("beta").await.expect("delete");

    let lines = SharedLines::default();
    let feed = JobFeed::new(3);
    let mut readers: Vec<FeedReceiver> = (0..3).map(|_| feed.subscribe(&client, &lines)).collect();
    let mut seen = Vec::new();
    for reader in &mut readers {
        seen.push(until_synced(reader).await);
    }
    assert_eq!(
        listed(&seen[0]),
        [
            "alpha 1 valid",
            "gamma 3 valid",
            "broken 4 invalid",
            "beta 5 removed"
        ]
    );
    for other in &seen[1..] {
        assert_eq!(other.len(), seen[0].len());
        for (a, b) in seen[0].iter().zip(other) {
            assert!(Arc::ptr_eq(a, b), "{} decoded more than once", a.key);
        }
    }
    let (first_reads, watches) = consumers(&js).await;
    assert!(
        first_reads <= 1,
        "{first_reads} first reads for three readers"
    );
    assert_eq!(watches, 1, "three readers, one watch");

    // A change after the sync reaches every reader, decoded once.
    bucket.put("delta", job("delta").into()).await.expect("put");
    let first = next_entry(&mut readers[0]).await;
    assert_eq!(described(&first), "delta 6 valid");
    for reader in &mut readers[1..] {
        assert!(Arc::ptr_eq(&first, &next_entry(reader).await));
    }

    // A reader that comes after the watch opened reads on its own, and
    // still gets every current value and the sync.
    let mut late = feed.subscribe(&client, &lines);
    assert_eq!(
        listed(&until_synced(&mut late).await),
        [
            "alpha 1 valid",
            "gamma 3 valid",
            "broken 4 invalid",
            "beta 5 removed",
            "delta 6 valid"
        ]
    );
    // Its watch of later changes is created after it was told Synced.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut watches = consumers(&js).await.1;
    while watches < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        watches = consumers(&js).await.1;
    }
    assert_eq!(watches, 2, "the late reader's own watch");
}

#[tokio::test]
async fn a_feed_whose_readers_do_not_all_come_opens_without_them() {
    let (_nats, client, _, bucket) = server_with_jobs_bucket().await;
    bucket.put("alpha", job("alpha").into()).await.expect("put");
    let feed = JobFeed::new(3);
    let started = Instant::now();
    let mut only = feed.subscribe(&client, &SharedLines::default());
    let entries = until_synced(&mut only).await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].key, "alpha");
    assert!(
        started.elapsed() >= GATHER_WAIT,
        "opened after {:?}, before the others' wait",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_feed_for_a_chain_index_alone_decodes_only_chained_jobs() {
    let (_nats, client, _, bucket) = server_with_jobs_bucket().await;
    bucket
        .put("parent", job("parent").into())
        .await
        .expect("put");
    let child =
        r#"{"id":"child","after":[{"job":"parent"}],"target":{"type":"shell","command":"true"}}"#;
    bucket.put("child", child.into()).await.expect("put");
    let mut reader = JobFeed::chains_only().subscribe(&client, &SharedLines::default());
    assert_eq!(
        listed(&until_synced(&mut reader).await),
        ["parent 1 not chained", "child 2 valid"]
    );
    // Changes after the first read come the same way.
    bucket.put("plain", job("plain").into()).await.expect("put");
    assert_eq!(
        described(&*next_entry(&mut reader).await),
        "plain 3 not chained"
    );
}

/// Put more jobs than a reader's queue holds, so that a feed's first read
/// waits for its readers; how many.
async fn put_more_than_a_queue(bucket: &kv::Store) -> usize {
    let jobs = jetcron_io::job_feed::QUEUE + 500;
    for i in 0..jobs {
        let id = format!("job-{i:05}");
        bucket.put(&id, job(&id).into()).await.expect("put");
    }
    jobs
}

/// Whether `first_read` is delivered within `wait`.
async fn delivered_within(first_read: &jetcron_io::job_feed::FirstRead, wait: Duration) -> bool {
    tokio::time::timeout(wait, first_read.clone().delivered())
        .await
        .is_ok()
}

#[tokio::test]
async fn the_first_read_is_told_once_every_reader_has_it_or_the_feed_ended() {
    let (_nats, client, _, bucket) = server_with_jobs_bucket().await;
    // The feed waits for readers that do not read.
    let jobs = put_more_than_a_queue(&bucket).await;
    let lines = SharedLines::default();
    let feed = JobFeed::new(2);
    let first_read = feed.first_read();
    let mut readers: Vec<FeedReceiver> = (0..2).map(|_| feed.subscribe(&client, &lines)).collect();
    assert!(
        !delivered_within(&first_read, Duration::from_millis(500)).await,
        "told before any reader read"
    );
    let (a, b) = readers.split_at_mut(1);
    let (seen_a, seen_b) = tokio::join!(until_synced(&mut a[0]), until_synced(&mut b[0]));
    assert_eq!((seen_a.len(), seen_b.len()), (jobs, jobs));
    assert!(
        delivered_within(&first_read, Duration::from_secs(5)).await,
        "not told after both readers were synced"
    );

    // A feed whose readers are gone before its first read ends it: nothing
    // is left to wait for.
    let feed = JobFeed::new(1);
    let first_read = feed.first_read();
    drop(feed.subscribe(&client, &lines));
    assert!(
        delivered_within(&first_read, Duration::from_secs(10)).await,
        "a feed that ended still keeps its waiters waiting"
    );
}

#[tokio::test]
async fn a_feed_opened_after_another_waits_for_its_first_read() {
    let (_nats, client, js, bucket) = server_with_jobs_bucket().await;
    // The first feed's read cannot end before its reader reads.
    let jobs = put_more_than_a_queue(&bucket).await;
    let lines = SharedLines::default();
    let first = JobFeed::new(1);
    let later = JobFeed::new(2).opened_after(&first);
    // The later feed's readers come first, and both of them.
    let mut views: Vec<FeedReceiver> = (0..2).map(|_| later.subscribe(&client, &lines)).collect();
    let mut ticker = first.subscribe(&client, &lines);
    // The first feed's read has begun (its reader has not read yet).
    let began = Instant::now();
    while consumers(&js).await.0 == 0 {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "no first read began"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let early = tokio::time::timeout(Duration::from_millis(700), views[0].recv()).await;
    assert!(
        early.is_err(),
        "the later feed spoke before the first one's read: {early:?}"
    );
    assert_eq!(
        consumers(&js).await.0,
        1,
        "only the first feed reads the bucket until its read is done"
    );

    assert_eq!(until_synced(&mut ticker).await.len(), jobs);
    let (a, b) = views.split_at_mut(1);
    let (seen_a, seen_b) = tokio::join!(until_synced(&mut a[0]), until_synced(&mut b[0]));
    assert_eq!(
        (listed(&seen_a), seen_a.len()),
        (listed(&seen_b), jobs),
        "the later feed's readers share one read of every job"
    );

    // Changes reach the readers of both feeds.
    let revision = bucket
        .put("job-new", job("job-new").into())
        .await
        .expect("put");
    let (to_ticker, to_view) = (
        next_entry(&mut ticker).await,
        next_entry(&mut views[0]).await,
    );
    let expected = format!("job-new {revision} valid");
    assert_eq!(
        (described(&to_ticker), described(&to_view)),
        (expected.clone(), expected)
    );
}

#[tokio::test]
async fn a_feed_waited_for_that_never_opens_or_ends_first_is_not_waited_for_forever() {
    let (_nats, client, _, bucket) = server_with_jobs_bucket().await;
    bucket.put("alpha", job("alpha").into()).await.expect("put");
    let lines = SharedLines::default();

    // Its reader never comes (a ticker still waiting for its streams): the
    // later feed opens once it has waited a gathering's time.
    let never = JobFeed::new(1);
    let later = JobFeed::new(1).opened_after(&never);
    let began = Instant::now();
    let mut view = later.subscribe(&client, &lines);
    assert_eq!(
        listed(&until_synced_within(&mut view, GATHER_WAIT * 3).await),
        ["alpha 1 valid"]
    );
    assert!(
        began.elapsed() >= GATHER_WAIT,
        "opened after {:?}, before the feed it waits for had its chance",
        began.elapsed()
    );

    // It ends before its read is done (its reader stopped: the process is
    // stopping): the later feed does not start a read of its own then.
    let ending = JobFeed::new(1);
    let later = JobFeed::new(1).opened_after(&ending);
    let mut view = later.subscribe(&client, &lines);
    drop(ending.subscribe(&client, &lines));
    assert!(
        delivered_within(&ending.first_read(), Duration::from_secs(10)).await,
        "the feed whose reader left did not end"
    );
    let event = tokio::time::timeout(GATHER_WAIT + Duration::from_secs(2), view.recv()).await;
    assert!(
        event.is_err(),
        "a feed opened after one that ended unread: {event:?}"
    );
}
