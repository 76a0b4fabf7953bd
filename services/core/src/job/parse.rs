//! From bytes to a [`ValidJob`]: decoding with every problem named at
//! once. serde stops at the first structural problem; the JSON Schema
//! ([`super::schema`]) finds the others, the broken fields are taken out and
//! the rest is decoded and validated ([`super::validate`]).

use chrono::{DateTime, Utc};
use serde::Deserialize as _;

use super::schema;
use super::spec::*;
use super::validate::validate_with;
use crate::schedule::{Schedule, ScheduleError};

/// A definition written at `written_at` (the bucket entry's time, or now for
/// an API put): parsed, validated, and refused as `never_fires` when it has
/// no fire time after that instant. Every door uses this one check: the
/// API put, the ticker's watch and the gateway's reads of the bucket.
pub fn parse_written(
    bytes: &[u8],
    key: Option<&str>,
    written_at: DateTime<Utc>,
) -> Result<ValidJob, Vec<FieldError>> {
    parse_written_with(bytes, key, written_at, &mut Schedule::parse)
}

/// [`parse_written`] with the schedule line parsed by `parse_schedule` (a
/// cache, see [`parse_job_with`]).
pub fn parse_written_with(
    bytes: &[u8],
    key: Option<&str>,
    written_at: DateTime<Utc>,
    parse_schedule: &mut dyn FnMut(&str) -> Result<Schedule, ScheduleError>,
) -> Result<ValidJob, Vec<FieldError>> {
    let job = parse_job_with(bytes, key, parse_schedule)?;
    match job.never_fires_after(written_at) {
        Some(problem) => Err(vec![problem]),
        None => Ok(job),
    }
}

/// Parse and validate a definition. `key` is the KV key it was stored under,
/// if any: the id may then be omitted, and must otherwise equal the key.
pub fn parse_job(bytes: &[u8], key: Option<&str>) -> Result<ValidJob, Vec<FieldError>> {
    parse_job_with(bytes, key, &mut Schedule::parse)
}

/// [`parse_job`] with the schedule line parsed by `parse_schedule` (a cache,
/// for holders of many jobs: the ticker parses a million definitions at start).
/// A problem in a secret map never repeats its value
/// ([`super::secrets::hide_secret_values`]).
pub fn parse_job_with(
    bytes: &[u8],
    key: Option<&str>,
    parse_schedule: &mut dyn FnMut(&str) -> Result<Schedule, ScheduleError>,
) -> Result<ValidJob, Vec<FieldError>> {
    parse_job_unmasked(bytes, key, parse_schedule).map_err(super::secrets::hide_secret_values)
}

fn parse_job_unmasked(
    bytes: &[u8],
    key: Option<&str>,
    parse_schedule: &mut dyn FnMut(&str) -> Result<Schedule, ScheduleError>,
) -> Result<ValidJob, Vec<FieldError>> {
    if bytes.len() > MAX_DEFINITION_BYTES {
        return Err(vec![FieldError::new(
            "",
            "too_large",
            format!(
                "definition is {} bytes, the limit is {MAX_DEFINITION_BYTES}",
                bytes.len()
            ),
        )]);
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        vec![FieldError::new(
            "",
            "invalid_utf8",
            format!("definition is not valid UTF-8: {e}"),
        )]
    })?;
    // serde would also read a struct from a positional array: a definition
    // (and each object in it) must be a JSON object.
    if !text.trim_start().starts_with('{') {
        let message = match serde_json::from_str::<serde_json::Value>(text) {
            Ok(value) => format!(
                "a definition is a JSON object, got {}",
                match value {
                    serde_json::Value::Null => "null",
                    serde_json::Value::Bool(_) => "a boolean",
                    serde_json::Value::Number(_) => "a number",
                    serde_json::Value::String(_) => "a string",
                    serde_json::Value::Array(_) => "an array",
                    serde_json::Value::Object(_) => "an object",
                }
            ),
            Err(e) => format!("a definition is a JSON object: {e}"),
        };
        return Err(vec![FieldError::new("", "invalid_json", message)]);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    // Plain serde first: tracking the path costs an allocation per field
    // name (a cold start reads a million definitions). Only a definition
    // that fails is read again to say where.
    let decoded = JobSpec::deserialize(&mut de).map_err(|_| {
        let mut tracked = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize::<_, JobSpec>(&mut tracked)
            .err()
            .map(|e| serde_problem(text, &e))
    });
    let mut spec = match decoded {
        Err(problem) => {
            let first = problem.unwrap_or_else(|| {
                FieldError::new("", "invalid_json", "the definition could not be read")
            });
            return Err(capped(every_problem(text, key, first, parse_schedule)));
        }
        Ok(spec) => match positional_object_possible(text)
            .then(|| positional_object(text))
            .flatten()
        {
            Some(first) => return Err(capped(every_problem(text, key, first, parse_schedule))),
            None => spec,
        },
    };
    de.end().map_err(|e| {
        vec![FieldError::new(
            "",
            "invalid_json",
            format!("trailing characters after the definition: {e}"),
        )]
    })?;
    if let Some(key) = key {
        if spec.id.is_empty() {
            spec.id = key.to_string();
        } else if spec.id != key {
            return Err(vec![id_mismatch(&spec.id, key)]);
        }
    }
    validate_with(spec, parse_schedule).map_err(capped)
}

