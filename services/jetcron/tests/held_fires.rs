//! Fires stored ahead of their time (`--lookahead`): executors hold them and
//! call the target at the instant, never early; a job paused or deleted while
//! its next fires are already stored does not run them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Timelike as _, Utc};
use futures::StreamExt as _;
use jetcron_testkit::{wait_until, Stack, StackOptions};

/// (scheduled time, arrival) of every call of the target.
type Calls = Arc<Mutex<Vec<(DateTime<Utc>, DateTime<Utc>)>>>;

/// (subject, scheduled time, arrival) of every call of several targets.
type SubjectCalls = Arc<Mutex<Vec<(String, DateTime<Utc>, DateTime<Utc>)>>>;

/// A stack whose ticker stores fires 3 s ahead, so executors hold them.
async fn stack_holding_fires() -> Stack {
    Stack::start(StackOptions {
        lookahead: Duration::from_secs(3),
        ..StackOptions::default()
    })
    .await
}

async fn serve(stack: &Stack, subject: &str) -> Calls {
    let calls: Calls = Arc::default();
    let mut requests = stack
        .client
        .subscribe(subject.to_string())
        .await
        .expect("subscribe");
    let client = stack.client.clone();
    let recorded = calls.clone();
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let at = Utc::now();
            let scheduled = scheduled_at(&request);
            recorded.lock().expect("calls").push((scheduled, at));
            if let Some(reply) = request.reply {
                let _ = client.publish(reply, "ok".into()).await;
            }
        }
    });
    calls
}

/// Answer every call on the subjects of `filter`, recording (subject,
/// scheduled time, arrival) of each.
async fn serve_subjects(client: &async_nats::Client, filter: &str) -> SubjectCalls {
    let calls: SubjectCalls = Arc::default();
    let mut requests = client
        .subscribe(filter.to_string())
        .await
        .expect("subscribe");
    let (replier, recorded) = (client.clone(), calls.clone());
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let at = Utc::now();
            let scheduled = scheduled_at(&request);
            recorded
                .lock()
                .expect("calls")
                .push((request.subject.to_string(), scheduled, at));
            if let Some(reply) = request.reply {
                let _ = replier.publish(reply, "ok".into()).await;
            }
        }
    });
    calls
}

/// The jobs bucket, once a ticker has made it. No gateway runs in these
/// tests: jobs go into the bucket as `nats kv put` puts them.
async fn jobs_bucket(client: &async_nats::Client) -> async_nats::jetstream::kv::Store {
    let js = async_nats::jetstream::new(client.clone());
    wait_until("the jobs bucket", Duration::from_secs(60), || {
        let js = js.clone();
        async move { js.get_key_value("jetcron_jobs").await.ok() }
    })
    .await
}

/// `count` jobs `<prefix>-<i>` firing every second, calling
/// `svc.<prefix>.<i>`.
async fn put_every_second_jobs(
    bucket: &async_nats::jetstream::kv::Store,
    prefix: &str,
    count: usize,
) {
    for i in 0..count {
        let body = format!(
            r#"{{"id":"{prefix}-{i}","schedule":"* * * * * *","target":{{"type":"nats","subject":"svc.{prefix}.{i}"}}}}"#
        );
        bucket
            .put(format!("{prefix}-{i}"), body.into())
            .await
            .expect("put job");
    }
}

/// A call's `Jetcron-Scheduled-At`.
fn scheduled_at(request: &async_nats::Message) -> DateTime<Utc> {
    request
        .headers
        .as_ref()
        .and_then(|h| h.get("Jetcron-Scheduled-At"))
        .and_then(|v| DateTime::parse_from_rfc3339(v.as_str()).ok())
        .map(|t| t.with_timezone(&Utc))
        .expect("Jetcron-Scheduled-At")
}

