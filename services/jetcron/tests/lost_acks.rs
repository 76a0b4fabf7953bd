//! The ack of a due event is sent unconfirmed (docs/architecture.md, "What
//! one run costs"). When it is lost (a consumer leader elected, an executor
//! gone before the ack left), JetStream hands the message out again after
//! its run ended: that delivery must settle it without calling the target.
//! Here the lost ack is made by hand: a copy of a finished run's due event
//! (same run, stored under another message id) is delivered once and naked
//! by the test, so an executor meets it as delivery 2 of a run that ended;
//! and a copy met as delivery 1 repeats the delivery count of the attempt
//! that ran (consumer state lost in an election).

use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, AckKind};
use futures::StreamExt as _;
use jetcron_core::events::{DueEvent, RunEvent, RunEventKind, RunId};
use jetcron_core::subjects;
use jetcron_testkit::{test_executor_config, wait_until, Stack, StackOptions};
use tokio_util::sync::CancellationToken;

/// The due event of `job_id`'s pending fire, as stored.
async fn stored_due_event(stack: &Stack, job_id: &str) -> (String, Vec<u8>) {
    let stream = stack
        .js
        .get_stream(subjects::DUE_STREAM)
        .await
        .expect("due stream");
    let subject = subjects::due_subject("default", job_id);
    let message = wait_until("the due event", Duration::from_secs(10), || async {
        stream.get_last_raw_message_by_subject(&subject).await.ok()
    })
    .await;
    (subject, message.payload.to_vec())
}

/// Store `payload` again on `subject` under a message id of its own (the
/// ticker's, the run id, would be dropped as a duplicate).
async fn store_copy(stack: &Stack, subject: &str, payload: Vec<u8>, msg_id: &str) {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", msg_id);
    stack
        .js
        .publish_with_headers(subject.to_string(), headers, payload.into())
        .await
        .expect("publish")
        .await
        .expect("stored");
}

/// The durable consumer the executors of the `default` pool share.
async fn executor_consumer(stack: &Stack) -> jetstream::consumer::Consumer<pull::Config> {
    stack
        .js
        .get_stream(subjects::DUE_STREAM)
        .await
        .expect("due stream")
        .get_consumer(&subjects::executor_consumer("default"))
        .await
        .expect("executor consumer")
}

/// Pull the next due event from the executors' consumer and nak it: its
/// next delivery is number 2.
async fn deliver_once_and_nak(stack: &Stack) {
    let mut messages = executor_consumer(stack)
        .await
        .fetch()
        .max_messages(1)
        .expires(Duration::from_secs(5))
        .messages()
        .await
        .expect("fetch");
    let message = messages
        .next()
        .await
        .expect("a due event")
        .expect("delivered");
    message.ack_with(AckKind::Nak(None)).await.expect("nak");
}

/// Pull requests waiting at the executors' consumer.
async fn waiting_pulls(stack: &Stack) -> usize {
    let mut consumer = executor_consumer(stack).await;
    consumer.info().await.expect("consumer info").num_waiting
}

/// Messages the executors' consumer still has to deliver or see settled.
async fn unsettled(stack: &Stack) -> (u64, usize) {
    let mut consumer = executor_consumer(stack).await;
    let info = consumer.info().await.expect("consumer info");
    (info.num_pending, info.num_ack_pending)
}

/// A stack without executors, holding the job `definition`.
async fn stack_without_executors(definition: &str) -> Stack {
    let stack = Stack::start(StackOptions {
        executor: false,
        enable_shell: true,
        ..Default::default()
    })
    .await;
    let (reply, code) = stack.api_put(definition).await;
    assert_eq!(code, None, "{reply}");
    stack
}

/// A stack without executors, and job `id` (daily, up to 3 attempts) whose
/// shell target appends a line to the returned file per call.
async fn stack_with_counted_job(id: &str) -> (Stack, tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("marks dir");
    let marks = dir.path().join("calls");
    let job = format!(
        r#"{{"id":"{id}","schedule":"@daily","retry":{{"max_attempts":3}},"target":{{"type":"shell","command":"echo call >> {}"}}}}"#,
        marks.display()
    );
    (stack_without_executors(&job).await, dir, marks)
}

