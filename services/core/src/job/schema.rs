//! The JSON Schema of a job definition (`schemas/job.schema.json`) at work.
//!
//! The schema is derived from [`JobSpec`] with the validator's rules attached
//! (the patterns of [`super::patterns`], ranges, lengths, the method enum), so people and other
//! languages can check a definition before sending it. It is as strict as
//! JSON Schema allows and never stricter than [`super::validate`]: what
//! it cannot say (a cron line that never fires, an unknown time zone, byte
//! lengths of non-ASCII text, `end_at` after `start_at`) only the validator
//! checks.
//!
//! jetcron itself uses the schema on the failure path alone: serde stops at
//! the first structural problem (a wrong type, an unknown field, a missing
//! field), the schema reports them all with their place in the document.
//! [`structural_problems`] names each like the validator names fields
//! (`target.url`, `retry.max_attempts`), and [`decodable`] takes the broken
//! fields out so the rest can still be decoded and validated.

use std::sync::LazyLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::LocationSegment;
use jsonschema::{JsonType, ValidationError};
use serde_json::{Map, Value};

use super::spec::{FieldError, JobSpec, MAX_PROBLEMS, MISSING_SCHEDULE};

/// The job schema and its validator, built once, on the first refused
/// definition. `None` only if the generated schema did not compile (a test
/// guards against that); structural problems then stay at serde's first.
static JOB_SCHEMA: LazyLock<Option<(Value, jsonschema::Validator)>> = LazyLock::new(|| {
    let schema = serde_json::to_value(schemars::schema_for!(JobSpec)).ok()?;
    let validator = jsonschema::validator_for(&schema).ok()?;
    Some((schema, validator))
});

/// The compiled job schema.
pub fn validator() -> Option<&'static jsonschema::Validator> {
    JOB_SCHEMA.as_ref().map(|(_, validator)| validator)
}

/// A structural problem and where it is: the JSON pointer's segments, which
/// the field name (dotted, keys escaped) cannot always give back.
#[derive(Debug, Clone, PartialEq)]
pub struct Structural {
    pub problem: FieldError,
    pub path: Vec<String>,
}

/// Every structural problem of `value`: wrong types, unknown fields, missing
/// fields, unknown variants. Rules the validator checks itself (patterns,
/// ranges, lengths, enums) are left to it, so each problem is reported once,
/// with the validator's code.
pub fn structural_problems(value: &Value) -> Vec<Structural> {
    let Some((schema, validator)) = JOB_SCHEMA.as_ref() else {
        return Vec::new();
    };
    // Enough to fill an answer (the list is capped at MAX_PROBLEMS); more
    // would only cost time on a definition made of thousands of bad fields.
    let mut out = Vec::new();
    for error in validator.iter_errors(value).take(2 * MAX_PROBLEMS) {
        explain(schema, &error, &mut out);
    }
    out
}

/// The segments of an instance path.
fn segments(error: &ValidationError<'_>) -> Vec<String> {
    error
        .instance_path()
        .segments()
        .map(|segment| match segment {
            LocationSegment::Property(name) => name.into_owned(),
            LocationSegment::Index(index) => index.to_string(),
        })
        .collect()
}

/// A field name as the validator writes it: dotted, keys escaped.
pub fn field_name(path: &[String]) -> String {
    path.iter()
        .map(|segment| segment.escape_debug().to_string())
        .collect::<Vec<_>>()
        .join(".")
}

fn problem(path: Vec<String>, code: &str, message: String) -> Structural {
    Structural {
        problem: FieldError::new(field_name(&path), code, message),
        path,
    }
}

