//! How the ticker counts a batch of due events as stored
//! ([`jetcron_ticker::publish::collect_acks`]): their acks awaited in order
//! under one deadline, against a real nats-server. A fire counted stored
//! that was not is lost; one counted unstored is offered again and dropped
//! as a duplicate, so the count must be exact where the acks came.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::PublishAckFuture};
use async_nats::HeaderMap;
use jetcron_testkit::NatsServer;
use jetcron_ticker::publish::collect_acks;

/// Publish to `subject` without waiting for the ack (with `Nats-Msg-Id`
/// `id` when given); `None` where the send itself failed.
async fn send(
    js: &jetstream::Context,
    subject: &'static str,
    id: Option<&str>,
) -> Option<PublishAckFuture> {
    let mut headers = HeaderMap::new();
    if let Some(id) = id {
        headers.insert("Nats-Msg-Id", id);
    }
    js.publish_with_headers(subject, headers, "due".into())
        .await
        .ok()
}

#[tokio::test]
async fn a_batch_counts_what_was_stored_and_what_was_acked_by_its_deadline() {
    let server = NatsServer::start();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = jetstream::new(client.clone());
    js.create_stream(jetstream::stream::Config {
        name: "ACKS".into(),
        subjects: vec!["acks.>".into()],
        ..Default::default()
    })
    .await
    .expect("stream");
    // Taken by a subscriber that never answers: its ack never comes.
    let _silent = client.subscribe("silent.>").await.expect("subscribe");
    client.flush().await.expect("flush");

    let pending = vec![
        send(&js, "acks.a", Some("fire-a")).await,
        // A send that failed before it reached the server.
        None,
        // No stream takes it: "no responders".
        send(&js, "nowhere.b", None).await,
        // Stored already: a duplicate counts as stored.
        send(&js, "acks.a", Some("fire-a")).await,
        send(&js, "silent.c", None).await,
        // Acked while the one before it waited out the deadline.
        send(&js, "acks.d", Some("fire-d")).await,
    ];
    let started = Instant::now();
    let stored = collect_acks(pending, Duration::from_millis(500)).await;
    let took = started.elapsed();
    assert_eq!(stored, vec![true, false, false, true, false, true]);
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(2),
        "the batch waited {took:?} for a deadline of 500 ms"
    );
    let stream = js.get_stream("ACKS").await.expect("stream");
    let messages = stream.get_info().await.expect("info").state.messages;
    assert_eq!(messages, 2, "fire-a once and fire-d");
}
