use super::*;
use crate::manifest::Source;

fn file(definition: Value) -> FileJob {
    FileJob {
        id: definition["id"].as_str().expect("id").to_string(),
        source: Source {
            file: "jobs.yaml".into(),
            index: None,
        },
        definition,
    }
}

fn stored(revision: u64, definition: Value) -> StoredJob {
    StoredJob {
        id: definition["id"].as_str().expect("id").to_string(),
        revision,
        definition: Some(definition),
    }
}

fn http_job(id: &str, schedule: &str, token: &str) -> Value {
    json!({"id": id, "schedule": schedule,
           "target": {"type": "http", "url": "https://x.example/", "headers": {"Authorization": token}}})
}

#[test]
fn the_same_job_written_otherwise_is_unchanged_and_a_change_names_its_field() {
    let on_disk =
        json!({"target": {"subject": "s.a", "type": "nats"}, "schedule": "@daily", "id": "a"});
    let in_store =
        json!({"id": "a", "schedule": "@daily", "target": {"type": "nats", "subject": "s.a"}});
    let p = plan(&[file(on_disk)], &[stored(3, in_store.clone())], None).expect("plan");
    assert_eq!(p.steps[0].action, Action::Unchanged { revision: 3 });
    assert!(!p.has_changes());

    let mut changed = in_store.clone();
    changed["schedule"] = json!("@hourly");
    changed["labels"] = json!({"team": "b"});
    let p = plan(&[file(changed)], &[stored(3, in_store)], None).expect("plan");
    let Action::Update { revision, fields } = &p.steps[0].action else {
        panic!("an update: {p:?}");
    };
    assert_eq!(*revision, 3);
    let names: Vec<&str> = fields.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(names, ["labels.team", "schedule"]);
    assert_eq!(fields[1].before.as_deref(), Some("\"@daily\""));
    assert_eq!(fields[1].after.as_deref(), Some("\"@hourly\""));
    assert!(
        p.render()
            .contains("    schedule: \"@daily\" -> \"@hourly\""),
        "{}",
        p.render()
    );
}

#[test]
fn secrets_are_never_shown_and_a_placeholder_keeps_the_stored_one() {
    let in_store = http_job("a", "@daily", "Bearer old-secret");
    let placeholder = http_job("a", "@daily", REDACTED);
    let plan_kept = plan(&[file(placeholder)], &[stored(2, in_store.clone())], None).expect("plan");
    assert_eq!(plan_kept.steps[0].action, Action::Unchanged { revision: 2 });

    let new_secret = http_job("a", "@daily", "Bearer new-secret");
    let changed = plan(&[file(new_secret)], &[stored(2, in_store)], None).expect("plan");
    let text = changed.render();
    assert!(
        text.contains("target.headers.Authorization: (secret) -> (changed)"),
        "{text}"
    );
    assert!(
        !text.contains("old-secret") && !text.contains("new-secret"),
        "{text}"
    );
    assert!(
        !["old-secret", "new-secret"]
            .iter()
            .any(|s| changed.to_json().to_string().contains(s)),
        "{}",
        changed.to_json()
    );

    let nothing_stored = plan(&[file(http_job("b", "@daily", REDACTED))], &[], None);
    assert!(nothing_stored
        .expect_err("refused")
        .to_string()
        .contains("real value"));
}

#[test]
fn a_stored_pause_stays_unless_the_file_says_paused_false() {
    let mut in_store =
        json!({"id": "a", "schedule": "@daily", "target": {"type": "nats", "subject": "s"}});
    in_store["paused"] = json!(true);
    let silent =
        json!({"id": "a", "schedule": "@daily", "target": {"type": "nats", "subject": "s"}});
    let plan_silent = plan(
        &[file(silent.clone())],
        &[stored(4, in_store.clone())],
        None,
    )
    .expect("plan");
    assert_eq!(
        plan_silent.steps[0].action,
        Action::Unchanged { revision: 4 }
    );
    assert!(plan_silent.steps[0].notes[0].contains("stays paused"));
    let mut resume = silent;
    resume["paused"] = json!(false);
    let plan_resume = plan(&[file(resume)], &[stored(4, in_store)], None).expect("plan");
    assert!(matches!(plan_resume.steps[0].action, Action::Update { .. }));
}

#[test]
fn prune_deletes_only_in_its_namespaces_and_deletes_come_last() {
    let job = |id: &str| json!({"id": id, "schedule": "@daily", "target": {"type": "nats", "subject": "s"}});
    let store = [
        stored(1, job("billing.a")),
        stored(1, job("billing.old")),
        stored(1, job("ops.keep")),
        stored(1, job("plain")),
    ];
    let prune = Prune {
        namespaces: ["billing".to_string()].into(),
        label: None,
    };
    let p = plan(
        &[file(job("billing.a")), file(job("billing.new"))],
        &store,
        Some(&prune),
    )
    .expect("plan");
    let actions: Vec<(&str, &str)> = p
        .steps
        .iter()
        .map(|s| {
            let a = match s.action {
                Action::Create => "create",
                Action::Update { .. } => "update",
                Action::Unchanged { .. } => "unchanged",
                Action::Delete { .. } => "delete",
            };
            (s.id.as_str(), a)
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("billing.a", "unchanged"),
            ("billing.new", "create"),
            ("billing.old", "delete")
        ]
    );
    assert_eq!(p.counts(), (1, 0, 1, 1));
}

#[test]
fn a_chain_swap_writes_the_dropped_edge_first() {
    let chained = |id: &str, parent: Option<&str>| {
        let mut j =
            json!({"id": id, "schedule": "@daily", "target": {"type": "nats", "subject": "s"}});
        if let Some(parent) = parent {
            j["after"] = json!([{"job": parent}]);
        }
        j
    };
    // Stored: b follows a. Files: a follows b. Writing a first would be a cycle.
    let store = [
        stored(1, chained("a", None)),
        stored(1, chained("b", Some("a"))),
    ];
    let p = plan(
        &[file(chained("a", Some("b"))), file(chained("b", None))],
        &store,
        None,
    )
    .expect("plan");
    let order: Vec<&str> = p.steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(order, ["b", "a"]);

    // The reviewer's case: a after z, b after a; to: a after b. Dropping
    // a's edge to z in the same write that adds a -> b would close a -> b
    // -> a while b still follows a: b goes first.
    let store = [
        stored(1, chained("cyc.a", Some("cyc.z"))),
        stored(1, chained("cyc.b", Some("cyc.a"))),
        stored(1, chained("cyc.z", None)),
    ];
    let files = [
        file(chained("cyc.a", Some("cyc.b"))),
        file(chained("cyc.b", None)),
        file(chained("cyc.z", None)),
    ];
    let p = plan(&files, &store, None).expect("plan");
    let writes: Vec<&str> = p
        .steps
        .iter()
        .filter(|s| !matches!(s.action, Action::Unchanged { .. }))
        .map(|s| s.id.as_str())
        .collect();
    assert_eq!(writes, ["cyc.b", "cyc.a"]);
}