/// The problems one schema error stands for, following `anyOf`/`oneOf` into
/// the alternative the value was meant to be.
fn explain(schema: &Value, error: &ValidationError<'_>, out: &mut Vec<Structural>) {
    let path = segments(error);
    match error.kind() {
        ValidationErrorKind::Type { kind } => out.push(problem(
            path,
            "invalid_json",
            invalid_type(error.instance(), &expected_types(kind)),
        )),
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let known = known_properties(schema, error.schema_path().as_str());
            for name in unexpected {
                let mut field = path.clone();
                field.push(name.clone());
                let message = if known.is_empty() {
                    format!("unknown field `{name}`")
                } else {
                    format!(
                        "unknown field `{name}`, expected one of {}",
                        known.join(", ")
                    )
                };
                out.push(problem(field, "invalid_json", message));
            }
        }
        ValidationErrorKind::Required { property } => {
            let mut field = path;
            field.push(property.as_str().unwrap_or_default().to_string());
            out.push(problem(field, "required", "missing".into()));
        }
        // The definition's own anyOf: a schedule, a parent in after, or both.
        ValidationErrorKind::AnyOf { .. } if path.is_empty() => out.push(problem(
            vec!["schedule".into()],
            "required",
            MISSING_SCHEDULE.into(),
        )),
        // The definition's own anyOf (a schedule, a parent in after, or
        // both): the validation says it with the field named.
        ValidationErrorKind::AnyOf { .. } if path.is_empty() => {}
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            explain_alternatives(schema, error, path, context, out);
        }
        ValidationErrorKind::Constant { expected_value } => out.push(problem(
            path,
            "invalid_json",
            format!("must be {expected_value}, got {}", error.instance()),
        )),
        // The validator reports these with its own codes and messages.
        ValidationErrorKind::Pattern { .. }
        | ValidationErrorKind::Enum { .. }
        | ValidationErrorKind::Minimum { .. }
        | ValidationErrorKind::Maximum { .. }
        | ValidationErrorKind::ExclusiveMinimum { .. }
        | ValidationErrorKind::ExclusiveMaximum { .. }
        | ValidationErrorKind::MinLength { .. }
        | ValidationErrorKind::MaxLength { .. }
        | ValidationErrorKind::MinProperties { .. }
        | ValidationErrorKind::MaxProperties { .. }
        | ValidationErrorKind::PropertyNames { .. }
        | ValidationErrorKind::Format { .. }
        | ValidationErrorKind::MultipleOf { .. } => {}
        _ => out.push(problem(path, "invalid_json", error.to_string())),
    }
}

