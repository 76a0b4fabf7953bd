//! Executors follow the kill requests of `jetcron_running` in memory
//! (`jetcron_executor::kill_markers`): once caught up they answer without a
//! KV read. Each check asks with a *second* bucket as the one to read, which
//! holds other markers than the followed one, so an answer that came from a
//! read would differ from one that came from memory.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use jetcron_executor::kill_markers::KillMarkers;
use jetcron_io::control;
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_testkit::{wait_until, NatsServer};
use tokio_util::sync::CancellationToken;

const BEFORE: &str = "0b6a1e52-6a0c-5f0e-9d4b-2f1f5f0a9c11";
const AFTER: &str = "1c7b2f63-7b1d-5f1f-8e5c-3f2f6f1b8d22";
const ONLY_ELSEWHERE: &str = "2d8c3074-8c2e-5f2f-9f6d-4f3f7f2c9e33";

#[tokio::test]
async fn kill_requests_are_followed_in_memory_and_answered_without_a_read() {
    let nats = NatsServer::start();
    let js = jetstream::new(nats.client().await);
    let running = topology::ensure_running_bucket(&js, &TopologyOptions::default())
        .await
        .expect("running bucket");
    let elsewhere = js
        .create_key_value(kv::Config {
            bucket: "elsewhere".into(),
            ..Default::default()
        })
        .await
        .expect("second bucket");
    let now = chrono::Utc::now();
    control::mark_killed(&running, BEFORE, "before the watch", now)
        .await
        .expect("mark");
    control::mark_killed(&elsewhere, ONLY_ELSEWHERE, "not followed", now)
        .await
        .expect("mark");

    let markers = Arc::new(KillMarkers::keeping_for(
        TopologyOptions::default().running_max_age,
        Arc::new(jetcron_core::clock::SystemClock),
    ));
    let stop = CancellationToken::new();
    let follower = tokio::spawn({
        let (markers, running, stop) = (markers.clone(), running.clone(), stop.clone());
        async move { markers.follow(&running, &stop).await }
    });
    let from_memory = |run: &'static str| {
        let (markers, elsewhere) = (markers.clone(), elsewhere.clone());
        async move { markers.requested(&elsewhere, run).await.expect("answer") }
    };

    let found = wait_until(
        "the request made before the watch",
        Duration::from_secs(5),
        || async { from_memory(BEFORE).await },
    )
    .await;
    assert_eq!(found.reason, "before the watch");
    // Caught up: a run the followed bucket has no request for is answered
    // from memory, not by reading (the bucket given to read has one).
    assert_eq!(from_memory(ONLY_ELSEWHERE).await, None);

    control::mark_killed(&running, AFTER, "while followed", now)
        .await
        .expect("mark");
    let found = wait_until(
        "the request made while followed",
        Duration::from_secs(5),
        || async { from_memory(AFTER).await },
    )
    .await;
    assert_eq!(found.reason, "while followed");

    running
        .delete(jetcron_core::subjects::kill_key(BEFORE))
        .await
        .expect("delete");
    wait_until(
        "the deleted request to be gone",
        Duration::from_secs(5),
        || async { from_memory(BEFORE).await.is_none().then_some(()) },
    )
    .await;

    stop.cancel();
    follower.await.expect("follower");
}
