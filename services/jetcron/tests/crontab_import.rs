//! `jetcron import-crontab` as someone moving off cron runs it: a user's
//! crontab with stdin (`%`), Vixie's day rule, `MAILTO` and `@reboot`;
//! shown first with `--dry-run`, imported, run, imported again (no change),
//! and pruned after a line is removed, touching no other job; and a Debian
//! package's `/etc/cron.d` file with its user column.

use std::time::Duration;

use jetcron_testkit::{wait_until, Stack, StackOptions};
use serde_json::{json, Value};

use crate::cli_client::{followed_logs, jetcron};

const CRONTAB: &str = "SHELL=/bin/bash
MAILTO=ops@example.com
# Greets, with its text on stdin
* * * * * cat%hello%world
@reboot start-agent
# Odd days that are Mondays
0 0 */2 * 1 echo odd mondays
MAILTO=\"\"
30 4 1,15 * 5 echo both
";

async fn legacy_jobs(stack: &Stack) -> Vec<Value> {
    let listed = jetcron(
        stack,
        &["jobs", "list", "--namespace", "legacy", "-o", "json"],
        "",
    )
    .await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    listed.json()["jobs"].as_array().expect("jobs").clone()
}

#[tokio::test]
async fn a_crontab_is_planned_imported_run_reimported_and_pruned() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    stack.wait_for_nats_api().await;
    let channel = json!({"type": "email", "name": "ops-mail", "smtp_host": "127.0.0.1", "username": "u", "password": "p",
                         "from": "jetcron@example.com", "to": ["ops@example.com"]});
    let (reply, code) = stack
        .api("jetcron.api.channels.put", &channel.to_string())
        .await;
    assert_eq!(code, None, "{reply}");
    stack.put_job(r#"{"id":"legacy.manual","schedule":"@daily","target":{"type":"nats","subject":"svc.manual"}}"#).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("crontab");
    std::fs::write(&file, CRONTAB).expect("write");
    let path = std::fs::canonicalize(&file).expect("path");
    let path = path.to_str().expect("path");
    let import = |extra: &'static [&'static str]| {
        let mut args = vec![
            "import-crontab",
            path,
            "--namespace",
            "legacy",
            "--timezone",
            "Europe/Berlin",
        ];
        args.extend_from_slice(extra);
        args
    };

    let dry = jetcron(&stack, &import(&["--dry-run"]), "").await;
    assert_eq!(dry.code, 2, "{}{}", dry.stdout, dry.stderr);
    assert!(
        dry.stdout.contains(&format!(":{path}:5: @reboot: ")),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout.contains("jetcron has no host boot"),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout.contains("+ create legacy.cron-cat-"),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout
            .contains("MAILTO=ops@example.com: alerts go to channel \"ops-mail\""),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout
            .contains("3 to create, 0 to update, 0 to delete, 0 unchanged"),
        "{}",
        dry.stdout
    );
    assert_eq!(
        legacy_jobs(&stack).await.len(),
        1,
        "a dry run writes nothing"
    );

    let first = jetcron(&stack, &import(&[]), "").await;
    assert_eq!(first.code, 2, "{}{}", first.stdout, first.stderr);
    let jobs = legacy_jobs(&stack).await;
    let find = |word: &str| -> Value {
        jobs.iter()
            .find(|j| {
                j["job"]["target"]["command"]
                    .as_str()
                    .is_some_and(|c| c.contains(word))
            })
            .unwrap_or_else(|| panic!("a job running {word}: {jobs:?}"))
            .clone()
    };
    let greet = find("cat");
    assert_eq!(greet["job"]["schedule"], "* * * * *");
    assert_eq!(greet["job"]["timezone"], "Europe/Berlin");
    assert_eq!(greet["job"]["notify"]["channels"], json!(["ops-mail"]));
    let source = greet["job"]["labels"]["crontab.file"]
        .as_str()
        .expect("label");
    assert!(source.ends_with(&format!(":{path}")), "host:path, {source}");
    assert!(greet["job"]["description"]
        .as_str()
        .is_some_and(|d| d.starts_with("Greets, with its text on stdin\n")));
    assert_eq!(
        find("odd")["job"]["schedule"],
        "0 0 */2 * +1",
        "cron's day rule, kept"
    );
    assert!(
        find("both")["job"].get("notify").is_none(),
        "MAILTO=\"\" mails nobody"
    );

    // The imported job runs as cron ran it: the text after % on stdin.
    let id = greet["id"].as_str().expect("id");
    let run_id = stack.trigger(id).await;
    let logs = followed_logs(&stack, &run_id).await;
    assert!(logs.contains(": succeeded ==\nhello\nworld\n"), "{logs}");

    let again = jetcron(&stack, &import(&[]), "").await;
    assert_eq!(again.code, 0, "{}{}", again.stdout, again.stderr);
    assert!(again.stdout.contains("no changes"), "{}", again.stdout);

    // A line removed: --prune deletes its job, and only that one.
    std::fs::write(&file, CRONTAB.replace("30 4 1,15 * 5 echo both\n", "")).expect("write");
    let pruned = jetcron(&stack, &import(&["--prune"]), "").await;
    assert_eq!(pruned.code, 2, "{}{}", pruned.stdout, pruned.stderr);
    assert!(
        pruned
            .stdout
            .contains("applied: 0 created, 0 updated, 1 deleted"),
        "{}",
        pruned.stdout
    );
    let left: Vec<String> = legacy_jobs(&stack)
        .await
        .iter()
        .map(|j| j["id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(left.contains(&"legacy.manual".to_string()), "{left:?}");
    assert!(!left.contains(&find("both")["id"].as_str().expect("id").to_string()));

    // Another crontab through the same path, named apart: its prune leaves
    // this one's jobs alone.
    std::fs::write(&file, "0 5 * * * echo other user\n").expect("write");
    let other = jetcron(&stack, &import(&["--prune", "--source", "bob@web1"]), "").await;
    assert_eq!(other.code, 2, "{}{}", other.stdout, other.stderr);
    assert!(
        other
            .stdout
            .contains("applied: 1 created, 0 updated, 0 deleted"),
        "{}",
        other.stdout
    );
    assert_eq!(legacy_jobs(&stack).await.len(), 4);

    // Nothing importable is an error, not "nothing to do".
    std::fs::write(&file, "@reboot start-agent\n").expect("write");
    let nothing = jetcron(&stack, &import(&[]), "").await;
    assert_eq!(nothing.code, 1, "{}{}", nothing.stdout, nothing.stderr);
    assert!(nothing.stderr.contains("nothing in "), "{}", nothing.stderr);
    stack.stop().await;
}

#[tokio::test]
async fn a_debian_cron_d_file_is_imported_with_its_user_column() {
    let stack = Stack::start(StackOptions::api_only()).await;
    stack.wait_for_nats_api().await;
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../core/tests/crontab/e2scrub_all"
    );
    let import = |extra: &'static [&'static str]| {
        let mut args = vec![
            "import-crontab",
            fixture,
            "--system",
            "--namespace",
            "system",
            "--timezone",
            "UTC",
        ];
        args.extend_from_slice(extra);
        args
    };
    let dry = jetcron(&stack, &import(&["--dry-run"]), "").await;
    assert_eq!(dry.code, 2, "{}{}", dry.stdout, dry.stderr);
    assert!(!dry.stdout.contains("refused"), "{}", dry.stdout);
    assert!(
        dry.stdout.contains("+ create system.cron-"),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout.contains("root"),
        "the user column is noted: {}",
        dry.stdout
    );
    let imported = jetcron(&stack, &import(&[]), "").await;
    assert_eq!(imported.code, 2, "{}{}", imported.stdout, imported.stderr);
    let listed = wait_until("the jobs listed", Duration::from_secs(5), || async {
        let listed = jetcron(
            &stack,
            &["jobs", "list", "--namespace", "system", "-o", "json"],
            "",
        )
        .await
        .json();
        (!listed["jobs"].as_array()?.is_empty()).then_some(listed)
    })
    .await;
    for job in listed["jobs"].as_array().expect("jobs") {
        assert_eq!(job["valid"], true, "{job}");
        assert_eq!(job["job"]["labels"]["crontab.user"], "root", "{job}");
    }
    stack.stop().await;
}
