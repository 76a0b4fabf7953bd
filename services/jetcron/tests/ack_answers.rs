//! A keep-alive renews the lease that lets a delivery hand its fire on
//! only when a consumer leader took it (`jetcron_executor::ack_replies`):
//! nats-server answers a progress ack that carries a reply subject, and
//! answers "no responders" when nobody subscribes to the consumer's acks
//! (no leader: here, the consumer deleted).

use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, AckKind};
use futures::StreamExt as _;
use jetcron_executor::ack_replies::AckReplies;
use jetcron_testkit::NatsServer;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_progress_ack_is_answered_by_the_consumer_and_by_nobody_once_it_is_gone() {
    let nats = NatsServer::start();
    let client = nats.client().await;
    let js = jetstream::new(client.clone());
    let stream = js
        .create_stream(jetstream::stream::Config {
            name: "ANSWERS".into(),
            subjects: vec!["answers.>".into()],
            ..Default::default()
        })
        .await
        .expect("stream");
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("taker".into()),
            ack_wait: Duration::from_secs(30),
            ..Default::default()
        })
        .await
        .expect("consumer");
    js.publish("answers.one", "x".into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    // A request that waits for it: a `fetch` (no wait) sent right after
    // the store can reach the consumer before the message does, and
    // comes back empty (seen once on a loaded machine).
    let message = consumer
        .batch()
        .max_messages(1)
        .expires(Duration::from_secs(10))
        .messages()
        .await
        .expect("fetch")
        .next()
        .await
        .expect("a message")
        .expect("delivered");
    let ack_subject = message.reply.clone().expect("a JetStream message");

    let (replies, answers) = AckReplies::subscribe(&client).await.expect("subscribe");
    let stop = CancellationToken::new();
    let routing = tokio::spawn({
        let (replies, stop) = (replies.clone(), stop.clone());
        async move { replies.route(answers, stop).await }
    });
    let progress = |expected_reply: String| {
        let (client, subject) = (client.clone(), ack_subject.clone());
        async move {
            client
                .publish_with_reply(subject, expected_reply, AckKind::Progress.into())
                .await
                .expect("sent");
        }
    };

    let expected = replies.expect();
    progress(expected.reply.clone()).await;
    assert!(
        expected.taken().await,
        "the consumer's leader answers a progress ack"
    );

    stream
        .delete_consumer("taker")
        .await
        .expect("delete consumer");
    let expected = replies.expect();
    progress(expected.reply.clone()).await;
    let started = std::time::Instant::now();
    assert!(
        !expected.taken().await,
        "nobody takes the acks of a consumer that is gone"
    );
    assert!(
        started.elapsed() < jetcron_executor::ack_replies::ANSWER_WITHIN,
        "'no responders' comes at once, not after the answer's wait ({:?})",
        started.elapsed()
    );
    stop.cancel();
    routing.await.expect("router");
}
