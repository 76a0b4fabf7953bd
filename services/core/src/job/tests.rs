use super::*;
use crate::backoff::Backoff;

fn problems(json: &str) -> Vec<FieldError> {
    parse_job(json.as_bytes(), None).expect_err("must be refused")
}

#[test]
fn minimal_definition_is_valid() {
    let job = parse_job(
        br#"{"id":"hello","schedule":"*/2 * * * * *","target":{"type":"nats","subject":"demo.hello"}}"#,
        None,
    )
    .expect("valid");
    assert_eq!(job.spec.id, "hello");
    assert_eq!(job.max_attempts, 3);
    assert_eq!(job.timeout, DEFAULT_TIMEOUT);
    assert_eq!(job.spec.target.kind(), "nats");
}

#[test]
fn key_supplies_a_missing_id_and_must_match_a_given_one() {
    let json = br#"{"schedule":"@every 5s","target":{"type":"shell","command":"true"}}"#;
    assert_eq!(parse_job(json, Some("k1")).expect("valid").spec.id, "k1");
    let json = br#"{"id":"a","schedule":"@every 5s","target":{"type":"shell","command":"true"}}"#;
    let errs = parse_job(json, Some("b")).expect_err("mismatch");
    assert_eq!(errs[0].code, "id_mismatch");
}

#[test]
fn thousands_of_bad_fields_give_a_bounded_answer() {
    let unknown: Vec<String> = (0..4000).map(|i| format!("\"x{i}\":1")).collect();
    let text = format!(
        r#"{{"id":"j","schedule":"@daily","target":{{"type":"nats","subject":"a"}},{}}}"#,
        unknown.join(",")
    );
    assert!(text.len() < MAX_DEFINITION_BYTES);
    let started = std::time::Instant::now();
    let errs = problems(&text);
    assert_eq!(errs.len(), MAX_PROBLEMS, "{:?}", &errs[..3]);
    assert_eq!(errs[0].field, "x0", "{}", errs[0]);
    let last = errs.last().expect("last");
    assert_eq!(last.code, "more_problems");
    assert!(last.message.ends_with("more problems not listed"), "{last}");
    let answer = serde_json::to_vec(&errs).expect("json");
    assert!(answer.len() < 64 * 1024, "{} bytes", answer.len());
    // A guard against work that grows with the square of the fields (a
    // quadratic pass over 4,000 fields takes minutes), not a timing claim:
    // 0.4 s alone, and 2.4 s once on a machine busy with other tests, so
    // the bound leaves room for a loaded CI machine.
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn every_problem_is_reported_at_once() {
    let errs = problems(
        r#"{"id":"bad id","schedule":"* * * *","timezone":"Nowhere/City","timeout":"0s",
            "target":{"type":"http","url":"ftp://x/"}}"#,
    );
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        ["id", "schedule", "timezone", "timeout", "target.url"]
    );
    assert_eq!(
        errs[1].to_string(),
        "schedule: expected 5, 6 or 7 fields, got 4"
    );
    assert_eq!(
        errs[3].to_string(),
        "timeout: must be between 1s and 24h, got \"0s\""
    );
    assert_eq!(
        errs[4].to_string(),
        "target.url: scheme must be http or https, got \"ftp\""
    );
}

#[test]
fn duration_bounds_read_as_they_are_written() {
    let errs = problems(
        r#"{"id":"x","schedule":"@daily","jitter":"2h","catchup_window":"8d",
            "retry":{"backoff":"10ms","max_backoff":"25h"},
            "target":{"type":"shell","command":"true"}}"#,
    );
    let got: Vec<String> = errs.iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            "retry.backoff: must be between 100ms and 24h, got \"10ms\"",
            "retry.max_backoff: must be between retry.backoff (1s) and 24h, got \"25h\"",
            "jitter: must be between 0s and 1h, got \"2h\"",
            "catchup_window: must be between 1s and 7d, got \"8d\"",
        ]
    );
}