fn explain_alternatives(
    schema: &Value,
    error: &ValidationError<'_>,
    path: Vec<String>,
    context: &[Vec<ValidationError<'static>>],
    out: &mut Vec<Structural>,
) {
    let here = error.instance_path().as_str();
    let fitting: Vec<&Vec<ValidationError<'static>>> = context
        .iter()
        .filter(|branch| !branch.iter().any(|e| misses(e, here)))
        .collect();
    if let [branch] = fitting.as_slice() {
        for e in branch.iter() {
            explain(schema, e, out);
        }
        return;
    }
    if fitting.is_empty() {
        // Wrong type, or the tag (`target.type`) names no alternative.
        let tags = constants_at(context, &format!("{here}/type"));
        if !tags.is_empty() {
            let mut field = path;
            field.push("type".into());
            let got = error.instance().get("type").cloned().unwrap_or_default();
            out.push(problem(
                field,
                "invalid_json",
                format!("must be one of {}, got {got}", tags.join(", ")),
            ));
        } else {
            let mut types = Vec::new();
            collect_types(context, here, &mut types);
            out.push(problem(
                path,
                "invalid_json",
                invalid_type(error.instance(), &types),
            ));
        }
        return;
    }
    // Several fit: a string that is none of the variants, or an object
    // without its tag.
    let variants = constants_at(context, here);
    if context
        .iter()
        .all(|b| b.iter().all(|e| is_constant_at(e, here)))
    {
        let names: Vec<String> = variants
            .iter()
            .map(|v| format!("`{}`", v.trim_matches('"')))
            .collect();
        let got = match error.instance().as_ref() {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push(problem(
            path,
            "invalid_json",
            format!(
                "unknown variant `{got}`, expected one of {}",
                names.join(", ")
            ),
        ));
        return;
    }
    let tags = constants_at(context, &format!("{here}/type"));
    let untagged = fitting.iter().all(|b| {
        b.iter().any(|e| {
            matches!(e.kind(), ValidationErrorKind::Required { property } if property == "type")
                && e.instance_path().as_str() == here
        })
    });
    if untagged {
        let mut field = path;
        field.push("type".into());
        let message = if tags.is_empty() {
            "missing".to_string()
        } else {
            format!("missing; must be one of {}", tags.join(", "))
        };
        out.push(problem(field, "required", message));
        return;
    }
    out.push(problem(path, "invalid_json", error.to_string()));
}

/// Whether `error` shows that its alternative is not the one meant for the
/// value at `here`: a type mismatch there, or a different tag.
fn misses(error: &ValidationError<'_>, here: &str) -> bool {
    let at = error.instance_path().as_str();
    match error.kind() {
        ValidationErrorKind::Type { .. } => at == here,
        ValidationErrorKind::Constant { .. } => at == format!("{here}/type"),
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            at == here
                && context
                    .iter()
                    .all(|branch| branch.iter().any(|e| misses(e, here)))
        }
        _ => false,
    }
}

fn is_constant_at(error: &ValidationError<'_>, at: &str) -> bool {
    matches!(error.kind(), ValidationErrorKind::Constant { .. })
        && error.instance_path().as_str() == at
}

/// The constants the alternatives expect at `at`, as JSON.
fn constants_at(context: &[Vec<ValidationError<'static>>], at: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in context.iter().flatten() {
        if let ValidationErrorKind::Constant { expected_value } = e.kind() {
            if e.instance_path().as_str() == at && !found.contains(&expected_value.to_string()) {
                found.push(expected_value.to_string());
            }
        }
    }
    found
}

/// Every type the alternatives would take at `here`.
fn collect_types(context: &[Vec<ValidationError<'static>>], here: &str, types: &mut Vec<JsonType>) {
    for e in context.iter().flatten() {
        if e.instance_path().as_str() != here {
            continue;
        }
        match e.kind() {
            ValidationErrorKind::Type { kind } => {
                for t in expected_types(kind) {
                    if !types.contains(&t) {
                        types.push(t);
                    }
                }
            }
            ValidationErrorKind::AnyOf { context }
            | ValidationErrorKind::OneOfNotValid { context } => collect_types(context, here, types),
            _ => {}
        }
    }
}

fn expected_types(kind: &TypeKind) -> Vec<JsonType> {
    match kind {
        TypeKind::Single(t) => vec![*t],
        TypeKind::Multiple(set) => set.iter().collect(),
    }
}

/// serde's wording: "invalid type: integer `5`, expected a string". Null is
/// left out of the expected types when others are there: it means absent.
fn invalid_type(value: &Value, types: &[JsonType]) -> String {
    let got = match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) if n.is_f64() => format!("floating point `{n}`"),
        Value::Number(n) => format!("integer `{n}`"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "sequence".to_string(),
        Value::Object(_) => "map".to_string(),
    };
    let mut names: Vec<&str> = types
        .iter()
        .filter(|t| types.len() == 1 || **t != JsonType::Null)
        .map(|t| match t {
            JsonType::Null => "null",
            JsonType::Boolean => "a boolean",
            JsonType::Integer => "an integer",
            JsonType::Number => "a number",
            JsonType::String => "a string",
            JsonType::Array => "an array",
            JsonType::Object => "an object",
        })
        .collect();
    // An integer is a number: say "a number" once.
    if names.contains(&"a number") {
        names.retain(|n| *n != "an integer");
    }
    format!("invalid type: {got}, expected {}", names.join(" or "))
}

/// The properties declared next to the `additionalProperties` keyword at
/// `keyword_path` (a pointer into the schema), in backticks.
fn known_properties(schema: &Value, keyword_path: &str) -> Vec<String> {
    let parent = keyword_path
        .strip_suffix("/additionalProperties")
        .unwrap_or_default();
    schema
        .pointer(&format!("{parent}/properties"))
        .and_then(Value::as_object)
        .map(|properties| properties.keys().map(|k| format!("`{k}`")).collect())
        .unwrap_or_default()
}

/// Placeholders for required fields taken out or missing, so that the rest
/// of a definition decodes; problems of these fields are not reported.
fn placeholder(field: &str) -> Option<Value> {
    Some(match field {
        "schedule" => Value::from("@daily"),
        "target" => serde_json::json!({"type": "nats", "subject": "placeholder"}),
        "target.subject" => Value::from("placeholder"),
        "target.url" | "notify.webhook" => Value::from("https://placeholder.invalid/"),
        "target.command" => Value::from("true"),
        _ => return None,
    })
}

/// Most fields [`decodable`] takes out or fills in before it gives up.
const MAX_REPAIRS: usize = 64;

/// `value` without its broken fields: the definition that decodes, the
/// fields whose problems are already known (or are placeholders, so must not
/// be reported), and the problems only serde saw (a number too large for its
/// type, say). `None` when no such form was found.
pub fn decodable(
    mut value: Value,
    structural: &[Structural],
) -> Option<(JobSpec, Vec<String>, Vec<FieldError>)> {
    let mut settled: Vec<String> = Vec::new();
    let mut extra = Vec::new();
    for s in structural {
        remove(&mut value, &s.path);
        settled.push(s.problem.field.clone());
    }
    for _ in 0..MAX_REPAIRS {
        let error = match serde_path_to_error::deserialize::<_, JobSpec>(&value) {
            Ok(spec) => return Some((spec, settled, extra)),
            Err(error) => error,
        };
        let path: Vec<String> = error
            .path()
            .iter()
            .map(|segment| match segment {
                serde_path_to_error::Segment::Seq { index } => index.to_string(),
                serde_path_to_error::Segment::Map { key } => key.clone(),
                serde_path_to_error::Segment::Enum { variant } => variant.clone(),
                serde_path_to_error::Segment::Unknown => "?".to_string(),
            })
            .take_while(|segment| segment != "?")
            .collect();
        let message = error.inner().to_string();
        if let Some(name) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            let mut field = path.clone();
            field.push(name.to_string());
            let dotted = field_name(&field);
            match placeholder(&dotted) {
                Some(filler) => {
                    insert(&mut value, &field, filler);
                    settled.push(dotted);
                }
                // A target without its tag: stand in for the whole target.
                None if field.first().is_some_and(|f| f == "target") => {
                    insert(&mut value, &field[..1], placeholder("target")?);
                    settled.push("target".into());
                }
                None => return None,
            }
            continue;
        }
        // serde reads a tagged target through a buffer and loses the path
        // inside it: stand in for the whole target.
        let path = if path.first().is_some_and(|p| p == "target") {
            vec!["target".to_string()]
        } else {
            path
        };
        if path.is_empty() {
            return None;
        }
        let dotted = field_name(&path);
        if !covered(&dotted, &settled) {
            extra.push(FieldError::new(dotted.clone(), "invalid_json", message));
        }
        match placeholder(&dotted) {
            Some(filler) => insert(&mut value, &path, filler),
            None if remove(&mut value, &path) => {}
            None => return None,
        }
        settled.push(dotted);
    }
    None
}

