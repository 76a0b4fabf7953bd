//! The schema against the validator, and the problems both report together.

use serde_json::{json, Map};

use super::*;
use crate::job::{parse_job, HTTP_METHODS};

fn schema() -> &'static jsonschema::Validator {
    validator().expect("the job schema compiles")
}

/// The published schema (`schemas/job.schema.json`), which states more.
fn published() -> &'static jsonschema::Validator {
    static PUBLISHED: std::sync::LazyLock<jsonschema::Validator> = std::sync::LazyLock::new(|| {
        let schema = serde_json::to_value(job_schema()).expect("JSON");
        jsonschema::validator_for(&schema).expect("the published schema compiles")
    });
    &PUBLISHED
}

fn base() -> Value {
    json!({"id": "j", "schedule": "@daily", "target": {"type": "nats", "subject": "svc.x"}})
}

/// `base()` with `patch` merged in (objects key by key, `null` removes).
fn patched(patch: Value) -> Value {
    fn merge(into: &mut Value, patch: Value) {
        match (into, patch) {
            (Value::Object(into), Value::Object(patch)) => {
                for (k, v) in patch {
                    if v.is_null() {
                        into.remove(&k);
                    } else {
                        merge(into.entry(k).or_insert(Value::Null), v);
                    }
                }
            }
            (into, patch) => *into = patch,
        }
    }
    let mut value = base();
    merge(&mut value, patch);
    value
}

fn parser_accepts(value: &Value) -> bool {
    parse_job(value.to_string().as_bytes(), None).is_ok()
}

#[test]
fn the_schema_refuses_what_the_validator_refuses() {
    let http = |extra: Value| {
        let mut target = json!({"type": "http", "url": "https://example.com/x"});
        if let (Some(t), Value::Object(extra)) = (target.as_object_mut(), extra) {
            t.extend(extra);
        }
        json!({ "target": target })
    };
    let shell = |extra: Value| {
        let mut target = json!({"type": "shell", "command": "true"});
        if let (Some(t), Value::Object(extra)) = (target.as_object_mut(), extra) {
            t.extend(extra);
        }
        json!({ "target": target })
    };
    for patch in [
        json!({"id": "bad id"}),
        json!({"id": "a.b.c"}),
        json!({"id": "default.a"}),
        json!({"id": "deliver.a"}),
        json!({"id": "a."}),
        json!({"after": [{"job": "a.b.c"}]}),
        json!({"id": "-lead"}),
        json!({"id": "é"}),
        json!({"id": "x".repeat(129)}),
        json!({"pool": "gpu.a"}),
        json!({"pool": ""}),
        json!({"shards": 0}),
        json!({"shards": 65}),
        json!({"retry": {"max_attempts": 0}}),
        json!({"retry": {"max_attempts": 101}}),
        json!({"retry": {"multiplier": 0.5}}),
        json!({"retry": {"multiplier": 11}}),
        json!({"retry": {"jitter": 2}}),
        json!({"retry": {"jitter": -0.1}}),
        json!({"retry": {"backoff": "soon"}}),
        json!({"retry": {"max_backoff": "5"}}),
        json!({"timeout": "30"}),
        json!({"timeout": "30 parsecs"}),
        json!({"jitter": "1h30"}),
        json!({"catchup_window": ""}),
        json!({"schedule": "* * * *"}),
        json!({"schedule": "* * * * * * * *"}),
        json!({"schedule": ""}),
        json!({"timezone": ""}),
        json!({"start_at": "tomorrow"}),
        json!({"end_at": "2030-01-01"}),
        json!({"description": "x".repeat(4097)}),
        json!({"labels": {"bad key": "v"}}),
        json!({"labels": {"k": "x".repeat(256)}}),
        json!({"labels": {"k": "line\nbreak"}}),
        json!({"labels": (0..33).map(|i| (format!("k{i}"), json!("v"))).collect::<Map<_, _>>()}),
        json!({"notify": {"webhook": "mailto:ops@example.com"}}),
        json!({"notify": {"webhook": "ftp://example.com/x"}}),
        json!({"notify": {"webhook": "https://example.com/\r\nX: 1"}}),
        json!({"notify": {"webhook": "https://example.com/", "headers": {"Bad Name": "v"}}}),
        json!({"notify": {"webhook": "https://example.com/", "headers": {"X-Token": "a\nb"}}}),
        json!({"target": {"subject": "jetcron.due.default.x"}}),
        json!({"target": {"subject": "jetcron"}}),
        json!({"target": {"subject": "$KV.jetcron_jobs.x"}}),
        json!({"target": {"subject": "_INBOX.abc"}}),
        json!({"target": {"subject": "svc.*"}}),
        json!({"target": {"subject": "svc.>"}}),
        json!({"target": {"subject": "svc..x"}}),
        json!({"target": {"subject": "svc x"}}),
        json!({"target": {"subject": ""}}),
        json!({"target": {"subject": "s", "headers": {"a:b": "v"}}}),
        json!({"target": {"subject": "s", "headers": {"X": "a\r\nb"}}}),
        http(json!({"method": "FETCH"})),
        http(json!({"method": "get"})),
        http(json!({"url": "ftp://example.com/x"})),
        http(json!({"url": "example.com/x"})),
        http(json!({"url": "https://example.com/\tx"})),
        http(json!({"headers": {"X-Token": "a\u{7f}b"}})),
        shell(json!({"command": "   "})),
        shell(json!({"command": "echo \u{0}"})),
        shell(json!({"working_dir": "tmp"})),
        shell(json!({"working_dir": "/tmp\u{0}"})),
        shell(json!({"env": {"1A": "x"}})),
        shell(json!({"env": {"JETCRON_RUN_ID": "x"}})),
        shell(json!({"env": {"jetcron_x": "x"}})),
        shell(json!({"env": {"A": "\u{0}"}})),
        shell(
            json!({"env": (0..65).map(|i| (format!("V{i}"), json!("v"))).collect::<Map<_, _>>()}),
        ),
    ] {
        let bad = patched(patch);
        assert!(!parser_accepts(&bad), "parser accepted {bad}");
        assert!(!schema().is_valid(&bad), "schema accepted {bad}");
    }
}

