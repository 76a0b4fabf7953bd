//! `GET /openapi.json`: an OpenAPI 3.1 description built from the route
//! table ([`super::routes`]) and the request types' JSON Schemas (schemars,
//! the same derivation as `schemas/`), so it follows the code.
//!
//! It is as strict as the gateway: every parameter, header and body field
//! with the pattern, range, enum or required rule the handler checks (each
//! pattern a necessary condition of the check, never a stricter one), every
//! status and content type a route answers. What JSON Schema cannot say is
//! named: formats (`info.x-jetcron-formats`, each with the Rust check that
//! decides it) and rules between fields (`x-jetcron-rules` on an operation,
//! explained under `info.x-jetcron-rules`). `infra/schemathesis/hooks.py`
//! generates values of both, and Schemathesis checks the gateway against
//! this document (`services/jetcron/tests/openapi_schemathesis.rs`).
//!
//! The files: `operation` writes one route's parameters and responses;
//! `bodies` the request bodies that are not plain types.

pub mod bodies;
mod operation;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use axum::Json;
use jetcron_core::api::ErrorReply;
use jetcron_core::job::patterns::{FORMATS, JOB_RULES};
use schemars::generate::{Contract, SchemaSettings};
use schemars::{json_schema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

/// The rules between fields of the API's requests, beyond a job's own
/// ([`JOB_RULES`]): their names (an operation lists those it checks under
/// `x-jetcron-rules`) and what each says.
pub const RULES: [(&str, &str); 8] = [
    (
        "id-matches-path",
        "a body's id, if given, is the job the path names",
    ),
    (
        "name-matches-path",
        "a body's name, if given, is the channel the path names",
    ),
    (
        "revision-once",
        "the expected revision is given at most once: in If-Match (or If-None-Match: *), in the body's expected_revision or in the query's",
    ),
    (
        "range-order",
        "from is not later than to (default now, from default to minus 7 days for runs, 24 hours for stats); the range spans at most 92 days (/v1/runs) or 31 days (/v1/stats)",
    ),
    (
        "backfill-range",
        "from is not later than to, to is not later than now, and the job has at most 1000 scheduled times between them",
    ),
    (
        "fires-after-from",
        "the schedule fires after from (default now) in the time zone",
    ),
    (
        "recipients",
        "a mail channel's to and cc hold at most 50 addresses together",
    ),
    (
        "whole-numbers",
        "every operation: an integer is written without a fraction or an exponent (3, not 3.0), as the gateway reads it into an integer type",
    ),
];

/// The document (built once).
pub async fn serve() -> Json<Value> {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    Json(DOCUMENT.get_or_init(document).clone())
}

/// The schema of an answer that is some JSON object (this document).
pub fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object" })
}

/// A generator writing its definitions where the document keeps them:
/// requests as they are read (`Contract::Deserialize`), answers as they
/// are written (`Contract::Serialize`: a field skipped when empty may be
/// missing, an `Option` is there as `null`).
fn generator(contract: Contract) -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
            s.contract = contract;
        })
        .into_generator()
}

