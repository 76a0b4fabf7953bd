//! A schema error as the problems it stands for, named like the
//! validator names fields (`target.url`, `retry.max_attempts`) and worded
//! like serde ("invalid type: integer `5`, expected a string"). An
//! `anyOf`/`oneOf` error is followed into the alternative the value was
//! meant to be (the tagged target), so one wrong field is one problem.

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::LocationSegment;
use jsonschema::{JsonType, ValidationError};
use serde_json::Value;

use super::{field_name, Structural};
use crate::job::spec::{FieldError, MISSING_SCHEDULE};

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

fn problem(path: Vec<String>, code: &str, message: String) -> Structural {
    Structural {
        problem: FieldError::new(field_name(&path), code, message),
        path,
    }
}

/// The problems one schema error stands for, following `anyOf`/`oneOf` into
/// the alternative the value was meant to be.
pub(super) fn explain(schema: &Value, error: &ValidationError<'_>, out: &mut Vec<Structural>) {
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