/// Each fire (by `key`) scheduled in `(after, until]`, with the lag in ms
/// of each of its calls: `calls` yields (key, scheduled time, arrival).
fn lags_per_fire<K: Ord>(
    calls: impl IntoIterator<Item = (K, DateTime<Utc>, DateTime<Utc>)>,
    after: DateTime<Utc>,
    until: DateTime<Utc>,
) -> std::collections::BTreeMap<K, Vec<i64>> {
    let mut per_fire = std::collections::BTreeMap::<K, Vec<i64>>::new();
    for (key, scheduled, at) in calls {
        if scheduled > after && scheduled <= until {
            per_fire
                .entry(key)
                .or_default()
                .push((at - scheduled).num_milliseconds());
        }
    }
    per_fire
}

/// [`lags_per_fire`] of several targets' calls, each fire by (subject,
/// scheduled time).
fn subject_lags_per_fire(
    calls: &SubjectCalls,
    after: DateTime<Utc>,
    until: DateTime<Utc>,
) -> std::collections::BTreeMap<(String, DateTime<Utc>), Vec<i64>> {
    let seen = calls.lock().expect("calls").clone();
    lags_per_fire(
        seen.into_iter()
            .map(|(subject, scheduled, at)| ((subject, scheduled), scheduled, at)),
        after,
        until,
    )
}