/// The problem serde stopped at, named as precisely as we can.
fn serde_problem(text: &str, e: &serde_path_to_error::Error<serde_json::Error>) -> FieldError {
    let path = known_path(&e.path().to_string());
    if path == "target" {
        if let Some(precise) = diagnose_target(text) {
            return precise;
        }
    }
    let message = e.inner().to_string();
    // "missing field `schedule`": a required field, named.
    if let Some(name) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
    {
        let field = if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        };
        return FieldError::new(field, "required", "missing");
    }
    FieldError::new(path, "invalid_json", message)
}

/// `problems`, at most [`MAX_PROBLEMS`] of them: the first ones, then one
/// saying how many more there were.
fn capped(mut problems: Vec<FieldError>) -> Vec<FieldError> {
    if problems.len() > MAX_PROBLEMS {
        let more = problems.len() - (MAX_PROBLEMS - 1);
        problems.truncate(MAX_PROBLEMS - 1);
        problems.push(FieldError::new(
            "",
            "more_problems",
            format!("{more} more problems not listed"),
        ));
    }
    problems
}

/// Every problem of a definition serde refused at `first`: serde stops at
/// one, the job schema finds the other structural ones, and the fields that
/// did decode are validated as usual. Only on this failure path is the
/// schema consulted.
fn every_problem(
    text: &str,
    key: Option<&str>,
    first: FieldError,
    parse_schedule: &mut dyn FnMut(&str) -> Result<Schedule, ScheduleError>,
) -> Vec<FieldError> {
    // A problem of the document as a whole (a duplicate field) says it all.
    if first.field.is_empty() {
        return vec![first];
    }
    let mut problems = vec![first];
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return problems;
    };
    let structural = schema::structural_problems(&value);
    for s in &structural {
        add_unless_named(&mut problems, s.problem.clone());
    }
    // A missing schedule is said first, in the definition's field order
    // (serde stops at a later field: the schedule may be left out when
    // the definition has parents).
    if let Some(at) = problems.iter().position(|p| p.message == MISSING_SCHEDULE) {
        let missing = problems.remove(at);
        problems.insert(0, missing);
    }
    let Some((mut spec, mut settled, serde_only)) = schema::decodable(value, &structural) else {
        return problems;
    };
    for p in serde_only {
        add_unless_named(&mut problems, p);
    }
    settled.extend(problems.iter().map(|p| p.field.clone()));
    if let Some(key) = key {
        if spec.id.is_empty() || schema::covered("id", &settled) {
            spec.id = key.to_string();
        } else if spec.id != key {
            problems.push(id_mismatch(&spec.id, key));
        }
    }
    if let Err(semantic) = validate_with(spec, parse_schedule) {
        problems.extend(
            semantic
                .into_iter()
                .filter(|p| !schema::covered(&p.field, &settled)),
        );
    }
    problems
}

