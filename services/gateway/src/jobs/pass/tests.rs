//! A pass against a real nats-server (testkit): what it hands out, where it
//! stops, that it waits for its reader, and that the gateway's NATS role of
//! `infra/nats/roles.conf` may run it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use futures::{StreamExt as _, TryStreamExt as _};
use jetcron_core::schedule::Schedule;
use jetcron_core::schedule_lines::SharedLines;
use jetcron_io::topology::{self, TopologyOptions};
use jetcron_testkit::NatsServer;

use super::*;

/// A valid definition of `id` on `line`, `extra` added to its fields.
fn job(id: &str, line: &str, extra: &str) -> Vec<u8> {
    format!(
        r#"{{"id":"{id}","schedule":"{line}","target":{{"type":"nats","subject":"targets.echo"}}{extra}}}"#
    )
    .into_bytes()
}

/// The jobs bucket as the gateway opens it, on `client`.
async fn jobs_bucket(client: async_nats::Client) -> (kv::Store, jetstream::Context) {
    let js = jetstream::new(client.clone());
    let bucket =
        topology::ensure_jobs_bucket(&topology::context(client), &TopologyOptions::default())
            .await
            .expect("jobs bucket");
    (bucket, js)
}

async fn put(bucket: &kv::Store, key: &str, value: &[u8]) {
    bucket
        .put(key, value.to_vec().into())
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
}