fn called_after(calls: &Calls, instant: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    calls
        .lock()
        .expect("calls")
        .iter()
        .filter(|(scheduled, _)| *scheduled > instant)
        .map(|(scheduled, _)| *scheduled)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn held_fires_start_on_time_and_a_pause_or_delete_stops_them() {
    let stack = stack_holding_fires().await;
    let calls = serve(&stack, "svc.held").await;
    stack
        .put_job(r#"{"id":"held","schedule":"* * * * * *","target":{"type":"nats","subject":"svc.held"}}"#)
        .await;
    wait_until("six calls", Duration::from_secs(30), || async {
        (calls.lock().expect("calls").len() >= 6).then_some(())
    })
    .await;
    // Never early, and on time once held (the first fire may be stored late).
    let seen = calls.lock().expect("calls").clone();
    for (scheduled, at) in &seen {
        let lag = (*at - *scheduled).num_microseconds().expect("lag");
        assert!(lag >= -1_000, "called {lag} µs before its time");
    }
    let late: Vec<_> = seen[2..]
        .iter()
        .map(|(s, a)| (*a - *s).num_milliseconds())
        .filter(|ms| *ms > 500)
        .collect();
    assert!(late.is_empty(), "held fires called late: {late:?} ms");

    // Paused with three seconds of fires already stored: none of them runs.
    let (reply, code) = stack
        .api("jetcron.api.jobs.pause", r#"{"id":"held"}"#)
        .await;
    assert_eq!(code, None, "{reply}");
    let paused_at = Utc::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_pause = called_after(&calls, paused_at + chrono::Duration::milliseconds(500));
    assert!(
        after_pause.is_empty(),
        "ran after its pause: {after_pause:?}"
    );

    // Resumed, it runs again; deleted, its stored fires do not.
    let (reply, code) = stack
        .api("jetcron.api.jobs.resume", r#"{"id":"held"}"#)
        .await;
    assert_eq!(code, None, "{reply}");
    let resumed_at = Utc::now();
    wait_until(
        "calls after the resume",
        Duration::from_secs(30),
        || async { (called_after(&calls, resumed_at).len() >= 3).then_some(()) },
    )
    .await;
    let (reply, code) = stack
        .api("jetcron.api.jobs.delete", r#"{"id":"held"}"#)
        .await;
    assert_eq!(code, None, "{reply}");
    let deleted_at = Utc::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_delete = called_after(&calls, deleted_at + chrono::Duration::milliseconds(500));
    assert!(
        after_delete.is_empty(),
        "ran after its delete: {after_delete:?}"
    );
    stack.stop().await;
}

/// A held fire's call is booked and sent at its instant: its start is
/// recorded as the instant itself (an attempt that starts at the instant on
/// its own records the moment it got there). A target that answers
/// "accepted" and reports at once still completes the run: the report is
/// expected from before the call goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_booked_call_starts_at_its_instant_and_an_immediate_report_completes_it() {
    let stack = stack_holding_fires().await;
    let run_ids: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut requests = stack
        .client
        .subscribe("svc.held.async")
        .await
        .expect("subscribe");
    let (client, seen) = (stack.client.clone(), run_ids.clone());
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let Some(run_id) = request
                .headers
                .as_ref()
                .and_then(|h| h.get("Jetcron-Run-Id"))
                .map(|v| v.as_str().to_string())
            else {
                continue;
            };
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Jetcron-Status", "accepted");
            if let Some(reply) = request.reply {
                let _ = client
                    .publish_with_headers(reply, headers, "queued".into())
                    .await;
            }
            let _ = client
                .publish(
                    format!("jetcron.runs.{run_id}.complete"),
                    r#"{"status":"succeeded","output":"reported"}"#.into(),
                )
                .await;
            seen.lock().expect("run ids").push(run_id);
        }
    });
    stack
        .put_job(r#"{"id":"held-async","schedule":"*/2 * * * * *","target":{"type":"nats","subject":"svc.held.async"}}"#)
        .await;
    // The first fires may be stored late (not held); the fourth is held.
    let run_id = wait_until("four calls", Duration::from_secs(30), || async {
        run_ids.lock().expect("run ids").get(3).cloned()
    })
    .await;
    let run = stack
        .wait_for_run_status(&run_id, "succeeded", Duration::from_secs(10))
        .await;
    assert_eq!(run["output"], "reported");
    assert_eq!(
        jetcron_testkit::instant(&run["started_at"]),
        jetcron_testkit::instant(&run["scheduled_at"]),
        "{run}"
    );
    stack.stop().await;
}

/// A booked call's reply is matched to its run by the executor itself: a
/// subject nobody serves fails the run with "no responders", a service
/// error reply fails it with the service's error, and they are recorded as
/// starting at their instant (held and booked). One attempt each: a retry
/// is not booked, so the errors checked are the booked calls'.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_booked_call_fails_on_no_responders_and_on_a_service_error() {
    let stack = stack_holding_fires().await;
    let mut requests = stack
        .client
        .subscribe("svc.held.busy")
        .await
        .expect("subscribe");
    let client = stack.client.clone();
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Service-Error-Code", "503");
            headers.insert("Nats-Service-Error", "busy");
            if let Some(reply) = request.reply {
                let _ = client.publish_with_headers(reply, headers, "".into()).await;
            }
        }
    });
    for (id, subject) in [
        ("held-nobody", "svc.held.nobody"),
        ("held-busy", "svc.held.busy"),
    ] {
        stack
            .put_job(&format!(
                r#"{{"id":"{id}","schedule":"*/2 * * * * *","retry":{{"max_attempts":1}},"target":{{"type":"nats","subject":"{subject}"}}}}"#
            ))
            .await;
    }
    for (id, error) in [
        (
            "held-nobody",
            r#"no responders on subject "svc.held.nobody""#,
        ),
        ("held-busy", "service error 503: busy"),
    ] {
        // The first fires may be stored late (not held); later ones are held.
        let runs = stack
            .wait_for_runs(id, "failed", 4, Duration::from_secs(40))
            .await;
        for run in &runs {
            assert_eq!(run["error"], error, "{run}");
        }
        assert!(
            runs.iter()
                .any(|run| jetcron_testkit::instant(&run["first_started_at"])
                    == jetcron_testkit::instant(&run["scheduled_at"])),
            "a held run's first attempt starts at its instant (retries later): {runs:?}"
        );
    }
    stack.stop().await;
}

/// An executor stopped (SIGTERM, as in a rolling upgrade) while it holds
/// fires stored 10 s ahead runs those due within 5 s and hands the others
/// back to come to the other executor ahead of their instants: every fire
/// of the window is called once, on time. (Handed back with all their time
/// left, they came back up to 8.6 s late here, 0.9-3.4 s on a 3-node
/// cluster.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fires_held_by_a_stopped_executor_are_called_on_time_by_the_other() {
    held_fires_of_a_stopped_executor_are_called_once_within("30s", 500).await;
}

/// The same with a grace too short to run any held fire at the stop: the
/// fires due within 5 s are handed back at once, and the other executor's
/// open pull request takes them. The stopping executor's own, still open at
/// the server, must not: when the hand-back went before its pull loop
/// ended, it took some, and they came back only after the 30 s `ack_wait`
/// (5 of 72 fires missing in each of two runs). Fixed, the latest call came
/// 3-6 ms after its instant in five runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fires_handed_back_at_once_at_a_stop_are_not_taken_by_the_stopping_executor() {
    held_fires_of_a_stopped_executor_are_called_once_within("1s", 1_000).await;
}

