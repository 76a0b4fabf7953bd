//! `jetcron.api.jobs.trigger` and `jetcron.api.jobs.backfill`: runs by hand,
//! marked as such, never repeating a scheduled fire.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use jetcron_core::subjects;
use jetcron_testkit::{instant, Stack, StackOptions};

#[tokio::test]
async fn trigger_runs_a_job_now_marked_manual() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let (_, code) = stack
        .api_put(r#"{"id":"yearly","schedule":"@yearly","target":{"type":"shell","command":"echo by hand"}}"#)
        .await;
    assert_eq!(code, None);
    let (reply, code) = stack
        .api(subjects::API_JOBS_TRIGGER, r#"{"id":"yearly"}"#)
        .await;
    assert_eq!(code, None, "{reply}");
    let run_id = reply["run_id"].as_str().expect("run id").to_string();
    let runs = stack
        .wait_for_runs("yearly", "succeeded", 1, Duration::from_secs(20))
        .await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["run_id"], run_id);
    assert_eq!(runs[0]["trigger"], "manual");
    assert_eq!(runs[0]["output"], "by hand\n");

    for (body, code, field) in [
        (r#"{"id":"nope"}"#, "404", "id"),
        (r#"{"id":"a.b.c"}"#, "400", "id"),
        (r#"{"id":"yearly","now":true}"#, "400", ""),
        ("[]", "400", ""),
    ] {
        let (reply, got) = stack.api(subjects::API_JOBS_TRIGGER, body).await;
        assert_eq!(got.as_deref(), Some(code), "{body}: {reply}");
        if !field.is_empty() {
            assert_eq!(reply["error"]["field"], field, "{body}: {reply}");
        }
    }
    stack.stop().await;
}

#[tokio::test]
async fn backfill_fills_past_times_once_and_skips_fires_that_happened() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    let (_, code) = stack
        .api_put(r#"{"id":"every2","schedule":"*/2 * * * * *","target":{"type":"shell","command":"true"}}"#)
        .await;
    assert_eq!(code, None);
    let regular = stack
        .wait_for_runs("every2", "succeeded", 2, Duration::from_secs(20))
        .await;
    let first_regular = regular
        .iter()
        .map(|r| instant(&r["scheduled_at"]))
        .min()
        .expect("runs");
    let from = first_regular - chrono::Duration::seconds(10);
    let to = Utc::now() - chrono::Duration::milliseconds(100);
    let body = format!(
        r#"{{"id":"every2","from":"{}","to":"{}"}}"#,
        from.to_rfc3339(),
        to.to_rfc3339()
    );
    let (reply, code) = stack.api(subjects::API_JOBS_BACKFILL, &body).await;
    assert_eq!(code, None, "{reply}");
    let emitted: Vec<DateTime<Utc>> = reply["emitted"]
        .as_array()
        .expect("emitted")
        .iter()
        .map(instant)
        .collect();
    let skipped: Vec<DateTime<Utc>> = reply["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(instant)
        .collect();
    // The 5 times before the job existed are new; the ones that ran are skipped.
    assert_eq!(emitted.len(), 5, "{reply}");
    assert!(emitted.iter().all(|t| *t < first_regular));
    assert!(skipped.contains(&first_regular), "{reply}");

    // Every even second from `from` has exactly one run, backfilled or not.
    let expected = emitted.len() + skipped.len();
    let runs = stack
        .wait_for_runs("every2", "succeeded", expected, Duration::from_secs(20))
        .await;
    let mut scheduled: Vec<DateTime<Utc>> =
        runs.iter().map(|r| instant(&r["scheduled_at"])).collect();
    scheduled.sort();
    let distinct: BTreeSet<_> = scheduled.iter().collect();
    assert_eq!(
        distinct.len(),
        scheduled.len(),
        "a time ran twice: {scheduled:?}"
    );
    for pair in scheduled.windows(2) {
        assert_eq!((pair[1] - pair[0]).num_seconds(), 2, "{scheduled:?}");
    }
    let backfilled = runs.iter().filter(|r| r["trigger"] == "backfill").count();
    assert_eq!(backfilled, 5);

    // Running the same backfill again emits nothing.
    let (reply, _) = stack.api(subjects::API_JOBS_BACKFILL, &body).await;
    assert_eq!(
        reply["emitted"].as_array().expect("emitted").len(),
        0,
        "{reply}"
    );

    for (body, field, needle) in [
        (
            r#"{"id":"every2","from":"2026-01-02T00:00:00Z","to":"2026-01-01T00:00:00Z"}"#,
            "to",
            "earlier than from",
        ),
        (
            r#"{"id":"every2","from":"2020-01-01T00:00:00Z","to":"2020-01-02T00:00:00Z"}"#,
            "to",
            "more than 1000",
        ),
        (
            r#"{"id":"every2","from":"2020-01-01T00:00:00Z","to":"2999-01-01T00:00:00Z"}"#,
            "to",
            "future",
        ),
        (
            r#"{"id":"every2","from":"yesterday","to":"2020-01-02T00:00:00Z"}"#,
            "from",
            "RFC 3339",
        ),
        (
            r#"{"id":"every2","from":"2020-01-01T00:00:00Z"}"#,
            "",
            "missing field `to`",
        ),
    ] {
        let (reply, code) = stack.api(subjects::API_JOBS_BACKFILL, body).await;
        assert_eq!(code.as_deref(), Some("400"), "{body}: {reply}");
        let message = reply["error"]["message"].as_str().expect("message");
        assert!(message.contains(needle), "{body}: {message}");
        if !field.is_empty() {
            assert_eq!(reply["error"]["field"], field, "{body}: {reply}");
        }
    }
    stack.stop().await;
}
