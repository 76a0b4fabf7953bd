//! C.2: from an entry to a job.

use serde_json::json;

use super::*;

fn translated(text: &str, options: &TranslateOptions) -> Translated {
    let entry = only_entry(text);
    let translated = translate(&entry, options).expect("translates");
    assert_accepted(&translated);
    translated
}

#[test]
fn a_plain_line_becomes_a_shell_job_that_runs_as_cron_would() {
    let job = translated(
        "# every night\n5 0 * * * $HOME/bin/daily.job >> out 2>&1\n",
        &options(),
    );
    let hash = &job.id["daily-job-".len()..];
    assert_eq!(hash.len(), 8, "{}", job.id);
    assert_eq!(
        job.spec_json,
        json!({
            "id": job.id,
            "description": "every night\nimported from test.crontab:2",
            "schedule": "5 0 * * *",
            "timezone": "UTC",
            "target": {
                "type": "shell",
                "command": "$HOME/bin/daily.job >> out 2>&1",
                "env": {"PATH": "/usr/bin:/bin"},
            },
            "misfire": "skip",
            "retry": {"max_attempts": 1},
            "timeout": "24h",
            "labels": {"crontab.file": "test.crontab", "crontab.line": "2"},
        })
    );
    assert_eq!(
        job.notes,
        vec!["MAILTO is unset: cron mails output to the crontab's owner; the job has no alerts"]
    );
}

#[test]
fn the_id_is_stable_and_changes_with_the_line() {
    let id = |text: &str| translated(text, &options()).id;
    assert_eq!(
        id("0 * * * * backup\n"),
        id("# other comment\n0  *\t* * * backup\n")
    );
    assert_ne!(id("0 * * * * backup\n"), id("1 * * * * backup\n"));
    assert_ne!(id("0 * * * * backup\n"), id("0 * * * * backup -v\n"));
    let namespaced = TranslateOptions {
        namespace: Some("ops".into()),
        prefix: "cron-".into(),
        ..options()
    };
    let job = translated("0 * * * * /usr/bin/backup\n", &namespaced);
    assert!(job.id.starts_with("ops.cron-backup-"), "{}", job.id);
    let default_namespace = TranslateOptions {
        namespace: Some("default".into()),
        ..options()
    };
    let job = translated("0 * * * * backup\n", &default_namespace);
    assert!(job.id.starts_with("backup-"), "{}", job.id);
}

#[test]
fn repeated_ids_are_numbered_in_order() {
    let parsed = parse(
        "@daily x\n@daily x\n@hourly x\n@daily x\n",
        CrontabKind::User,
    );
    let mut jobs: Vec<Translated> = parsed
        .entries
        .iter()
        .map(|e| translate(e, &options()).expect("translates"))
        .collect();
    number_repeated_ids(&mut jobs);
    let first = jobs[0].id.clone();
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids[1], format!("{first}-2"));
    assert_ne!(ids[2], first);
    assert_eq!(ids[3], format!("{first}-3"));
    for job in &jobs {
        assert_eq!(job.spec_json["id"], job.id);
        assert_accepted(job);
    }
}

#[test]
fn cron_s_own_variables_stay_out_of_the_env_and_home_is_the_working_dir() {
    let job = translated(
        "SHELL=/bin/sh\nMAILTO=\"\"\nMAILFROM=cron@x\nLOGNAME=ana\nHOME=/home/ana\nPATH=/opt/bin\nA=1\n* * * * * true\n",
        &options(),
    );
    let target = &job.spec_json["target"];
    assert_eq!(
        target["env"],
        json!({"HOME": "/home/ana", "PATH": "/opt/bin", "A": "1"})
    );
    assert_eq!(target["working_dir"], "/home/ana");
    assert_eq!(target["command"], "true");
    assert_eq!(job.notes, Vec::<String>::new(), "MAILTO=\"\" mails nobody");
}

#[test]
fn another_shell_runs_the_command_and_stdin_comes_from_a_here_document() {
    let job = translated(
        "SHELL=/bin/bash\nMAILTO=\"\"\n* * * * * cat 'a b' # c%it's%50\\% done\n",
        &options(),
    );
    assert_eq!(
        job.spec_json["target"]["command"],
        "(\nexec /bin/bash -c 'cat '\\''a b'\\'' # c'\n) <<'JETCRON_STDIN'\nit's\n50% done\nJETCRON_STDIN\n"
    );
}