/// Two executors hold fires stored 10 s ahead; the first is stopped with
/// `grace`: every fire of the 12 s after is called once, at most
/// `late_ms` after its instant.
async fn held_fires_of_a_stopped_executor_are_called_once_within(grace: &str, late_ms: i64) {
    let nats = jetcron_testkit::NatsServer::start();
    let url = nats.url();
    let env: Vec<(&str, &str)> = vec![("JETCRON_NATS_URL", url.as_str())];
    let jetcron = std::path::Path::new(env!("CARGO_BIN_EXE_jetcron"));
    let mut ticker =
        jetcron_testkit::JetcronProcess::start(jetcron, &["ticker", "--lookahead", "10s"], &env);
    let mut executors: Vec<_> = [grace, "30s"]
        .iter()
        .map(|grace| {
            jetcron_testkit::JetcronProcess::start(
                jetcron,
                &["executor", "--shutdown-grace", grace],
                &env,
            )
        })
        .collect();
    let client = nats.client().await;
    let calls = serve_subjects(&client, "svc.handed.*").await;
    // Several jobs, so that each executor holds some of every second.
    let jobs = 6;
    let bucket = jobs_bucket(&client).await;
    put_every_second_jobs(&bucket, "handed", jobs).await;
    // Calls on time, fires held ahead by both executors.
    wait_until("calls from held fires", Duration::from_secs(60), || async {
        (calls.lock().expect("calls").len() >= jobs * 12).then_some(())
    })
    .await;
    let stopped_at = Utc::now();
    let status = executors[0].terminate().expect("stopped");
    assert!(status.success(), "{}", executors[0].log());
    // The window is 12 s after the stop; its last fires may be `late_ms`
    // late.
    tokio::time::sleep(Duration::from_secs(14) + Duration::from_millis(late_ms as u64)).await;
    let window_end =
        Utc::now() - chrono::Duration::seconds(2) - chrono::Duration::milliseconds(late_ms);
    let per_fire = subject_lags_per_fire(&calls, stopped_at, window_end);
    let seconds = (window_end.timestamp() - stopped_at.timestamp()) as usize;
    assert_eq!(
        per_fire.len(),
        jobs * seconds,
        "every fire of the {seconds} s after the stop called: {per_fire:?}"
    );
    let late: Vec<_> = per_fire
        .iter()
        .filter(|(_, lags)| lags.len() != 1 || lags[0] > late_ms)
        .collect();
    let latest = per_fire.values().flatten().max();
    eprintln!("grace {grace}: the latest call after the stop came {latest:?} ms after its instant");
    assert!(
        late.is_empty(),
        "fires called late (> {late_ms} ms) or twice after the stop at {stopped_at}: {late:?}\nthe stopped executor:\n{}\nthe other:\n{}",
        jetcron_testkit::without_colour_codes(&executors[0].log()),
        jetcron_testkit::without_colour_codes(&executors[1].log())
    );
    ticker.terminate();
    executors[1].terminate();
}

