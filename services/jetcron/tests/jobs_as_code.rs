//! Jobs kept in git: a folder of job files applied with `jetcron apply`,
//! shown with `jetcron diff`, and written back with `jetcron export`, the
//! way a pipeline runs them. Applying twice changes nothing; a job edited
//! between plan and write is a conflict naming both revisions; `--prune`
//! stays in its namespaces; a dry run writes nothing; an export applied
//! back is no change, over every field and target type, with its secrets
//! kept although the files hold placeholders.

use std::path::Path;
use std::time::Duration;

use jetcron_client::api::{Api, NatsApi};
use jetcron_client::output::Format;
use jetcron_testkit::{Stack, StackOptions, API_TOKEN};
use serde_json::{json, Value};

use crate::cli_client::jetcron;

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

const INVOICE: &str = "id: billing.invoice
schedule: '0 */15 * * * *'
labels: {team: billing}
target: {type: nats, subject: svc.invoice}
";
const REPORT: &str = r#"{"id":"billing.report","schedule":"@daily","target":{"type":"http","url":"https://reports.example/run","headers":{"Authorization":"Bearer report-secret"}}}"#;

async fn revision_of(stack: &Stack, id: &str) -> Option<u64> {
    let (reply, code) = stack
        .api("jetcron.api.jobs.get", &json!({"id": id}).to_string())
        .await;
    match code {
        None => reply["job"]["revision"].as_u64(),
        Some(_) => None,
    }
}

