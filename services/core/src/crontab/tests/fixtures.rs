//! The crontabs of `services/core/tests/crontab` (sources in its README):
//! what each yields, pinned whole in `<file>.golden.json` beside it, and
//! the facts that matter said here. Rewrite the golden files after a
//! deliberate change with
//! `JETCRON_WRITE_CRONTAB_GOLDEN=1 cargo test -p jetcron-core crontab`.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::*;

/// A fixture: its file name, text, kind and the options it is imported with.
struct Fixture {
    name: &'static str,
    text: &'static str,
    kind: CrontabKind,
    options: TranslateOptions,
}

fn fixture(name: &'static str) -> Fixture {
    let (text, kind, file_label) = match name {
        "crontab" => (
            include_str!("../../../tests/crontab/crontab"),
            CrontabKind::System,
            "/etc/crontab",
        ),
        "e2scrub_all" => (
            include_str!("../../../tests/crontab/e2scrub_all"),
            CrontabKind::System,
            "/etc/cron.d/e2scrub_all",
        ),
        "mdadm" => (
            include_str!("../../../tests/crontab/mdadm"),
            CrontabKind::System,
            "/etc/cron.d/mdadm",
        ),
        "sysstat" => (
            include_str!("../../../tests/crontab/sysstat"),
            CrontabKind::System,
            "/etc/cron.d/sysstat",
        ),
        "crontab.5.example" => (
            include_str!("../../../tests/crontab/crontab.5.example"),
            CrontabKind::User,
            "crontab.5.example",
        ),
        "user.crontab" => (
            include_str!("../../../tests/crontab/user.crontab"),
            CrontabKind::User,
            "user.crontab",
        ),
        "no-final-newline.crontab" => (
            include_str!("../../../tests/crontab/no-final-newline.crontab"),
            CrontabKind::User,
            "no-final-newline.crontab",
        ),
        other => panic!("no fixture {other}"),
    };
    let (namespace, mail_channel) = match name {
        "user.crontab" => (Some("ana".to_string()), Some("ops-mail".to_string())),
        "crontab.5.example" => (None, Some("ops-mail".to_string())),
        _ => (None, None),
    };
    Fixture {
        name,
        text,
        kind,
        options: TranslateOptions {
            namespace,
            prefix: String::new(),
            timezone: "UTC".into(),
            mail_channel,
            file_label: file_label.into(),
        },
    }
}

/// What a fixture yields: the parse, and each entry translated (numbered).
struct Imported {
    parsed: Parsed,
    jobs: Vec<Result<Translated, Refusal>>,
}

/// Import a fixture, check every job with the API's check, and compare
/// the whole outcome with its golden file.
fn import(name: &'static str) -> Imported {
    let fixture = fixture(name);
    let parsed = parse(fixture.text, fixture.kind);
    let results: Vec<Result<Translated, Refusal>> = parsed
        .entries
        .iter()
        .map(|entry| translate(entry, &fixture.options))
        .collect();
    let mut translated: Vec<Translated> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().cloned())
        .collect();
    number_repeated_ids(&mut translated);
    for job in &translated {
        assert_accepted(job);
    }
    let mut numbered = translated.into_iter();
    let jobs: Vec<Result<Translated, Refusal>> = results
        .into_iter()
        .map(|result| result.map(|_| numbered.next().expect("one numbered job per job")))
        .collect();
    assert_golden(&fixture, &parsed, &jobs);
    Imported { parsed, jobs }
}

fn assert_golden(fixture: &Fixture, parsed: &Parsed, jobs: &[Result<Translated, Refusal>]) {
    let outcome = json!({
        "refusals": parsed.refusals.iter().map(|r| json!({"line": r.line, "reason": r.reason})).collect::<Vec<_>>(),
        "warnings": parsed.warnings.iter().map(|w| json!({"line": w.line, "message": w.message})).collect::<Vec<_>>(),
        "jobs": parsed.entries.iter().zip(jobs).map(|(entry, job)| match job {
            Ok(job) => json!({"line": entry.line, "job": job.spec_json, "notes": job.notes}),
            Err(refusal) => json!({"line": entry.line, "refused": refusal.reason}),
        }).collect::<Vec<_>>(),
    });
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/crontab")
        .join(format!("{}.golden.json", fixture.name));
    if std::env::var_os("JETCRON_WRITE_CRONTAB_GOLDEN").is_some() {
        let text = serde_json::to_string_pretty(&outcome).expect("encode") + "\n";
        std::fs::write(&path, text).expect("write the golden file");
        return;
    }
    let golden = std::fs::read_to_string(&path).expect("read the golden file");
    let golden: Value = serde_json::from_str(&golden).expect("a golden file is JSON");
    assert!(
        golden == outcome,
        "{} differs from {}:\n{}",
        fixture.name,
        path.display(),
        serde_json::to_string_pretty(&outcome).unwrap_or_default()
    );
}

fn job(imported: &Imported, index: usize) -> &Value {
    match &imported.jobs[index] {
        Ok(job) => &job.spec_json,
        Err(refusal) => panic!("job {index} refused: {refusal}"),
    }
}

