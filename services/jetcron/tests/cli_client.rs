//! The client commands as people and scripts use them: `jetcron jobs …` and
//! `jetcron runs …` against a running stack, over NATS (also through a
//! namespace's door) and over HTTP, with tables by default, `-o json` that
//! parses, the API's own refusals on standard error and exit code 1, and
//! completion scripts that bash, zsh and fish accept.

use std::process::Stdio;
use std::time::Duration;

use jetcron_testkit::{wait_until, Stack, StackOptions, API_TOKEN};
use serde_json::Value;
use tokio::io::AsyncWriteExt as _;

/// What one run of the binary gave.
pub(crate) struct CliRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl CliRun {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }
}

/// Run `jetcron <args>` against `stack`'s NATS, `stdin` piped in.
pub(crate) async fn jetcron(stack: &Stack, args: &[&str], stdin: &str) -> CliRun {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jetcron"))
        .args(args)
        .env("JETCRON_NATS_URL", stack.nats.url())
        .env_remove("JETCRON_HTTP_URL")
        .env_remove("JETCRON_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn jetcron");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.as_bytes())
        .await
        .expect("write stdin");
    drop(input);
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("jetcron {args:?} ends"))
        .expect("output");
    CliRun {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `jetcron runs logs RUN --follow`'s output, which must end well.
pub(crate) async fn followed_logs(stack: &Stack, run_id: &str) -> String {
    let logs = jetcron(
        stack,
        &["runs", "logs", run_id, "--follow", "--interval", "200ms"],
        "",
    )
    .await;
    assert_eq!(logs.code, 0, "{}", logs.stderr);
    logs.stdout
}

const REPORT: &str = "id: billing.report
description: the nightly report
schedule: '0 0 3 * * *'
timezone: Europe/Berlin
labels: {team: billing}
target:
  type: shell
  command: echo report done
";

#[tokio::test]
async fn jobs_and_runs_commands_answer_as_tables_json_and_the_apis_errors() {
    let stack = Stack::start(StackOptions::with_shell()).await;
    stack.wait_for_nats_api().await;

    // Put from YAML on standard input, then list as a table and as JSON.
    let put = jetcron(&stack, &["jobs", "put", "-f", "-"], REPORT).await;
    assert_eq!(put.code, 0, "{}{}", put.stdout, put.stderr);
    assert_eq!(put.stdout, "created billing.report (revision 1)\n");
    let list = jetcron(&stack, &["jobs", "list"], "").await;
    assert_eq!(list.code, 0, "{}", list.stderr);
    let lines: Vec<&str> = list.stdout.lines().collect();
    assert!(
        lines[0].starts_with("ID ") && lines[0].contains("SCHEDULE") && lines[0].contains("TARGET"),
        "{}",
        list.stdout
    );
    assert!(
        lines[1].starts_with(
            "billing.report  0 0 3 * * *  Europe/Berlin  shell echo report done  active  1"
        ),
        "{}",
        list.stdout
    );
    let json = jetcron(
        &stack,
        &["jobs", "list", "-o", "json", "--label", "team=billing"],
        "",
    )
    .await
    .json();
    assert_eq!(json["jobs"][0]["id"], "billing.report");
    assert_eq!(json["jobs"][0]["job"]["timezone"], "Europe/Berlin");

    // The API's refusals, on standard error, exit 1.
    let missing = jetcron(&stack, &["jobs", "delete", "billing.nothing"], "").await;
    assert_eq!(missing.code, 1);
    assert_eq!(
        missing.stderr,
        "jetcron: 404 not_found: no job \"billing.nothing\"\n"
    );
    let bad = jetcron(
        &stack,
        &["jobs", "put", "-f", "-"],
        r#"{"id":"x","schedule":"* * * *","target":{"type":"nats","subject":"a.b"}}"#,
    )
    .await;
    assert_eq!(bad.code, 1);
    assert!(
        bad.stderr
            .contains("job x: schedule: expected 5, 6 or 7 fields, got 4"),
        "{}",
        bad.stderr
    );
    let preview = jetcron(
        &stack,
        &[
            "jobs",
            "preview",
            "0 30 9 * * mon-fri",
            "--timezone",
            "Europe/Berlin",
            "--count",
            "2",
            "--from",
            "2027-03-26T00:00:00Z",
        ],
        "",
    )
    .await;
    assert_eq!(preview.code, 0, "{}", preview.stderr);
    assert!(
        preview.stdout.contains("2027-03-26T08:30:00"),
        "{}",
        preview.stdout
    );
    assert!(
        preview.stdout.contains("2027-03-29T07:30:00"),
        "{}",
        preview.stdout
    );

    // A run: triggered, followed to its end, listed, shown.
    let trigger = jetcron(
        &stack,
        &["jobs", "trigger", "billing.report", "-o", "json"],
        "",
    )
    .await;
    assert_eq!(trigger.code, 0, "{}", trigger.stderr);
    let run_id = trigger.json()["run_id"]
        .as_str()
        .expect("run id")
        .to_string();
    let logs = followed_logs(&stack, &run_id).await;
    assert!(logs.contains(": succeeded ==\nreport done\n"), "{logs}");
    // The list reads ClickHouse's run state, written just after the events.
    let runs = wait_until(
        "the run listed as succeeded",
        Duration::from_secs(10),
        || async {
            let runs = jetcron(&stack, &["runs", "list", "--job", "billing.report"], "").await;
            let row = runs.stdout.lines().nth(1)?.to_string();
            (runs.code == 0 && row.starts_with(&run_id) && row.contains("succeeded"))
                .then_some(runs)
        },
    )
    .await;
    assert!(runs.stdout.starts_with("RUN "), "{}", runs.stdout);
    let run = jetcron(&stack, &["runs", "get", &run_id, "-o", "json"], "")
        .await
        .json();
    assert_eq!(run["run"]["status"], "succeeded");
    let unknown = jetcron(&stack, &["runs", "get", "not-a-uuid"], "").await;
    assert_eq!(
        (unknown.code, unknown.stderr.as_str()),
        (
            1,
            "jetcron: 400 invalid_request: run id \"not-a-uuid\" is not a UUID\n"
        )
    );

    // Through the namespace's door, the same commands see that namespace only.
    stack.put_job(r#"{"id":"ops.cleanup","schedule":"@daily","target":{"type":"nats","subject":"ops.cleanup"}}"#).await;
    let door = jetcron(
        &stack,
        &["jobs", "list", "--door", "billing", "-o", "json"],
        "",
    )
    .await
    .json();
    let ids: Vec<&str> = door["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["billing.report"]);
    let refused = jetcron(
        &stack,
        &["jobs", "get", "ops.cleanup", "--door", "billing"],
        "",
    )
    .await;
    assert_eq!(refused.code, 1);
    assert!(
        refused.stderr.starts_with("jetcron: 403 forbidden:"),
        "{}",
        refused.stderr
    );

    // Over HTTP with a token: the same answers.
    let http = ["--http", &stack.http_base, "--token", API_TOKEN];
    let paused = jetcron(
        &stack,
        &[&["jobs", "pause", "billing.report"], &http[..]].concat(),
        "",
    )
    .await;
    assert_eq!(
        (paused.code, paused.stdout.as_str()),
        (0, "paused billing.report\n"),
        "{}",
        paused.stderr
    );
    let listed = jetcron(
        &stack,
        &[&["jobs", "list", "-o", "json"], &http[..]].concat(),
        "",
    )
    .await
    .json();
    assert_eq!(listed["jobs"][0]["job"]["paused"], true);
    let no_token = jetcron(
        &stack,
        &[
            "jobs",
            "resume",
            "billing.report",
            "--http",
            &stack.http_base,
        ],
        "",
    )
    .await;
    assert_eq!(no_token.code, 1);
    assert!(
        no_token.stderr.starts_with("jetcron: 401 "),
        "{}",
        no_token.stderr
    );
    stack.stop().await;
}

#[tokio::test]
async fn completion_scripts_complete_the_commands_in_bash_and_parse_in_zsh_and_fish() {
    let bash = std::process::Command::new(env!("CARGO_BIN_EXE_jetcron"))
        .args(["completion", "bash"])
        .output()
        .expect("completion bash");
    assert!(bash.status.success());
    let script = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(script.path(), &bash.stdout).expect("write script");
    let completed = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {}; COMP_WORDS=(jetcron jo); COMP_CWORD=1; _jetcron jetcron jo jetcron; echo \"${{COMPREPLY[@]}}\"",
            script.path().display()
        ))
        .output()
        .expect("bash");
    assert_eq!(
        String::from_utf8_lossy(&completed.stdout).trim(),
        "jobs",
        "{}",
        String::from_utf8_lossy(&completed.stderr)
    );
    for (shell, check) in [("zsh", ["-n"]), ("fish", ["--no-execute"])] {
        let generated = std::process::Command::new(env!("CARGO_BIN_EXE_jetcron"))
            .args(["completion", shell])
            .output()
            .expect("completion");
        assert!(generated.status.success(), "{shell}");
        std::fs::write(script.path(), &generated.stdout).expect("write script");
        let parsed = std::process::Command::new(shell)
            .args(check)
            .arg(script.path())
            .output()
            .unwrap_or_else(|e| panic!("{shell} is missing ({e}): infra/test.sh installs it"));
        assert!(
            parsed.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&parsed.stderr)
        );
    }
}