/// A held fire whose instant comes while every slot is busy waits for one
/// past `ack_wait`: it keeps its message alive meanwhile, so JetStream does
/// not deliver it a second time to be called twice. One executor of one
/// slot, `ack_wait` 5 s; a shell run of 10 s takes the slot while the
/// every-second job's next fires are held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_fire_waiting_past_ack_wait_for_a_slot_is_called_once() {
    let mut stack = Stack::start(StackOptions {
        lookahead: Duration::from_secs(3),
        executor: false,
        enable_shell: true,
        ..StackOptions::default()
    })
    .await;
    let mut config = jetcron_testkit::test_executor_config("one-slot", true);
    config.max_in_flight = 1;
    config.ack_wait = Duration::from_secs(5);
    let ack_wait = config.ack_wait;
    stack.spawn_executor(config).await;
    let calls = serve(&stack, "svc.waits").await;
    stack
        .put_job(r#"{"id":"waits","schedule":"* * * * * *","target":{"type":"nats","subject":"svc.waits"}}"#)
        .await;
    stack
        .put_job(r#"{"id":"blocker","schedule":"@yearly","target":{"type":"shell","command":"sleep 10"}}"#)
        .await;
    wait_until("fires held and called", Duration::from_secs(30), || async {
        (calls.lock().expect("calls").len() >= 4).then_some(())
    })
    .await;
    let blocked_at = Utc::now();
    let blocker = stack.trigger("blocker").await;
    stack
        .wait_for_run_status(&blocker, "succeeded", Duration::from_secs(30))
        .await;
    // The fires that waited, then a few on time again.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let window_end = Utc::now() - chrono::Duration::seconds(2);
    let seen = calls.lock().expect("calls").clone();
    let per_fire = lags_per_fire(
        seen.iter()
            .map(|(scheduled, at)| (*scheduled, *scheduled, *at)),
        blocked_at,
        window_end,
    );
    let ack_wait_ms = ack_wait.as_millis() as i64;
    let waited = per_fire
        .values()
        .filter(|lags| lags.iter().any(|lag| *lag > ack_wait_ms))
        .count();
    assert!(
        waited > 0,
        "some fire waited for the slot past ack_wait: {per_fire:?}"
    );
    let twice: Vec<_> = per_fire.iter().filter(|(_, lags)| lags.len() > 1).collect();
    assert!(twice.is_empty(), "fires called twice: {twice:?}");
    let seconds = (window_end.timestamp() - blocked_at.timestamp()) as usize;
    assert_eq!(
        per_fire.len(),
        seconds,
        "every fire after the blocker's start called: {per_fire:?}"
    );
    stack.stop().await;
}

/// Fires held by an executor whose only slot is busy, waiting for it at
/// their instant, when that executor is stopped: they are handed back at
/// the stop (not kept until the grace ends, nor lost until `ack_wait`),
/// and the other executor calls each of them once. Executor `busy`, with
/// one slot, holds every fire of six every-second jobs and of a one-shot
/// shell job (`sleep 30`) that takes the slot; the other executor starts
/// a second later (`busy` pulls nothing while its slot is taken); then
/// `busy` is stopped 3.5 s after the slot was taken, with a grace of 4 s,
/// which the shell run outlasts (it is interrupted and handed back).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fires_waiting_for_a_slot_at_a_stop_are_handed_back_and_called_once() {
    let nats = jetcron_testkit::NatsServer::start();
    let url = nats.url();
    let env: Vec<(&str, &str)> = vec![("JETCRON_NATS_URL", url.as_str())];
    let jetcron = std::path::Path::new(env!("CARGO_BIN_EXE_jetcron"));
    let mut ticker =
        jetcron_testkit::JetcronProcess::start(jetcron, &["ticker", "--lookahead", "5s"], &env);
    let mut busy = jetcron_testkit::JetcronProcess::start(
        jetcron,
        &[
            "executor",
            "--executor-id",
            "busy",
            "--max-in-flight",
            "1",
            "--enable-shell",
            "--shutdown-grace",
            "4s",
        ],
        &env,
    );
    let client = nats.client().await;
    let calls = serve_subjects(&client, "svc.slot.*").await;
    let bucket = jobs_bucket(&client).await;
    let jobs = 6;
    put_every_second_jobs(&bucket, "slot", jobs).await;
    wait_until("calls from held fires", Duration::from_secs(60), || async {
        (calls.lock().expect("calls").len() >= jobs * 6).then_some(())
    })
    .await;
    // The shell run takes `busy`'s slot at a whole second 8 s from now.
    let blocked_at =
        Utc::now().with_nanosecond(0).expect("a whole second") + chrono::Duration::seconds(8);
    let blocker = format!(
        r#"{{"id":"slot-blocker","schedule":"@at {}","target":{{"type":"shell","command":"sleep 30"}}}}"#,
        blocked_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    bucket
        .put("slot-blocker", blocker.into())
        .await
        .expect("put the blocker");
    let until = |at: DateTime<Utc>| (at - Utc::now()).to_std().unwrap_or_default();
    // `busy` alone holds every fire until the shell run starts (its
    // instant's other fires may go first); the other executor comes once
    // `busy` pulls no more.
    tokio::time::sleep(until(blocked_at + chrono::Duration::seconds(1))).await;
    let mut other = jetcron_testkit::JetcronProcess::start(
        jetcron,
        &[
            "executor",
            "--executor-id",
            "other",
            "--shutdown-grace",
            "30s",
        ],
        &env,
    );
    // Stopped between two instants: a fire whose instant came with the
    // stop may find the stop first, be kept to run here within the grace
    // (`hold::at_shutdown`), and come back only when the grace ends.
    tokio::time::sleep(until(blocked_at + chrono::Duration::milliseconds(3_500))).await;
    let stopped_at = Utc::now();
    let status = busy.terminate().expect("stopped");
    let stop_took = Utc::now() - stopped_at;
    let busy_log = jetcron_testkit::without_colour_codes(&busy.log());
    assert!(status.success(), "{busy_log}");
    assert!(
        busy_log.contains("grace period over, handing unfinished attempts back"),
        "the shell run outlasted the grace and was handed back: {busy_log}"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let window_end = Utc::now() - chrono::Duration::seconds(2);
    let per_fire = subject_lags_per_fire(&calls, blocked_at, window_end);
    let seconds = (window_end.timestamp() - blocked_at.timestamp()) as usize;
    let twice: Vec<_> = per_fire.iter().filter(|(_, lags)| lags.len() > 1).collect();
    assert!(twice.is_empty(), "fires called twice: {twice:?}");
    assert_eq!(
        per_fire.len(),
        jobs * seconds,
        "every fire after the shell run's start called: {per_fire:?}"
    );
    // Fires `busy` held past their instant, waiting for its slot, came
    // from the other executor once handed back at the stop: late by about
    // the time from their instant to the stop, not by the grace (4 s) or
    // `ack_wait`.
    let waited: Vec<_> = per_fire
        .iter()
        .filter(|((_, scheduled), _)| *scheduled < stopped_at - chrono::Duration::seconds(1))
        .filter(|(_, lags)| lags[0] > 1_000)
        .collect();
    assert!(
        !waited.is_empty(),
        "some fire waited for busy's slot: {per_fire:?}\n{busy_log}"
    );
    let handed_back_by = stopped_at + chrono::Duration::seconds(2);
    let handed_back_late: Vec<_> = per_fire
        .iter()
        .filter(|((_, scheduled), lags)| {
            *scheduled < stopped_at
                && *scheduled + chrono::Duration::milliseconds(lags[0]) > handed_back_by
        })
        .collect();
    let latest = waited.iter().map(|(_, lags)| lags[0]).max();
    eprintln!(
        "{} fires waited for busy's slot, the latest called {latest:?} ms after its instant; the stop took {} ms",
        waited.len(),
        stop_took.num_milliseconds()
    );
    assert!(
        handed_back_late.is_empty(),
        "fires waiting at the stop were called over 2 s after it began (it took {} ms): {handed_back_late:?}\n{busy_log}",
        stop_took.num_milliseconds()
    );
    let after_stop: Vec<_> = per_fire
        .iter()
        .filter(|((_, scheduled), _)| {
            *scheduled > stopped_at + stop_took + chrono::Duration::seconds(1)
        })
        .filter(|(_, lags)| lags[0] > 1_000)
        .collect();
    assert!(
        after_stop.is_empty(),
        "fires after the stop called over 1 s late: {after_stop:?}"
    );
    ticker.terminate();
    other.terminate();

    // With fewer intake permits than pools, a pool's waiting pull would
    // hold the only one: refused at the start.
    let mut refused = jetcron_testkit::JetcronProcess::start(
        jetcron,
        &["executor", "--pool", "default,slow", "--max-pulled", "1"],
        &env,
    );
    let status = refused
        .wait_for_exit(Duration::from_secs(30))
        .expect("refused at the start");
    assert!(!status.success());
    assert!(
        refused
            .log()
            .contains("--max-pulled 1 is fewer than the 2 pools served (default, slow)"),
        "{}",
        refused.log()
    );
}
