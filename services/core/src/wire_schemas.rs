//! JSON Schemas of everything jetcron reads or writes on the wire, generated
//! from the Rust types (serde attributes included), so they cannot drift.
//!
//! The files under `schemas/` are these schemas, checked in for people and
//! other languages; a test fails when a type changes and the file does not.
//! Regenerate with `JETCRON_WRITE_SCHEMAS=1 cargo test -p jetcron-core wire_schemas`.

use schemars::{schema_for, Schema};

use crate::control::{Completion, FailureNotice, KillRequest};
use crate::events::{DueEvent, RunEvent};
use crate::job_events::{FireMissed, JobRejected};

/// (path under `schemas/`, schema).
pub fn all() -> Vec<(&'static str, Schema)> {
    vec![
        ("job.schema.json", crate::job::schema::job_schema()),
        ("policy.schema.json", schema_for!(crate::policy::Policy)),
        ("events/due_event.schema.json", schema_for!(DueEvent)),
        ("events/run_event.schema.json", schema_for!(RunEvent)),
        ("events/job_rejected.schema.json", schema_for!(JobRejected)),
        ("events/fire_missed.schema.json", schema_for!(FireMissed)),
        ("events/completion.schema.json", schema_for!(Completion)),
        ("events/kill_request.schema.json", schema_for!(KillRequest)),
        (
            "events/failure_notice.schema.json",
            schema_for!(FailureNotice),
        ),
    ]
}

/// The text of a schema file: pretty JSON and a final newline.
pub fn render(schema: &Schema) -> String {
    let mut text = serde_json::to_string_pretty(schema).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use chrono::TimeZone as _;

    use super::*;
    use crate::events::{AttemptOutcome, RunEventKind, RunId, Trigger};

    fn schemas_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../schemas")
    }

    #[test]
    fn checked_in_schemas_match_the_types() {
        let write = std::env::var_os("JETCRON_WRITE_SCHEMAS").is_some();
        let mut stale = Vec::new();
        for (path, schema) in all() {
            let file = schemas_dir().join(path);
            let text = render(&schema);
            if write {
                std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
                std::fs::write(&file, &text).expect("write schema");
            } else if std::fs::read_to_string(&file).ok().as_deref() != Some(text.as_str()) {
                stale.push(path);
            }
        }
        assert!(
            stale.is_empty(),
            "schemas out of date: {stale:?}; run JETCRON_WRITE_SCHEMAS=1 cargo test -p jetcron-core wire_schemas"
        );
    }

    fn validator(name: &str) -> jsonschema::Validator {
        let (_, schema) = all()
            .into_iter()
            .find(|(path, _)| *path == name)
            .expect("schema");
        jsonschema::validator_for(&serde_json::to_value(schema).expect("json")).expect("compiles")
    }

    fn assert_valid(validator: &jsonschema::Validator, value: &serde_json::Value) {
        let errors: Vec<String> = validator
            .iter_errors(value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{value}: {errors:?}");
    }

    #[test]
    fn events_as_serialized_satisfy_their_schemas() {
        let job = crate::job::parse_job(
            br#"{"id":"j","schedule":"@daily","shards":2,"concurrency":"forbid",
                "retry":{"max_attempts":4,"backoff":"2s","multiplier":1.5,"max_backoff":"1m","jitter":0.1},
                "notify":{"webhook":"https://example.com/hook"},
                "target":{"type":"shell","command":"true","working_dir":"/tmp","env":{"A":"b"}}}"#,
            None,
        )
        .expect("job");
        let at = chrono::Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("t");
        let due = DueEvent {
            run_id: RunId::for_fire("j", at),
            job_id: "j".into(),
            scheduled_at: at,
            trigger: Trigger::Schedule,
            pool: "default".into(),
            job_revision: 3,
            job: job.spec.clone(),
            shard: Some(1),
            parent: None,
        };
        assert_valid(
            &validator("events/due_event.schema.json"),
            &serde_json::to_value(&due).expect("json"),
        );
        assert_valid(
            &validator("job.schema.json"),
            &serde_json::to_value(&job.spec).expect("json"),
        );
        let runs = validator("events/run_event.schema.json");
        let notices = validator("events/failure_notice.schema.json");
        for kind in RunEventKind::ALL {
            let event = RunEvent {
                event_id: RunEvent::event_id_for(&due.run_id, Some(1), 2, kind),
                run_id: due.run_id.clone(),
                job_id: "j".into(),
                kind,
                trigger: Trigger::Schedule,
                scheduled_at: at,
                attempt: 2,
                max_attempts: 4,
                executor_id: "e1".into(),
                target_type: "shell".into(),
                pool: "default".into(),
                at,
                started_at: Some(at),
                finished_at: Some(at),
                duration_ms: Some(5),
                status_code: None,
                exit_code: Some(1),
                output: Some("out".into()),
                output_truncated: true,
                error: Some("boom".into()),
                retry_at: Some(at),
                outcome: Some(AttemptOutcome::TimedOut),
                shard: Some(1),
                shards: Some(2),
                parent_run_id: None,
                parent_job_id: None,
            };
            assert_valid(&runs, &serde_json::to_value(&event).expect("json"));
            let notice = FailureNotice {
                status: kind,
                run: event,
            };
            assert_valid(&notices, &serde_json::to_value(&notice).expect("json"));
        }
        let missed = FireMissed::new(
            "j",
            at,
            at + chrono::Duration::minutes(2),
            chrono::Duration::minutes(2),
        );
        assert_valid(
            &validator("events/fire_missed.schema.json"),
            &serde_json::to_value(&missed).expect("json"),
        );
        let completion = validator("events/completion.schema.json");
        assert_valid(
            &completion,
            &serde_json::json!({"status":"failed","error":"x","attempt":1,"shard":0}),
        );
        assert!(!completion.is_valid(&serde_json::json!({"status":"maybe"})));
        assert!(
            !validator("events/kill_request.schema.json").is_valid(&serde_json::json!({"run":"x"}))
        );
    }

    #[test]
    fn the_job_schema_refuses_what_the_parser_refuses() {
        let jobs = validator("job.schema.json");
        for bad in [
            serde_json::json!({"id":"x","schedule":"@daily","colour":"red","target":{"type":"shell","command":"true"}}),
            serde_json::json!({"id":"x","schedule":"@daily","target":{"type":"ftp"}}),
            serde_json::json!({"id":"x","schedule":"@daily","concurrency":"sometimes","target":{"type":"shell","command":"true"}}),
            serde_json::json!({"id":"x","target":{"type":"shell","command":"true"}}),
        ] {
            assert!(!jobs.is_valid(&bad), "schema accepted {bad}");
            assert!(
                crate::job::parse_job(bad.to_string().as_bytes(), None).is_err(),
                "parser accepted {bad}"
            );
        }
    }
}