#[test]
fn structural_errors_name_the_field() {
    let errs = problems(r#"{"id":"x","schedule":"@daily","target":{"type":"http","url":5}}"#);
    assert_eq!(errs[0].field, "target.url");
    let errs = problems(r#"{"id":"x","schedule":"@daily","target":{"type":"ftp"}}"#);
    assert_eq!(errs[0].field, "target.type");
    let errs = problems(
        r#"{"id":"x","schedule":"@daily","colour":"red","target":{"type":"shell","command":"true"}}"#,
    );
    assert!(errs[0].message.contains("unknown field"), "{:?}", errs);
    let errs = problems(
        r#"{"id":"x","schedule":"@daily","target":{"type":"shell","command":"true","workdir":"/"}}"#,
    );
    assert!(errs[0].message.contains("unknown field"), "{:?}", errs);
    let errs = problems(
        r#"{"id":"x","schedule":"@daily","target":{"type":"shell","command":"true"}} trailing"#,
    );
    assert_eq!(errs[0].code, "invalid_json");
    // Found by the bad-input corpus (tests/bad_input/):
    // a missing field is "required", by name;
    let errs = problems(r#"{"id":"x","target":{"type":"shell","command":"true"}}"#);
    assert_eq!(
        (errs[0].field.as_str(), errs[0].code.as_str()),
        ("schedule", "required")
    );
    let errs = problems(r#"{"id":"x","schedule":"@daily"}"#);
    assert_eq!(
        (errs[0].field.as_str(), errs[0].code.as_str()),
        ("target", "required")
    );
    // serde's positional form of a struct is not a definition;
    for (body, field) in [
        (
            r#"["x",null,"@daily",null,false,{"type":"nats","subject":"s"}]"#,
            "",
        ),
        (
            r#"{"id":"x","schedule":"@daily","retry":[3],"target":{"type":"nats","subject":"s"}}"#,
            "retry",
        ),
        (
            r#"{"id":"x","schedule":"@daily","target":{"type":"nats","subject":"s","headers":[]}}"#,
            "target",
        ),
    ] {
        let errs = problems(body);
        assert_eq!(errs[0].code, "invalid_json", "{body}: {errs:?}");
        assert!(errs[0].field.starts_with(field), "{body}: {errs:?}");
    }
    // a document cut off inside target names target, not "target.?";
    let errs = problems(r#"{"id":"x","schedule":"@daily","target":{"type":"nats","subj"#);
    assert_eq!(errs[0].field, "target", "{errs:?}");
    // and line breaks in a URL are refused, not silently dropped.
    let errs = problems(
        "{\"id\":\"x\",\"schedule\":\"@daily\",\"target\":{\"type\":\"http\",\"url\":\"http://example.com/x\\r\\nX-Injected: 1\"}}",
    );
    assert_eq!(
        (errs[0].field.as_str(), errs[0].code.as_str()),
        ("target.url", "invalid_url"),
        "{errs:?}"
    );
}

#[test]
fn ids_are_subject_and_key_safe() {
    assert!(validate_id("backup-db_01").is_ok());
    assert!(validate_id("billing.backup-db_01").is_ok());
    for bad in [
        "",
        "a.b.c",
        "default.a",
        "a.",
        "a b",
        "a*",
        ">",
        "-lead",
        "é",
        &"x".repeat(129),
    ] {
        assert!(validate_id(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn oversize_and_non_utf8_are_refused() {
    let big = vec![b' '; MAX_DEFINITION_BYTES + 1];
    assert_eq!(parse_job(&big, None).expect_err("big")[0].code, "too_large");
    assert_eq!(
        parse_job(&[0xff, 0xfe], None).expect_err("utf8")[0].code,
        "invalid_utf8"
    );
}

#[test]
fn retry_fields_shape_the_delays() {
    let job = parse_job(
        br#"{"id":"r","schedule":"@daily","target":{"type":"shell","command":"true"},
            "retry":{"max_attempts":5,"backoff":"2s","multiplier":3,"max_backoff":"10s","jitter":0}}"#,
        None,
    )
    .expect("valid");
    let delays: Vec<u64> = (2..=5).map(|a| job.retry_delay(a, "r").as_secs()).collect();
    assert_eq!(delays, [2, 6, 10, 10]);
    let default = parse_job(
        br#"{"id":"r","schedule":"@daily","target":{"type":"shell","command":"true"}}"#,
        None,
    )
    .expect("valid");
    assert_eq!(default.backoff, Backoff::default());
}

#[test]
fn lifecycle_fields_are_checked() {
    let errs = problems(
        r#"{"id":"x","schedule":"@daily","pool":"gpu.a","shards":0,
            "retry":{"backoff":"10s","max_backoff":"5s","multiplier":0.5,"jitter":2},
            "notify":{"webhook":"mailto:ops@example.com"},
            "target":{"type":"shell","command":"true","working_dir":"tmp","env":{"JETCRON_RUN_ID":"x","1A":"y"}}}"#,
    );
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "retry.max_backoff",
            "retry.multiplier",
            "retry.jitter",
            "pool",
            "shards",
            "notify.webhook",
            "target.working_dir",
            "target.env.1A",
            "target.env.JETCRON_RUN_ID",
        ],
        "{errs:#?}"
    );
    let job = parse_job(
        br#"{"id":"x","schedule":"@daily","pool":"gpu","shards":3,"concurrency":"forbid",
            "notify":{"webhook":"https://hooks.example.com/x"},
            "target":{"type":"shell","command":"true","working_dir":"/tmp","env":{"MODE":"fast"}}}"#,
        None,
    )
    .expect("valid");
    assert_eq!((job.pool.as_str(), job.shards), ("gpu", 3));
    assert_eq!(job.concurrency, ConcurrencyPolicy::Forbid);
}

#[test]
fn nats_targets_cannot_aim_at_jetcron_or_nats_subjects() {
    for subject in [
        "jetcron.due.default.x",
        "jetcron.runs.x.succeeded",
        "jetcron",
        "$KV.jetcron_jobs.x",
        "$JS.API.STREAM.DELETE.JETCRON_DUE",
        "_INBOX.abc",
    ] {
        let body = format!(
            r#"{{"id":"forge","schedule":"@daily","target":{{"type":"nats","subject":"{subject}"}}}}"#
        );
        let problems = parse_job(body.as_bytes(), None).expect_err(subject);
        assert!(
            problems
                .iter()
                .any(|p| p.field == "target.subject" && p.code == "reserved_subject"),
            "{subject}: {problems:?}"
        );
    }
    let ok =
        br#"{"id":"fine","schedule":"@daily","target":{"type":"nats","subject":"jetcronish.svc"}}"#;
    assert!(parse_job(ok, None).is_ok());
}