/// `count` valid jobs `job-00000`…, a description making each about 400 bytes.
async fn put_many(bucket: &kv::Store, count: usize) {
    let padding = format!(r#","description":"{}""#, "x".repeat(250));
    futures::stream::iter(0..count)
        .map(|i| {
            let id = format!("job-{i:05}");
            let value = job(&id, "0 * * * *", &padding);
            async move { bucket.put(id, value.into()).await }
        })
        .buffer_unordered(256)
        .try_collect::<Vec<u64>>()
        .await
        .expect("put jobs");
}

fn ids(jobs: &[CurrentJob]) -> Vec<&str> {
    jobs.iter().map(|j| j.job.spec.id.as_str()).collect()
}

#[tokio::test]
async fn a_pass_hands_out_each_current_valid_definition_once_in_chunks() {
    let nats = NatsServer::start();
    let (bucket, js) = jobs_bucket(nats.client().await).await;
    put(&bucket, "a", &job("a", "*/5 * * * *", "")).await;
    put(&bucket, "b", &job("b", "61 * * * *", "")).await;
    put(&bucket, "c", &job("c", "0 * * * *", "")).await;
    put(&bucket, "d", &job("d", "0 * * * *", "")).await;
    bucket.delete("d").await.expect("delete d");
    put(&bucket, "e", &job("e", "0 * * * *", "")).await;
    put(
        &bucket,
        "a",
        &job("a", "*/10 * * * *", r#","description":"second""#),
    )
    .await;
    put(&bucket, "f", b"not json").await;
    put(&bucket, "g", &job("not-g", "0 * * * *", "")).await;

    let mut pass = JobPass::open(&bucket, &js, SharedLines::default())
        .await
        .expect("open a pass");
    let first = pass.next_chunk(2).await.expect("read").expect("a chunk");
    let second = pass.next_chunk(2).await.expect("read").expect("a chunk");
    assert!(pass.next_chunk(2).await.expect("read").is_none());

    // In the order of their last writes; the invalid (b: a bad line, f: not
    // JSON, g: the id is not the key) and the deleted (d) ones skipped; a
    // rewritten key once, at its last revision.
    assert_eq!(ids(&first), ["c", "e"]);
    assert_eq!(ids(&second), ["a"]);
    assert_eq!(second[0].job.spec.description.as_deref(), Some("second"));
    for current in first.iter().chain(&second) {
        let entry = bucket
            .entry(&current.job.spec.id)
            .await
            .expect("entry")
            .expect("exists");
        assert_eq!(current.written_at, entry.created, "{}", entry.key);
    }
    // Jobs on one line share its parse.
    match (&first[0].job.schedule, &first[1].job.schedule) {
        (Schedule::Cron(c), Schedule::Cron(e)) => assert!(Arc::ptr_eq(c, e)),
        other => panic!("cron lines expected: {other:?}"),
    }
}

#[tokio::test]
async fn a_pass_over_nothing_ends_at_once() {
    let nats = NatsServer::start();
    let (bucket, js) = jobs_bucket(nats.client().await).await;
    let within = Duration::from_secs(2);
    let mut empty = JobPass::open(&bucket, &js, SharedLines::default())
        .await
        .expect("open a pass");
    let read = tokio::time::timeout(within, empty.next_chunk(10)).await;
    assert!(read.expect("ends at once").expect("read").is_none());

    // Only a delete marker left: read, skipped, and the pass ends.
    put(&bucket, "gone", &job("gone", "0 * * * *", "")).await;
    bucket.delete("gone").await.expect("delete");
    let mut deleted = JobPass::open(&bucket, &js, SharedLines::default())
        .await
        .expect("open a pass");
    let read = tokio::time::timeout(within, deleted.next_chunk(10)).await;
    assert!(read.expect("ends at once").expect("read").is_none());
}

#[tokio::test]
async fn a_pass_waits_for_its_reader_and_loses_nothing() {
    const JOBS: usize = 20_000;
    let nats = NatsServer::start();
    let (bucket, js) = jobs_bucket(nats.client().await).await;
    put_many(&bucket, JOBS).await;

    let mut pass = JobPass::open(&bucket, &js, SharedLines::default())
        .await
        .expect("open a pass");
    let first = pass.next_chunk(10).await.expect("read").expect("a chunk");
    // The reader is busy with its chunk: the server stops at the pass's
    // window of unacknowledged messages instead of sending everything into
    // memory (where the client's subscription would drop what it cannot hold).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stream = js.get_stream("KV_jetcron_jobs").await.expect("stream");
    let consumers: Vec<_> = stream.consumers().try_collect().await.expect("consumers");
    assert_eq!(consumers.len(), 1, "the pass's consumer only");
    let sent = consumers[0].delivered.consumer_sequence;
    assert!(
        sent <= jetcron_io::stream_pass::IN_FLIGHT as u64,
        "{sent} of {JOBS} sent to a reader that took 10"
    );

    let mut seen: BTreeSet<String> = first.iter().map(|j| j.job.spec.id.clone()).collect();
    let mut handed_out = first.len();
    while let Some(chunk) = pass.next_chunk(2_000).await.expect("read") {
        assert!(chunk.len() <= 2_000);
        handed_out += chunk.len();
        seen.extend(chunk.into_iter().map(|j| j.job.spec.id));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!((handed_out, seen.len()), (JOBS, JOBS), "each job once");
}

#[tokio::test]
async fn the_gateway_role_may_run_a_pass() {
    const ROLES_CONF: &str = include_str!("../../../../../infra/nats/roles.conf");
    // Every password roles.conf reads from the environment.
    let vars: BTreeSet<&str> = ROLES_CONF
        .split('$')
        .skip(1)
        .filter_map(|rest| {
            let end = rest
                .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                .unwrap_or(rest.len());
            rest[..end].ends_with("_PASSWORD").then(|| &rest[..end])
        })
        .collect();
    assert!(vars.contains("JETCRON_NATS_GATEWAY_PASSWORD"), "{vars:?}");
    let env: Vec<(&str, &str)> = vars.iter().map(|v| (*v, "pw-4b1e")).collect();
    // Answers allowed as responses expire after 1 s here (2 minutes by
    // default): the pass's acks, sent a chunk later, need their own grant.
    assert!(ROLES_CONF.contains("allow_responses = true"));
    let conf = ROLES_CONF.replace(
        "allow_responses = true",
        r#"allow_responses = { max: 1, expires: "1s" }"#,
    );
    let nats = NatsServer::start_with_config_env(&conf, &env);
    let client =
        async_nats::ConnectOptions::with_user_and_password("gateway".into(), "pw-4b1e".into())
            .connect(nats.url())
            .await
            .expect("connect as gateway");
    let (bucket, js) = jobs_bucket(client).await;
    // Past 1 MiB: the server asks for flow control at least once.
    put_many(&bucket, 5_000).await;

    let mut pass = JobPass::open(&bucket, &js, SharedLines::default())
        .await
        .expect("open a pass");
    let mut handed_out = 0;
    while let Some(chunk) = pass.next_chunk(1_000).await.expect("read") {
        handed_out += chunk.len();
        // A slow chunk: each ack goes out over 1 s after its message came.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
    }
    assert_eq!(handed_out, 5_000);
    let violations = nats.permission_violations();
    assert!(violations.is_empty(), "{violations:#?}");
}
