//! The definition a due event carries when the ticker does not keep it in
//! memory: read back from `jetcron_jobs` by revision at the fire, the key's
//! current value when that revision left the bucket's history, and no fire
//! at all for a key deleted since.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use chrono::Utc;
use futures::StreamExt as _;
use jetcron_core::events::DueEvent;
use jetcron_core::job::parse_job;
use jetcron_core::schedule_lines::SharedLines;
use jetcron_core::subjects;
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_testkit::NatsServer;
use jetcron_ticker::definitions::{Definitions, Resolved};
use jetcron_ticker::plan::{Fire, FiredJob};

fn definition(description: &str) -> String {
    format!(
        r#"{{"schedule":"* * * * * *","description":"{description}","target":{{"type":"nats","subject":"readback.target"}}}}"#
    )
}

/// A fire of `id` decided from `value` at `revision`.
fn fire_of(id: &str, value: &str, revision: u64) -> Fire {
    let job = parse_job(value.as_bytes(), Some(id)).expect("valid");
    let now = Utc::now();
    Fire {
        job: FiredJob {
            id: Arc::from(id),
            pool: Arc::new(job.pool.clone()),
            revision,
        },
        scheduled_at: now,
        fire_at: now,
    }
}

fn description_of(resolved: &Resolved) -> (u64, String) {
    match resolved {
        Resolved::Definition { revision, spec } => {
            let spec: jetcron_core::job::JobSpec =
                serde_json::from_str(spec.get()).expect("an encoded spec decodes");
            (*revision, spec.description.unwrap_or_default())
        }
        other => panic!("expected a definition, got {other:?}"),
    }
}

async fn next_event(due: &mut async_nats::Subscriber) -> DueEvent {
    let message = tokio::time::timeout(Duration::from_secs(10), due.next())
        .await
        .expect("a due event within 10 s")
        .expect("subscription open");
    serde_json::from_slice(&message.payload).expect("due event")
}