/// Whether `field` is one of `settled` or inside one.
pub fn covered(field: &str, settled: &[String]) -> bool {
    settled.iter().any(|s| {
        field == s
            || field
                .strip_prefix(s.as_str())
                .is_some_and(|rest| rest.starts_with('.'))
    })
}

fn parent_object<'v>(value: &'v mut Value, path: &[String]) -> Option<&'v mut Map<String, Value>> {
    let (_, parents) = path.split_last()?;
    let mut at = value;
    for segment in parents {
        at = at.as_object_mut()?.get_mut(segment)?;
    }
    at.as_object_mut()
}

/// Take the field at `path` out; false when there is none.
fn remove(value: &mut Value, path: &[String]) -> bool {
    let Some(last) = path.last() else {
        return false;
    };
    parent_object(value, path).is_some_and(|object| object.remove(last).is_some())
}

fn insert(value: &mut Value, path: &[String], filler: Value) {
    if let (Some(last), Some(object)) = (path.last(), parent_object(value, path)) {
        object.insert(last.clone(), filler);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::job::{parse_job, HTTP_METHODS};

    fn schema() -> &'static jsonschema::Validator {
        validator().expect("the job schema compiles")
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
            json!({"id": "a.b"}),
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
            let errors: Vec<String> = schema()
                .iter_errors(&value)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "schema refused {value}: {errors:?}");
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
}