/// Build the document from [`super::routes`].
pub fn document() -> Value {
    let mut requests = generator(Contract::Deserialize);
    let mut answers = generator(Contract::Serialize);
    let error = serde_json::to_value(answers.subschema_for::<ErrorReply>()).unwrap_or_default();
    let mut paths = Map::new();
    for route in super::routes() {
        let operation = operation::operation(&route, &mut requests, &mut answers, &error);
        let entry = paths
            .entry(route.path.to_string())
            .or_insert_with(|| json!({}));
        entry[route.method.as_str().to_ascii_lowercase()] = operation;
    }
    let mut definitions = requests.take_definitions(true);
    bodies::finish(&mut definitions);
    let mut paths = Value::Object(paths);
    merge_answers(&mut definitions, answers.take_definitions(true), &mut paths);
    let mut components = Value::Object(definitions);
    for part in [&mut paths, &mut components] {
        operation::bound_integers(part);
        operation::drop_refused_defaults(part);
    }
    let mut formats = BTreeMap::new();
    for part in [&paths, &components] {
        formats_in(part, &mut formats);
    }
    let rules: Map<String, Value> = JOB_RULES
        .iter()
        .chain(RULES.iter())
        .map(|(name, meaning)| (name.to_string(), json!(meaning)))
        .collect();
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "jetcron gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "HTTP API of jetcron. Writes need `Authorization: Bearer <token>`; reads need one only when the gateway runs with --protect-reads. The NATS service `jetcron` (jetcron.api.>) offers the same operations. Formats named `jetcron-*` are listed under x-jetcron-formats with the check that decides them; the rules an operation lists under x-jetcron-rules are explained under x-jetcron-rules.",
            "x-jetcron-formats": formats,
            "x-jetcron-rules": rules,
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } }
        }
    })
}

/// Add the answers' definitions to the requests': one the requests have
/// too, the same, is shared; one that differs (the request form is
/// stricter, or the type is written otherwise than read), or refers to one
/// that does, is kept as `<name>Answer`, and the answers refer to that.
fn merge_answers(
    definitions: &mut Map<String, Value>,
    answers: Map<String, Value>,
    paths: &mut Value,
) {
    let mut renamed = std::collections::BTreeSet::new();
    loop {
        let before = renamed.len();
        for (name, schema) in &answers {
            let differs = definitions
                .get(name)
                .is_some_and(|request| request != schema || refers_to_any(schema, &renamed));
            if differs {
                renamed.insert(name.clone());
            }
        }
        if renamed.len() == before {
            break;
        }
    }
    let rename = |value: &mut Value| rename_references(value, &renamed);
    for (name, mut schema) in answers {
        rename(&mut schema);
        match renamed.contains(&name) {
            true => {
                definitions.insert(format!("{name}Answer"), schema);
            }
            false => {
                definitions.entry(name).or_insert(schema);
            }
        }
    }
    for item in paths
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        for operation in item
            .as_object_mut()
            .into_iter()
            .flat_map(|i| i.values_mut())
        {
            rename(&mut operation["responses"]);
        }
    }
}

fn reference_name(reference: &str) -> Option<&str> {
    reference.strip_prefix("#/components/schemas/")
}

/// Whether `value` refers to one of `names`.
fn refers_to_any(value: &Value, names: &std::collections::BTreeSet<String>) -> bool {
    match value {
        Value::Object(object) => {
            object
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(reference_name)
                .is_some_and(|name| names.contains(name))
                || object.values().any(|v| refers_to_any(v, names))
        }
        Value::Array(items) => items.iter().any(|v| refers_to_any(v, names)),
        _ => false,
    }
}

/// Point every reference to one of `names` at its `<name>Answer`.
fn rename_references(value: &mut Value, names: &std::collections::BTreeSet<String>) {
    match value {
        Value::Object(object) => {
            let target = object
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(reference_name)
                .filter(|name| names.contains(*name))
                .map(|name| format!("#/components/schemas/{name}Answer"));
            if let Some(target) = target {
                object.insert("$ref".into(), json!(target));
            }
            object
                .values_mut()
                .for_each(|v| rename_references(v, names));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rename_references(v, names)),
        _ => {}
    }
}

/// Every `jetcron-*` format used in `value`, with the check of its family.
fn formats_in(value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(object) => {
            if let Some(Value::String(format)) = object.get("format") {
                if format.starts_with("jetcron-") {
                    let family = format.split(':').next().unwrap_or_default();
                    let check = FORMATS
                        .iter()
                        .find(|(name, _)| *name == family)
                        .map_or("(unknown)", |(_, check)| *check);
                    out.insert(format.clone(), check.to_string());
                }
            }
            object.values().for_each(|v| formats_in(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| formats_in(v, out)),
        _ => {}
    }
}