#[test]
fn cron_tz_sets_the_zone_and_tz_only_reaches_the_command() {
    let job = translated(
        "CRON_TZ=Europe/Berlin\nTZ=America/New_York\n30 2 * * * report\n",
        &options(),
    );
    assert_eq!(job.spec_json["timezone"], "Europe/Berlin");
    assert_eq!(job.spec_json["target"]["env"]["TZ"], "America/New_York");
    assert!(job
        .notes
        .iter()
        .any(|n| n.contains("TZ=America/New_York only reaches the command")));
    let same = translated("TZ=UTC\n30 2 * * * report\n", &options());
    assert!(
        !same.notes.iter().any(|n| n.contains("TZ=")),
        "{:?}",
        same.notes
    );
    let entry = only_entry("CRON_TZ=Mars/Olympus\n0 0 * * * x\n");
    let refused = translate(&entry, &options()).expect_err("an unknown zone");
    assert_eq!(refused.line, 2);
    assert!(refused
        .reason
        .contains("CRON_TZ=Mars/Olympus: unknown IANA time zone"));
}

#[test]
fn mailto_names_the_mail_channel_or_says_there_is_none() {
    let with_channel = TranslateOptions {
        mail_channel: Some("ops-mail".into()),
        ..options()
    };
    let job = translated("MAILTO=ops@example.com\n@daily x\n", &with_channel);
    assert_eq!(job.spec_json["notify"], json!({"channels": ["ops-mail"]}));
    assert!(job.notes[0].contains("not on output"));
    let job = translated("MAILTO=ops@example.com\n@daily x\n", &options());
    assert_eq!(job.spec_json.get("notify"), None);
    assert!(job.notes[0].contains("no mail channel given"));
}

#[test]
fn what_a_job_cannot_carry_is_refused_with_the_line_that_set_it() {
    let cases = [
        ("\"A B\"=1\n* * * * * x\n", "line 1 sets \"A B\""),
        ("JETCRON_RUN=1\n* * * * * x\n", "JETCRON_* variables"),
        (
            "HOME=home\n* * * * * x\n",
            "HOME=\"home\" is not an absolute path",
        ),
        ("SHELL=\"\"\n* * * * * x\n", "SHELL is empty"),
    ];
    for (text, why) in cases {
        let entry = only_entry(text);
        let refused = translate(&entry, &options()).expect_err(text);
        assert_eq!(refused.line, 2);
        assert!(refused.reason.contains(why), "{text}: {refused}");
    }
    let many: String = (0..70).map(|i| format!("V{i}=x\n")).collect();
    let entry = only_entry(&format!("{many}* * * * * x\n"));
    let refused = translate(&entry, &options()).expect_err("too many variables");
    assert!(refused.reason.contains("at most 64"), "{refused}");
    let bad_prefix = TranslateOptions {
        prefix: "a.b.".into(),
        ..options()
    };
    let refused = translate(&only_entry("* * * * * x\n"), &bad_prefix).expect_err("a bad prefix");
    assert!(
        refused.reason.starts_with("the job would be refused: id:"),
        "{refused}"
    );
}

#[test]
fn descriptions_and_labels_stay_within_their_limits() {
    let comments: String = (0..200)
        .map(|i| format!("# comment line {i} of many\n"))
        .collect();
    let system = TranslateOptions {
        file_label: format!("/etc/cron.d/{}", "x".repeat(300)),
        ..options()
    };
    let parsed = parse(
        &format!("{comments}* * * * * r\u{f6}ot true\n"),
        CrontabKind::System,
    );
    let job = translate(&parsed.entries[0], &system).expect("translates");
    assert_accepted(&job);
    let description = job.spec_json["description"]
        .as_str()
        .expect("a description");
    assert!(description.len() <= 4096);
    assert!(
        description.ends_with(":201"),
        "{}",
        &description[description.len() - 20..]
    );
    let labels = &job.spec_json["labels"];
    assert_eq!(labels["crontab.file"].as_str().map(str::len), Some(255));
    assert_eq!(labels["crontab.user"], "r\u{f6}ot");
    assert_eq!(labels["crontab.line"], "201");
}