/// Add `problem` unless one of `problems` names its field, or a field around
/// or inside it.
fn add_unless_named(problems: &mut Vec<FieldError>, problem: FieldError) {
    let named = problems.iter().any(|q| {
        schema::covered(&problem.field, std::slice::from_ref(&q.field))
            || schema::covered(&q.field, std::slice::from_ref(&problem.field))
    });
    if !named {
        problems.push(problem);
    }
}

fn id_mismatch(id: &str, key: &str) -> FieldError {
    FieldError::new(
        "id",
        "id_mismatch",
        format!("id {id:?} differs from the KV key {key:?} it is stored under"),
    )
}

/// A serde path as a field name: `.` (the root) is empty, and the path stops
/// before an unknown position (`?`, a document cut off mid-way).
fn known_path(path: &str) -> String {
    path.split('.')
        .take_while(|segment| *segment != "?")
        .filter(|segment| !segment.is_empty())
        .collect::<Vec<_>>()
        .join(".")
}

/// The first object-valued field given as an array (serde reads structs from
/// positional arrays too; a definition never has them).
/// Whether [`positional_object`] can find anything: only an array or a
/// `null` where an object belongs is refused there, so a definition with
/// neither skips its second, whole-value parse (a third of the parse of a
/// plain definition, paid a million times at a ticker's start).
fn positional_object_possible(text: &str) -> bool {
    text.contains('[') || text.contains("null")
}

fn positional_object(text: &str) -> Option<FieldError> {
    const OBJECTS: [&str; 7] = [
        "/target",
        "/retry",
        "/notify",
        "/labels",
        "/target/headers",
        "/target/env",
        "/notify/headers",
    ];
    let root: serde_json::Value = serde_json::from_str(text).ok()?;
    OBJECTS.iter().find_map(|pointer| {
        root.pointer(pointer).filter(|v| !v.is_object()).map(|v| {
            let field = pointer.trim_start_matches('/').replace('/', ".");
            let kind = match v {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::Null => "null",
                _ => "not an object",
            };
            FieldError::new(
                field,
                "invalid_json",
                format!("must be a JSON object, got {kind}"),
            )
        })
    })
}

/// serde reads a tagged enum through a buffer and loses the path inside it;
/// re-read the target alone to name the exact field (`target.url`).
fn diagnose_target(text: &str) -> Option<FieldError> {
    let root: serde_json::Value = serde_json::from_str(text).ok()?;
    let mut target = root.get("target")?.as_object()?.clone();
    let kind = match target.remove("type") {
        Some(serde_json::Value::String(kind)) => kind,
        Some(other) => {
            return Some(FieldError::new(
                "target.type",
                "invalid_json",
                format!("must be one of \"nats\", \"http\", \"shell\", got {other}"),
            ))
        }
        None => {
            return Some(FieldError::new(
                "target.type",
                "required",
                "missing; must be one of \"nats\", \"http\", \"shell\"",
            ))
        }
    };
    let rest = serde_json::Value::Object(target);
    let result = match kind.as_str() {
        "nats" => serde_path_to_error::deserialize::<_, NatsTarget>(rest).map(drop),
        "http" => serde_path_to_error::deserialize::<_, HttpTarget>(rest).map(drop),
        "shell" => serde_path_to_error::deserialize::<_, ShellTarget>(rest).map(drop),
        other => {
            return Some(FieldError::new(
                "target.type",
                "invalid_json",
                format!("must be one of \"nats\", \"http\", \"shell\", got {other:?}"),
            ))
        }
    };
    let err = result.err()?;
    let path = err.path().to_string();
    let field = if path == "." {
        "target".to_string()
    } else {
        format!("target.{path}")
    };
    Some(FieldError::new(
        field,
        "invalid_json",
        err.inner().to_string(),
    ))
}