/// Counts the direct gets sent to the jobs bucket's stream by sequence (a
/// plain subscriber sees every request on that subject).
async fn count_reads(client: &async_nats::Client) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let mut by_sequence = client
        .subscribe("$JS.API.DIRECT.GET.KV_jetcron_jobs")
        .await
        .expect("subscribe");
    let counted = Arc::clone(&count);
    tokio::spawn(async move {
        while by_sequence.next().await.is_some() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    count
}

/// What [`ticker_with_a_job`] started.
struct TickerWithAJob {
    due: async_nats::Subscriber,
    reads: Arc<AtomicUsize>,
    first: u64,
    bucket: jetstream::kv::Store,
    shutdown: tokio_util::sync::CancellationToken,
    ticker: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// A job `readback` due every second, then a ticker keeping definitions for
/// `keep_for`; its due events and its reads of the bucket are watched.
async fn ticker_with_a_job(nats: &NatsServer, keep_for: Duration) -> TickerWithAJob {
    let client = nats.client().await;
    let js = jetstream::new(client.clone());
    let bucket = topology::ensure_jobs_bucket(&js, &TopologyOptions::default())
        .await
        .expect("jobs bucket");
    let due = client
        .subscribe(subjects::due_subject(subjects::DEFAULT_POOL, "readback"))
        .await
        .expect("subscribe");
    let reads = count_reads(&client).await;
    let first = bucket
        .put("readback", definition("first").into())
        .await
        .expect("put");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let ticker = tokio::spawn(jetcron_ticker::run(
        jetcron_ticker::TickerConfig {
            leases: jetcron_testkit::fast_leases(),
            keep_definitions_for: keep_for,
            ..Default::default()
        },
        client,
        Arc::new(jetcron_core::clock::SystemClock),
        shutdown.clone(),
    ));
    TickerWithAJob {
        due,
        reads,
        first,
        bucket,
        shutdown,
        ticker,
    }
}

#[tokio::test]
async fn a_ticker_keeping_definitions_reads_an_every_second_job_back_at_most_once() {
    let nats = NatsServer::start();
    let mut run = ticker_with_a_job(&nats, jetcron_ticker::definitions::KEEP_FOR).await;
    for _ in 0..5 {
        let event = next_event(&mut run.due).await;
        assert_eq!(event.job_revision, run.first);
        assert_eq!(event.job.description.as_deref(), Some("first"));
    }
    // At a start the watch delivers jobs before shards are owned, so the
    // first fire may read its definition back; it is kept from then on.
    let read = run.reads.load(Ordering::SeqCst);
    assert!(
        read <= 1,
        "{read} reads for 5 fires of a job due every second"
    );
    run.shutdown.cancel();
    run.ticker.await.expect("join").expect("ticker");
}

#[tokio::test]
async fn a_ticker_keeping_no_definitions_publishes_each_fire_with_its_revision() {
    let nats = NatsServer::start();
    let TickerWithAJob {
        mut due,
        reads,
        first,
        bucket,
        shutdown,
        ticker,
    } = ticker_with_a_job(&nats, Duration::ZERO).await;
    let event = next_event(&mut due).await;
    assert_eq!(event.job_revision, first);
    assert_eq!(event.job.description.as_deref(), Some("first"));
    assert_eq!(event.job.id, "readback");

    let second = bucket
        .put("readback", definition("second").into())
        .await
        .expect("edit");
    // Fires decided before the edit may still carry the first revision;
    // the edit shows within a few fires, and every fire after it carries it.
    let mut seen_second = 0;
    for _ in 0..8 {
        let event = next_event(&mut due).await;
        if seen_second > 0 {
            assert_eq!(event.job_revision, second, "an older revision came back");
        }
        if event.job_revision == second {
            assert_eq!(event.job.description.as_deref(), Some("second"));
            seen_second += 1;
        } else {
            assert_eq!(event.job_revision, first);
            assert_eq!(event.job.description.as_deref(), Some("first"));
        }
        if seen_second == 3 {
            break;
        }
    }
    assert_eq!(
        seen_second, 3,
        "the edited definition never fired three times"
    );
    // Keeping nothing, every fire read its definition back.
    let read = reads.load(Ordering::SeqCst);
    assert!(read >= 4, "{read} reads for at least 4 fires");
    shutdown.cancel();
    ticker.await.expect("join").expect("ticker");
}

#[tokio::test]
async fn a_revision_gone_from_the_history_reads_the_current_value_and_a_deleted_key_fires_nothing()
{
    let nats = NatsServer::start();
    let js = jetstream::new(nats.client().await);
    // One revision per key: a new value removes the old one.
    let options = TopologyOptions {
        jobs_history: 1,
        ..Default::default()
    };
    let bucket = topology::ensure_jobs_bucket(&js, &options)
        .await
        .expect("jobs bucket");
    let old_value = definition("old");
    let old = bucket
        .put("edited", old_value.clone().into())
        .await
        .expect("put");
    let mut definitions = Definitions::new(
        js.get_stream_no_info(&bucket.stream_name)
            .await
            .expect("stream handle"),
        Duration::from_secs(60),
        SharedLines::default(),
    );

    // Its own revision, read back.
    let resolved = definitions
        .resolve(&[fire_of("edited", &old_value, old)])
        .await;
    assert_eq!(description_of(&resolved[0]), (old, "old".to_string()));

    // The revision is gone: the current value is carried, with its revision.
    let new = bucket
        .put("edited", definition("new").into())
        .await
        .expect("edit");
    let resolved = definitions
        .resolve(&[fire_of("edited", &old_value, old)])
        .await;
    assert_eq!(description_of(&resolved[0]), (new, "new".to_string()));

    // Read back once and firing again soon: kept, so the next fire of that
    // revision needs no read.
    let fire = fire_of("edited", &old_value, new);
    let resolved = definitions.resolve(std::slice::from_ref(&fire)).await;
    definitions.settled(&fire, &resolved[0], Some(Utc::now()), Utc::now());
    assert_eq!(definitions.len(), 1);
    // Not firing again soon: let go.
    definitions.settled(&fire, &resolved[0], None, Utc::now());
    assert!(definitions.is_empty());

    // Held in memory at the fire's revision: no read, the held one is used.
    let fire = fire_of("edited", &definition("held"), new);
    let held = parse_job(definition("held").as_bytes(), Some("edited")).expect("valid");
    definitions.keep_if_soon(&fire.job.id, new, &held.spec, Some(Utc::now()), Utc::now());
    assert_eq!(definitions.len(), 1);
    let resolved = definitions.resolve(std::slice::from_ref(&fire)).await;
    assert_eq!(description_of(&resolved[0]), (new, "held".to_string()));
    definitions.forget("edited");
    assert!(definitions.is_empty());

    // Deleted since: nothing to run.
    bucket.delete("edited").await.expect("delete");
    let resolved = definitions
        .resolve(&[fire_of("edited", &old_value, old)])
        .await;
    assert!(matches!(resolved[0], Resolved::Gone), "{resolved:?}");
    // A key never written, at a revision the stream never had.
    let resolved = definitions
        .resolve(&[fire_of("never", &old_value, 999_999)])
        .await;
    assert!(matches!(resolved[0], Resolved::Gone), "{resolved:?}");
}