#[test]
fn debian_etc_crontab_imports_whole_with_its_field_diagram() {
    let imported = import("crontab");
    assert_eq!(imported.parsed.refusals, vec![]);
    assert_eq!(imported.parsed.entries.len(), 4);
    let first = job(&imported, 0);
    let description = first["description"].as_str().expect("a description");
    assert!(
        description.starts_with("Example of job definition:\n.---------------- minute (0 - 59)\n")
    );
    assert!(description.ends_with(
        "*  *  *  *  * user-name command to be executed\nimported from /etc/crontab:18"
    ));
    assert_eq!(first["schedule"], "17 * * * *");
    assert_eq!(
        first["target"]["command"],
        "cd / && run-parts --report /etc/cron.hourly"
    );
    assert_eq!(first["labels"]["crontab.user"], "root");
    assert_eq!(
        first["target"]["env"]["PATH"],
        "/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin"
    );
    assert_eq!(job(&imported, 2)["schedule"], "47 6 * * 7");
    let warned: Vec<usize> = imported.parsed.warnings.iter().map(|w| w.line).collect();
    assert_eq!(warned, vec![18], "root is warned about once");
}

#[test]
fn e2scrub_all_keeps_its_user_and_shell_operators() {
    let imported = import("e2scrub_all");
    assert_eq!(imported.parsed.entries.len(), 2);
    let first = job(&imported, 0);
    assert_eq!(
        first["target"]["command"],
        "test -e /run/systemd/system || SERVICE_MODE=1 /usr/lib/x86_64-linux-gnu/e2fsprogs/e2scrub_all_cron"
    );
    assert!(first["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("system-")));
}

#[test]
fn mdadm_runs_date_with_a_bare_percent() {
    let imported = import("mdadm");
    assert_eq!(imported.parsed.entries.len(), 1);
    let only = job(&imported, 0);
    let command = only["target"]["command"].as_str().expect("a command");
    assert!(command.contains("[ $(date +%d) -le 7 ]"), "{command}");
    assert_eq!(only["schedule"], "57 0 * * 0");
    let description = only["description"].as_str().expect("a description");
    assert!(description.starts_with("By default, run at 00:57 on every Sunday"));
}

#[test]
fn sysstat_keeps_its_path_and_stepped_range() {
    let imported = import("sysstat");
    assert_eq!(imported.parsed.entries.len(), 2);
    let first = job(&imported, 0);
    assert_eq!(first["schedule"], "5-55/10 * * * *");
    assert_eq!(
        first["target"]["env"]["PATH"],
        "/usr/lib/sysstat:/usr/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
    );
    assert_eq!(
        first["description"],
        "Activity reports every 10 minutes everyday\nimported from /etc/cron.d/sysstat:6"
    );
}

#[test]
fn the_crontab_5_example_mails_paul_and_feeds_joe_his_stdin() {
    let imported = import("crontab.5.example");
    assert_eq!(imported.parsed.refusals, vec![]);
    assert_eq!(imported.parsed.entries.len(), 6);
    let mail = job(&imported, 2);
    assert_eq!(
        mail["target"]["command"],
        "(\nmail -s \"It's 10pm\" joe\n) <<'JETCRON_STDIN'\nJoe,\n\nWhere are your kids?\nJETCRON_STDIN\n"
    );
    assert_eq!(mail["notify"], json!({"channels": ["ops-mail"]}));
    assert_eq!(job(&imported, 4)["schedule"], "5 4 * * sun");
    let wax = job(&imported, 5)["target"]["command"]
        .as_str()
        .expect("a command");
    assert!(
        wax.starts_with("expr $(date +%s) / 60 / 60 / 24 % 9"),
        "{wax}"
    );
}

#[test]
fn the_user_crontab_refuses_by_line_and_translates_the_rest() {
    let imported = import("user.crontab");
    let refused: Vec<usize> = imported.parsed.refusals.iter().map(|r| r.line).collect();
    assert_eq!(refused, vec![20, 21, 22, 23, 24, 25]);
    let whole_file: Vec<usize> = imported
        .parsed
        .warnings
        .iter()
        .filter(|w| w.message.contains("whole file"))
        .map(|w| w.line)
        .collect();
    assert_eq!(whole_file, vec![21], "@Daily is cron's first syntax error");
    let report = job(&imported, 0);
    assert_eq!(report["timezone"], "Europe/Berlin");
    assert_eq!(report["target"]["env"]["TZ"], "America/New_York");
    assert_eq!(report["target"]["env"]["GREETING"], "hello # not a comment");
    assert_eq!(
        report["target"]["env"]["NOTE"],
        "plain value # kept, hash and all"
    );
    assert_eq!(report["target"]["working_dir"], "/home/ana");
    assert_eq!(
        report["target"]["command"],
        "exec /bin/bash -c 'report --since yesterday'"
    );
    assert!(report["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("ana.report-")));
    assert_eq!(job(&imported, 1)["schedule"], "0 0 */2 * +1");
    assert_eq!(job(&imported, 2)["schedule"], "30 4 1,15 * 5");
    let stdin_job = job(&imported, 3);
    assert_eq!(stdin_job["schedule"], "0 12 * jan-mar/2 Mon-FRI");
    assert_eq!(stdin_job["notify"], json!({"channels": ["ops-mail"]}));
    assert_eq!(
        stdin_job["description"],
        "indented comment, then a job with stdin\nimported from user.crontab:28"
    );
    let last = imported.jobs.last().expect("jobs");
    let refused = last.as_ref().expect_err("\"A B\" is no variable name");
    assert_eq!(refused.line, 31);
    assert!(refused.reason.contains("line 30 sets \"A B\""), "{refused}");
}

#[test]
fn a_file_without_a_final_newline_yields_nothing() {
    let imported = import("no-final-newline.crontab");
    assert_eq!(imported.parsed.entries, vec![]);
    assert_eq!(imported.parsed.refusals.len(), 1);
    assert_eq!(imported.parsed.refusals[0].line, 2);
}