#[tokio::test]
async fn a_folder_applied_twice_changes_once_and_prune_stays_in_its_namespace() {
    let stack = Stack::start(StackOptions::api_only()).await;
    stack.wait_for_nats_api().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = dir.path().join("jobs");
    write(&jobs, "billing/invoice.yaml", INVOICE);
    write(&jobs, "billing/report.json", REPORT);
    let folder = jobs.to_str().expect("path");
    // Others' jobs, and one of billing's the files do not name.
    stack.put_job(r#"{"id":"ops.keep","schedule":"@daily","target":{"type":"nats","subject":"ops.keep"}}"#).await;
    stack
        .put_job(
            r#"{"id":"billing.old","schedule":"@daily","target":{"type":"nats","subject":"old"}}"#,
        )
        .await;

    let dry = jetcron(&stack, &["apply", "-f", folder, "--prune", "--dry-run"], "").await;
    assert_eq!(dry.code, 2, "{}{}", dry.stdout, dry.stderr);
    assert!(
        dry.stdout.contains("+ create billing.invoice"),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout.contains("- delete billing.old (revision "),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout.ends_with(
            "2 to create, 0 to update, 1 to delete, 0 unchanged\ndry run: nothing was changed\n"
        ),
        "{}",
        dry.stdout
    );
    assert_eq!(
        revision_of(&stack, "billing.invoice").await,
        None,
        "a dry run writes nothing"
    );

    let first = jetcron(&stack, &["apply", "-f", folder, "--prune"], "").await;
    assert_eq!(first.code, 2, "{}{}", first.stdout, first.stderr);
    assert!(
        first
            .stdout
            .ends_with("applied: 2 created, 0 updated, 1 deleted\n"),
        "{}",
        first.stdout
    );
    assert!(revision_of(&stack, "billing.invoice").await.is_some());
    assert_eq!(revision_of(&stack, "billing.old").await, None);
    assert!(
        revision_of(&stack, "ops.keep").await.is_some(),
        "prune stays in the files' namespaces"
    );

    let second = jetcron(&stack, &["apply", "-f", folder, "--prune"], "").await;
    assert_eq!(second.code, 0, "{}{}", second.stdout, second.stderr);
    assert!(second.stdout.ends_with("0 to create, 0 to update, 0 to delete, 2 unchanged\nno changes: the store matches the files\n"), "{}", second.stdout);

    // Over HTTP with a token, the same plan: a job without secrets is no
    // change there either.
    let invoice = jobs.join("billing/invoice.yaml");
    let http = jetcron(
        &stack,
        &[
            "apply",
            "-f",
            invoice.to_str().expect("path"),
            "--http",
            &stack.http_base,
            "--token",
            API_TOKEN,
        ],
        "",
    )
    .await;
    assert_eq!(http.code, 0, "{}{}", http.stdout, http.stderr);

    // An edit in review: diff shows the field, apply makes it.
    write(
        &jobs,
        "billing/invoice.yaml",
        &INVOICE.replace("*/15", "*/30"),
    );
    let diff = jetcron(&stack, &["diff", "-f", folder], "").await;
    assert_eq!(diff.code, 2, "{}{}", diff.stdout, diff.stderr);
    let revision = revision_of(&stack, "billing.invoice")
        .await
        .expect("stored");
    assert!(
        diff.stdout
            .contains(&format!("~ update billing.invoice (revision {revision})")),
        "{}",
        diff.stdout
    );
    assert!(
        diff.stdout
            .contains("    schedule: \"0 */15 * * * *\" -> \"0 */30 * * * *\""),
        "{}",
        diff.stdout
    );
    let json = jetcron(&stack, &["diff", "-f", folder, "-o", "json"], "")
        .await
        .json();
    let update = json["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["action"] == "update")
        .expect("an update")
        .clone();
    assert_eq!(update["id"], "billing.invoice");
    assert_eq!(update["fields"][0]["field"], "schedule");

    // A mistyped flag is an error (1), never "changes" (2).
    let typo = jetcron(&stack, &["apply", "-f", folder, "--prun"], "").await;
    assert_eq!(typo.code, 1, "{}", typo.stderr);

    // A prune with no jobs in the files must name its namespace.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let unbounded = jetcron(
        &stack,
        &["apply", "-f", empty.to_str().expect("path"), "--prune"],
        "",
    )
    .await;
    assert_eq!(unbounded.code, 1);
    assert!(
        unbounded
            .stderr
            .contains("name the namespaces to empty with --namespace"),
        "{}",
        unbounded.stderr
    );
    let outside = jetcron(
        &stack,
        &["apply", "-f", folder, "--prune", "--namespace", "ops"],
        "",
    )
    .await;
    assert_eq!(outside.code, 1);
    assert!(
        outside
            .stderr
            .contains("namespace \"billing\", which --namespace does not name"),
        "{}",
        outside.stderr
    );

    // A broken file refuses the whole set before anything is sent.
    write(
        &jobs,
        "billing/broken.yaml",
        "id: billing.broken\nschedule: */5 * * * *\ntarget: {type: nats, subject: x}\n",
    );
    let broken = jetcron(&stack, &["apply", "-f", folder], "").await;
    assert_eq!(broken.code, 1);
    assert!(
        broken.stderr.contains("broken.yaml:2:"),
        "{}",
        broken.stderr
    );
    assert!(broken.stderr.contains("quote it"), "{}", broken.stderr);
    assert_eq!(
        revision_of(&stack, "billing.invoice").await,
        Some(revision),
        "nothing applied"
    );
    stack.stop().await;
}

#[tokio::test]
async fn a_job_edited_between_plan_and_write_is_a_conflict_naming_both_revisions() {
    let stack = Stack::start(StackOptions::api_only()).await;
    stack.wait_for_nats_api().await;
    stack.put_job(&INVOICE_JSON.replace("*/15", "*/5")).await;
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "invoice.json", INVOICE_JSON);
    let files = jetcron_client::manifest::read(&[dir.path().to_path_buf()]).expect("files");
    let client = async_nats::connect(stack.nats.url())
        .await
        .expect("connect");
    let api = Api::Nats(NatsApi::new(client, None, Duration::from_secs(10)));
    let plan = jetcron_client::apply::plan_against_store(&api, &files, None)
        .await
        .expect("plan");
    // Someone else writes the job after the plan read it at revision 1.
    stack.put_job(&INVOICE_JSON.replace("*/15", "*/20")).await;
    let error = jetcron_client::apply::execute(&api, &plan, false, Format::Table)
        .await
        .err()
        .expect("a conflict");
    let text = format!("{error:#}");
    let now = revision_of(&stack, "billing.invoice")
        .await
        .expect("stored");
    let expected = format!(
        "job billing.invoice changed since the plan (the plan read it at revision 1; now at revision {now})"
    );
    assert!(text.contains(&expected), "{text}");
    assert!(text.contains("409 conflict"), "{text}");
    assert!(text.contains("run apply again"), "{text}");
    let (stored, _) = stack
        .api("jetcron.api.jobs.get", r#"{"id":"billing.invoice"}"#)
        .await;
    assert_eq!(
        stored["job"]["job"]["schedule"], "0 */20 * * * *",
        "the other write stands"
    );
    stack.stop().await;
}

const INVOICE_JSON: &str = r#"{"id":"billing.invoice","schedule":"0 */15 * * * *","target":{"type":"nats","subject":"svc.invoice"}}"#;

/// Jobs that use every field and every target type.
fn every_field() -> Vec<Value> {
    vec![
        json!({"id": "billing.sync", "description": "pushes invoices\nto the ledger", "schedule": "0 30 9 * * mon-fri",
               "timezone": "Europe/Berlin", "start_at": "2026-01-01T00:00:00Z", "end_at": "2036-01-01T00:00:00Z",
               "jitter": "5s", "misfire": "fire_all", "catchup_window": "2h", "timeout": "45s",
               "retry": {"max_attempts": 5, "backoff": "2s", "multiplier": 3, "max_backoff": "10m", "jitter": 0.5},
               "concurrency": "forbid", "pool": "default", "shards": 2,
               "labels": {"team": "billing", "tier": "1"},
               "notify": {"webhook": "https://hooks.example/alert", "headers": {"Authorization": "Bearer hook-secret"}, "after_failures": 2},
               "target": {"type": "http", "method": "PUT", "url": "https://ledger.example/sync",
                          "headers": {"Authorization": "Bearer ledger-secret", "X-Team": "billing"}, "body": "{\"full\":true}"}}),
        json!({"id": "billing.notify-ledger", "schedule": "@every 90s", "paused": true,
               "after": [{"job": "billing.sync", "on": "failure"}],
               "target": {"type": "nats", "subject": "svc.ledger", "payload": {"hello": "world", "n": [1, 2]},
                          "headers": {"X-Token": "nats-secret"}}}),
        json!({"id": "ops.backup", "schedule": "*/5 * * * *", "misfire": "skip",
               "target": {"type": "shell", "command": "pg_dump app > /tmp/app.sql", "working_dir": "/tmp",
                          "env": {"PGPASSWORD": "db-secret", "PGHOST": "127.0.0.1"}}}),
        json!({"id": "once", "schedule": "@at 2036-06-01T12:00:00Z", "target": {"type": "nats", "subject": "svc.once"}}),
    ]
}

#[tokio::test]
async fn an_export_applied_back_is_no_change_and_keeps_its_secrets() {
    let stack = Stack::start(StackOptions::api_only()).await;
    stack.wait_for_nats_api().await;
    for job in every_field() {
        let (reply, code) = stack.api_put(&job.to_string()).await;
        assert_eq!(code, None, "{reply}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for format in ["json", "yaml"] {
        let out = dir.path().join(format);
        let folder = out.to_str().expect("path");
        let export = jetcron(&stack, &["export", "-d", folder, "--format", format], "").await;
        assert_eq!(export.code, 0, "{}", export.stderr);
        assert_eq!(export.stdout, format!("exported 4 jobs to {folder}\n"));
        let sync =
            std::fs::read_to_string(out.join(format!("billing/sync.{format}"))).expect("file");
        assert!(
            sync.contains("<redacted>")
                && !sync.contains("ledger-secret")
                && !sync.contains("hook-secret"),
            "{sync}"
        );
        assert!(out.join(format!("default/once.{format}")).exists());
        let back = jetcron(&stack, &["apply", "-f", folder], "").await;
        assert_eq!(back.code, 0, "{format}: {}{}", back.stdout, back.stderr);
        assert!(back.stdout.contains("4 unchanged"), "{}", back.stdout);
    }
    // Applied as a change, the placeholders keep the stored secrets.
    let out = dir.path().join("json");
    let path = out.join("billing/sync.json");
    let text = std::fs::read_to_string(&path)
        .expect("file")
        .replace("45s", "50s");
    std::fs::write(&path, text).expect("write");
    let changed = jetcron(&stack, &["apply", "-f", out.to_str().expect("path")], "").await;
    assert_eq!(changed.code, 2, "{}{}", changed.stdout, changed.stderr);
    assert!(
        changed.stdout.contains("    timeout: \"45s\" -> \"50s\""),
        "{}",
        changed.stdout
    );
    let (stored, _) = stack
        .api("jetcron.api.jobs.get", r#"{"id":"billing.sync"}"#)
        .await;
    assert_eq!(
        stored["job"]["job"]["target"]["headers"]["Authorization"], "Bearer ledger-secret",
        "{stored}"
    );
    assert_eq!(
        stored["job"]["job"]["notify"]["headers"]["Authorization"], "Bearer hook-secret",
        "{stored}"
    );
    assert_eq!(stored["job"]["job"]["timeout"], "50s");

    // With --show-secrets to standard output: the list `apply -f -` takes,
    // and every job as it was put.
    let shown = jetcron(&stack, &["export", "--show-secrets"], "").await;
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    let listed: Vec<Value> = serde_json::from_str(&shown.stdout).expect("a JSON list");
    let mut expected = every_field();
    expected[0]["timeout"] = json!("50s");
    let by_id = |jobs: &[Value]| -> std::collections::BTreeMap<String, Value> {
        jobs.iter()
            .map(|j| (j["id"].as_str().expect("id").to_string(), j.clone()))
            .collect()
    };
    assert_eq!(by_id(&listed), by_id(&expected));
    let again = jetcron(&stack, &["apply", "-f", "-"], &shown.stdout).await;
    assert_eq!(again.code, 0, "{}{}", again.stdout, again.stderr);
    stack.stop().await;
}