#[test]
fn the_schema_accepts_what_the_validator_accepts() {
    let mut valid = vec![
        base(),
        patched(json!({"id": "A-1_b", "pool": "gpu_2", "shards": 64, "paused": true})),
        patched(json!({"id": "x".repeat(128), "shards": 1, "description": "é".repeat(2000)})),
        patched(json!({"schedule": "*/2 * * * * *", "timezone": "Europe/Berlin"})),
        patched(json!({"schedule": "0 0 9 1 1 * 2030"})),
        patched(json!({"schedule": "  30 4 * * *  "})),
        patched(json!({"schedule": "@every 1h30m"})),
        patched(json!({"schedule": "@DAILY"})),
        patched(json!({"schedule": "@at 2030-01-01T09:00:00Z"})),
        patched(
            json!({"start_at": "2030-01-01T09:00:00Z", "end_at": "2031-01-01T09:00:00.5+02:00"}),
        ),
        patched(
            json!({"timeout": "24h", "jitter": "0s", "catchup_window": "7d", "misfire": "fire_all"}),
        ),
        patched(json!({"timeout": "1h 30m", "jitter": "1.5m", "catchup_window": "2 days"})),
        patched(json!({"timeout": "250ms 1s", "jitter": "59min", "catchup_window": "1 w"})),
        patched(
            json!({"retry": {"max_attempts": 1, "backoff": "100ms", "multiplier": 1, "max_backoff": "24h", "jitter": 0}}),
        ),
        patched(json!({"retry": {"max_attempts": 100, "multiplier": 10, "jitter": 1}})),
        patched(
            json!({"retry": {"max_attempts": null, "backoff": null}, "timeout": null, "pool": null}),
        ),
        patched(json!({"labels": {"team.a-b_c": "billing", "k": ""}})),
        patched(
            json!({"notify": {"webhook": "HTTP://alerts.example.com/x", "headers": {"Authorization": "Bearer abc\tdéf …"}}}),
        ),
        patched(json!({"concurrency": "replace"})),
        patched(
            json!({"target": {"subject": "a.b*c.>d", "payload": [1, {"x": null}], "headers": {"X-Team": "billing"}}}),
        ),
        patched(json!({"target": {"subject": "jetcronish.svc"}})),
        patched(
            json!({"target": {"type": "shell", "subject": null, "command": " ./run ", "working_dir": "/srv", "env": {"_A1": "x", "MODE": "fast"}}}),
        ),
    ];
    for method in HTTP_METHODS {
        valid.push(patched(json!({"target": {"type": "http", "subject": null, "url": "https://example.com/x?a=1#f", "method": method, "headers": {"X-A": "b"}, "body": "{}"}})));
    }
    for value in valid {
        assert!(parser_accepts(&value), "parser refused {value}");
        for validator in [schema(), published()] {
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "schema refused {value}: {errors:?}");
        }
    }
}

/// Every ```json block of docs/jobs.md is a definition that validates and
/// satisfies the schema, unless its fence says `json refused`: then both
/// must refuse it.
#[test]
fn the_examples_in_the_job_docs_are_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/jobs.md");
    let doc = std::fs::read_to_string(path).expect("docs/jobs.md");
    let mut examples = 0;
    let mut lines = doc.lines().enumerate();
    while let Some((start, line)) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix("```json") else {
            continue;
        };
        let refused = info.trim() == "refused";
        let block: Vec<&str> = lines
            .by_ref()
            .map(|(_, l)| l)
            .take_while(|l| !l.trim_start().starts_with("```"))
            .collect();
        let text = block.join("\n");
        let at = format!("docs/jobs.md:{}", start + 1);
        let parsed = parse_job(text.as_bytes(), None);
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{at}: {e}"));
        let errors: Vec<String> = schema()
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        if refused {
            assert!(parsed.is_err(), "{at}: marked refused, parses");
            assert!(
                !errors.is_empty(),
                "{at}: marked refused, satisfies the schema"
            );
        } else {
            assert!(parsed.is_ok(), "{at}: {:?}", parsed.err());
            assert!(errors.is_empty(), "{at}: {errors:?}");
            let published: Vec<String> = published()
                .iter_errors(&value)
                .map(|e| e.to_string())
                .collect();
            assert!(
                published.is_empty(),
                "{at}: published schema: {published:?}"
            );
        }
        examples += 1;
    }
    assert!(examples >= 4, "found {examples} examples");
}