/// Wait until run `run_id` of `job_id` has stored an event of `kind`.
async fn wait_for_event(stack: &Stack, job_id: &str, run_id: &str, kind: RunEventKind) {
    wait_until(
        &format!("a {} event", kind.as_str()),
        Duration::from_secs(20),
        || async {
            stack
                .events_of_run(job_id, run_id)
                .await
                .iter()
                .any(|e| e.kind == kind)
                .then_some(())
        },
    )
    .await;
}

/// Stop `executor` and wait until its pull requests are gone (one could
/// take a message the test means to deliver itself).
async fn stop_and_wait_for_no_pulls(stack: &Stack, executor: CancellationToken) {
    executor.cancel();
    wait_until("no executor pulls", Duration::from_secs(20), || async {
        (waiting_pulls(stack).await == 0).then_some(())
    })
    .await;
}

fn calls(marks: &std::path::Path) -> usize {
    std::fs::read_to_string(marks)
        .unwrap_or_default()
        .lines()
        .count()
}

#[tokio::test]
async fn a_due_event_handed_out_again_after_its_run_ended_is_settled_without_a_call() {
    let (mut stack, _dir, marks) = stack_with_counted_job("once").await;
    let run_id = stack.trigger("once").await;
    let (subject, payload) = stored_due_event(&stack, "once").await;

    let executor = stack
        .spawn_executor(test_executor_config("first", true))
        .await;
    wait_for_event(&stack, "once", &run_id, RunEventKind::Succeeded).await;
    stop_and_wait_for_no_pulls(&stack, executor).await;
    assert_eq!(calls(&marks), 1);

    // Delivery 2 of the ended run (its ack lost): settled by its outcome in
    // JETCRON_RUNS.
    store_copy(&stack, &subject, payload.clone(), "copy-1").await;
    deliver_once_and_nak(&stack).await;
    // Delivery 1 again (the consumer forgot it): its `started` is stored.
    store_copy(&stack, &subject, payload, "copy-2").await;

    let _second = stack
        .spawn_executor(test_executor_config("second", true))
        .await;
    wait_until("both copies settled", Duration::from_secs(20), || async {
        (unsettled(&stack).await == (0, 0)).then_some(())
    })
    .await;
    // Settled, not run (a call would come before its ack): one call, one
    // start, one outcome.
    assert_eq!(calls(&marks), 1, "the target was called again");
    let events = stack.events_of_run("once", &run_id).await;
    let kinds: Vec<RunEventKind> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == RunEventKind::Started)
            .count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == RunEventKind::Succeeded)
            .count(),
        1,
        "{kinds:?}"
    );
    stack.stop().await;
}

/// Store `event` in `JETCRON_RUNS` as an executor would.
async fn store_run_event(stack: &Stack, event: &RunEvent) {
    let subject = subjects::run_event_subject(&event.job_id, event.kind.as_str());
    let payload = serde_json::to_vec(event).expect("encode");
    stack
        .js
        .publish(subject, payload.into())
        .await
        .expect("publish")
        .await
        .expect("stored");
}