fn problems(value: Value, key: Option<&str>) -> Vec<(String, String)> {
    parse_job(value.to_string().as_bytes(), key)
        .expect_err("refused")
        .into_iter()
        .map(|p| (p.field, p.code))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(f, c)| (f.to_string(), c.to_string()))
        .collect()
}

#[test]
fn structural_and_semantic_problems_are_reported_together() {
    let errs = parse_job(
        br#"{"id":"x","schedule":"* * * *","shards":"two","colour":"red",
            "target":{"type":"shell","command":"true"}}"#,
        None,
    )
    .expect_err("refused");
    let got: Vec<String> = errs.iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            "shards: invalid type: string \"two\", expected u32 at line 1 column 45",
            "colour: unknown field `colour`, expected one of `after`, `catchup_window`, `concurrency`, `description`, `end_at`, `id`, `jitter`, `labels`, `misfire`, `notify`, `paused`, `pool`, `retry`, `schedule`, `shards`, `start_at`, `target`, `timeout`, `timezone`",
            "schedule: expected 5, 6 or 7 fields, got 4",
        ]
    );
    assert_eq!(errs[2].code, "invalid_schedule");
}

#[test]
fn problems_inside_objects_and_targets_are_named() {
    let got = problems(
        json!({"id": "bad id", "schedule": "@daily", "retry": {"max_attempts": "3", "tries": 1, "multiplier": 20},
               "concurrency": "sometimes", "misfire": 5, "timeout": "0s",
               "target": {"type": "http", "url": 5, "method": "FETCH", "foo": 1}}),
        None,
    );
    assert_eq!(
        got,
        pairs(&[
            ("concurrency", "invalid_json"),
            ("misfire", "invalid_json"),
            ("retry.max_attempts", "invalid_json"),
            ("retry.tries", "invalid_json"),
            ("target.url", "invalid_json"),
            ("target.foo", "invalid_json"),
            ("id", "invalid_id"),
            ("timeout", "out_of_range"),
            ("retry.multiplier", "out_of_range"),
            ("target.method", "invalid_method"),
        ])
    );
    let errs = parse_job(
        json!({"schedule": "@daily", "concurrency": "sometimes", "misfire": 5, "target": {"type": "ftp"}})
            .to_string()
            .as_bytes(),
        Some("k"),
    )
    .expect_err("refused");
    let got: Vec<String> = errs.iter().map(ToString::to_string).collect();
    // serde's problem first (with its position), then the schema's.
    assert!(
        got[0].starts_with(
            "concurrency: unknown variant `sometimes`, expected one of `allow`, `forbid`, `replace`"
        ),
        "{got:?}"
    );
    assert_eq!(
        got[1..],
        [
            "misfire: invalid type: integer `5`, expected a string",
            "target.type: must be one of \"nats\", \"http\", \"shell\", got \"ftp\"",
        ]
    );
}

#[test]
fn missing_and_broken_required_fields_do_not_hide_the_rest() {
    assert_eq!(
        problems(
            json!({"id": "x", "shards": 0, "target": {"url": "https://x"}}),
            None
        ),
        pairs(&[
            ("schedule", "required"),
            ("target.type", "required"),
            ("shards", "out_of_range"),
        ])
    );
    assert_eq!(
        problems(
            json!({"id": 7, "schedule": 5, "target": "https://x", "pool": "a.b"}),
            Some("k")
        ),
        pairs(&[
            ("id", "invalid_json"),
            ("schedule", "invalid_json"),
            ("target", "invalid_json"),
            ("pool", "invalid_id"),
        ])
    );
    // the key still has to match a readable id;
    assert_eq!(
        problems(
            json!({"id": "a", "schedule": 5, "target": {"type": "shell", "command": "true"}}),
            Some("b")
        ),
        pairs(&[("schedule", "invalid_json"), ("id", "id_mismatch")])
    );
    // a number too large for its type is serde's alone to see.
    assert_eq!(
        problems(
            json!({"id": "x", "schedule": 5, "shards": 5_000_000_000u64, "target": {"type": "shell", "command": "true"}}),
            None
        ),
        pairs(&[("schedule", "invalid_json"), ("shards", "invalid_json")])
    );
}

#[test]
fn problems_of_the_whole_document_stay_alone() {
    for text in [
        r#"{"id":"x","schedule":"@daily","schedule":"@hourly","target":{"type":"shell","command":"true"}}"#,
        r#"{"id":"x","schedule":5,"target":{"type":"shell","command":"true"}} trailing"#,
        r#"{"id":"x","schedule":5,"target":{"type":"shell","#,
    ] {
        let errs = parse_job(text.as_bytes(), None).expect_err(text);
        assert_eq!(errs.len(), 1, "{text}: {errs:?}");
    }
}