#[tokio::test]
async fn a_redelivered_run_whose_end_lies_behind_hundreds_of_the_jobs_events_is_not_called_again() {
    let (mut stack, _dir, marks) = stack_with_counted_job("busy").await;
    // An executor makes the pool's consumer and goes before the fire.
    let first = stack
        .spawn_executor(test_executor_config("first", true))
        .await;
    wait_until(
        "the executors' consumer",
        Duration::from_secs(20),
        || async {
            let stream = stack.js.get_stream(subjects::DUE_STREAM).await.ok()?;
            stream
                .get_consumer::<pull::Config>(&subjects::executor_consumer("default"))
                .await
                .ok()
        },
    )
    .await;
    stop_and_wait_for_no_pulls(&stack, first).await;
    let run_id = stack.trigger("busy").await;
    stored_due_event(&stack, "busy").await;

    // The run ran (its ack lost), while the job's other runs stored 600
    // events after its due event and before its end: more than an early
    // stop of the search would read.
    let now = chrono::Utc::now();
    for i in 0..600 {
        let at = now + chrono::Duration::seconds(i);
        let other = RunId::for_fire("busy", at);
        store_run_event(
            &stack,
            &RunEvent::step(other, "busy".into(), RunEventKind::Started, 1, at, at),
        )
        .await;
    }
    let end = RunEvent::step(
        RunId(run_id.clone()),
        "busy".into(),
        RunEventKind::Succeeded,
        1,
        now,
        now,
    );
    store_run_event(&stack, &end).await;

    // Its due event comes again as delivery 2.
    deliver_once_and_nak(&stack).await;
    let _executor = stack
        .spawn_executor(test_executor_config("late", true))
        .await;
    wait_until("the due event settled", Duration::from_secs(30), || async {
        (unsettled(&stack).await == (0, 0)).then_some(())
    })
    .await;
    assert_eq!(calls(&marks), 0, "the ended run's target was called");
    let kinds: Vec<RunEventKind> = stack
        .events_of_run("busy", &run_id)
        .await
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [RunEventKind::Succeeded],
        "nothing recorded after its end"
    );
    stack.stop().await;
}

#[tokio::test]
async fn a_skipped_fire_handed_out_again_is_not_skipped_twice() {
    let mut stack = stack_without_executors(
        r#"{"id":"slow","schedule":"@daily","concurrency":"forbid","target":{"type":"shell","command":"sleep 60"}}"#,
    )
    .await;
    let one_at_a_time = |id: &str| {
        let mut config = test_executor_config(id, true);
        config.max_in_flight = 1;
        config.max_pulled = Some(1);
        config
    };
    // Run A holds the job's claim on an executor with no room for more (so
    // it asks for nothing while A runs: its one intake permit is A's).
    let _holder = stack.spawn_executor(one_at_a_time("holder")).await;
    let run_a = stack.trigger("slow").await;
    wait_for_event(&stack, "slow", &run_a, RunEventKind::Started).await;
    // Fire B is skipped by another executor, which then goes.
    let skipper = stack.spawn_executor(one_at_a_time("skipper")).await;
    let run_b = stack.trigger("slow").await;
    let skips = |events: Vec<RunEvent>| {
        events
            .iter()
            .filter(|e| e.kind == RunEventKind::Skipped)
            .count()
    };
    wait_until("fire B skipped", Duration::from_secs(20), || async {
        (skips(stack.events_of_run("slow", &run_b).await) == 1).then_some(())
    })
    .await;
    stop_and_wait_for_no_pulls(&stack, skipper).await;

    // B's ack was lost: its due event comes again as delivery 2 while A
    // still runs. (B's message is gone from the work queue: it is made from
    // A's, which waits for A.)
    let (subject, payload) = stored_due_event(&stack, "slow").await;
    let mut due: DueEvent = serde_json::from_slice(&payload).expect("A's due event");
    assert_eq!(due.run_id.as_str(), run_a);
    let skipped = stack.events_of_run("slow", &run_b).await;
    due.run_id = RunId(run_b.clone());
    due.scheduled_at = skipped[0].scheduled_at;
    let payload = serde_json::to_vec(&due).expect("B's due event");
    store_copy(&stack, &subject, payload, "copy-b").await;
    deliver_once_and_nak(&stack).await;
    let _late = stack.spawn_executor(one_at_a_time("late")).await;
    wait_until("the copy settled", Duration::from_secs(30), || async {
        (unsettled(&stack).await == (0, 1)).then_some(())
    })
    .await;
    let events = stack.events_of_run("slow", &run_b).await;
    assert_eq!(skips(events.clone()), 1, "{events:#?}");
    assert!(
        stack
            .events_of_run("slow", &run_a)
            .await
            .iter()
            .all(|e| !e.kind.is_terminal()),
        "run A still runs"
    );
    stack.stop().await;
}
