//! One operation of the document: its parameters (path captures, query,
//! headers: one per property of the route's schema, as the handler reads
//! them) and every status it answers, each with its content.

use axum::http::Method;
use schemars::SchemaGenerator;
use serde_json::{json, Map, Value};

use super::super::auth::Access;
use super::super::route::{ApiRoute, Unavailable};

/// The operation of `route`: its parameters and body from `requests`, its
/// answers from `answers`; `error` is the schema of an error answer.
pub(super) fn operation(
    route: &ApiRoute,
    requests: &mut SchemaGenerator,
    answers: &mut SchemaGenerator,
    error: &Value,
) -> Value {
    let generator = requests;
    let mut parameters = Vec::new();
    let locations = [
        (route.path_params, "path"),
        (route.query, "query"),
        (route.headers, "header"),
    ];
    for (schema, location) in locations {
        if let Some(schema) = schema {
            let schema = serde_json::to_value(schema(generator)).unwrap_or_default();
            parameters.extend(parameters_of(&schema, location));
        }
    }
    let answer = match route.answer {
        Some(schema) => serde_json::to_value(schema(answers)).unwrap_or_default(),
        None => json!({
            "type": "object",
            "properties": { "ok": { "const": true } },
        }),
    };
    let mut operation = json!({
        "operationId": operation_id(route.method.as_str(), route.path),
        "summary": route.summary,
        "tags": [tag(route.path)],
        "responses": responses(route, &answer, error),
    });
    if !parameters.is_empty() {
        operation["parameters"] = parameters.into();
    }
    if let Some(body) = route.body {
        operation["requestBody"] = json!({
            "description": body.description,
            "required": body.required,
            "content": { "application/json": { "schema": (body.schema)(generator) } }
        });
    }
    if !route.rules.is_empty() {
        operation["x-jetcron-rules"] = json!(route.rules);
    }
    operation["security"] = match route.access {
        Access::Public => json!([]),
        Access::Read => json!([{}, { "bearer": [] }]),
        Access::Write => json!([{ "bearer": [] }]),
    };
    operation
}

/// One parameter per property of `schema` (an object schema), at `location`.
fn parameters_of(schema: &Value, location: &str) -> Vec<Value> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema["properties"].as_object() else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let mut property = property.clone();
            let description = property
                .as_object_mut()
                .and_then(|p| p.remove("description"));
            let mut parameter = json!({
                "name": name,
                "in": location,
                "required": location == "path" || required.contains(&name.as_str()),
                "schema": without_null(property),
            });
            if let Some(description) = description {
                parameter["description"] = description;
            }
            if parameter["schema"]["type"] == "array" {
                parameter["style"] = json!(if location == "query" {
                    "form"
                } else {
                    "simple"
                });
                parameter["explode"] = json!(false);
            }
            parameter
        })
        .collect()
}

/// A parameter's schema without the `null` an `Option` adds (an absent
/// parameter is not a null one).
fn without_null(mut schema: Value) -> Value {
    let Some(object) = schema.as_object_mut() else {
        return schema;
    };
    if let Some(Value::Array(types)) = object.get_mut("type") {
        types.retain(|t| t != "null");
        if let [single] = types.as_slice() {
            let single = single.clone();
            object.insert("type".into(), single);
        }
    }
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Array(alternatives)) = object.get_mut("anyOf") {
        alternatives.retain(|a| a.get("type") != Some(&json!("null")));
        if let [single] = alternatives.as_slice() {
            let single = single.clone();
            object.remove("anyOf");
            if let Value::Object(single) = single {
                object.extend(single);
            }
        }
    }
    schema
}

/// The largest value of each unsigned integer format schemars writes.
const UNSIGNED: [(&str, u64); 5] = [
    ("uint8", u8::MAX as u64),
    ("uint16", u16::MAX as u64),
    ("uint32", u32::MAX as u64),
    ("uint64", u64::MAX),
    ("uint", u64::MAX),
];

/// Give every integer schema of an unsigned Rust type its largest value (a
/// larger number does not decode, so it is refused), in place of the
/// format schemars names the type with.
pub(super) fn bound_integers(value: &mut Value) {
    match value {
        Value::Object(object) => {
            let max = object
                .get("format")
                .and_then(Value::as_str)
                .and_then(|f| UNSIGNED.iter().find(|(name, _)| *name == f))
                .map(|(_, max)| *max);
            if let Some(max) = max {
                object.remove("format");
                object.entry("maximum").or_insert(json!(max));
                object.entry("minimum").or_insert(json!(0));
            }
            object.values_mut().for_each(bound_integers);
        }
        Value::Array(items) => items.iter_mut().for_each(bound_integers),
        _ => {}
    }
}

/// Drop the defaults schemars writes that the schema beside them refuses:
/// `null` of a field typed otherwise (a `#[serde(default)]` `Option`), `""`
/// of a field with a pattern (a name the key gives).
pub(super) fn drop_refused_defaults(value: &mut Value) {
    match value {
        Value::Object(object) => {
            let refused = match object.get("default") {
                Some(Value::Null) => object
                    .get("type")
                    .is_some_and(|t| t.is_string() && t != "null"),
                Some(Value::String(s)) => s.is_empty() && object.contains_key("pattern"),
                _ => false,
            };
            if refused {
                object.remove("default");
            }
            object.values_mut().for_each(drop_refused_defaults);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_refused_defaults),
        _ => {}
    }
}

/// The statuses `route` answers, each with what it means: its success, 400
/// (a parameter, header or body), 401 and 403 (a token), 404 (what the path
/// names), 409 (a write that lost), 413 (a body too large), 503.
pub(super) fn statuses(route: &ApiRoute) -> Vec<(u16, &'static str)> {
    let mut statuses = vec![(route.ok_status, "success: {\"ok\":true,...}")];
    if let Some(other) = route.other_ok_status {
        statuses.push((other, "success: {\"ok\":true,...}"));
    }
    let reads_input = route.path_params.is_some()
        || route.query.is_some()
        || route.headers.is_some()
        || route.body.is_some();
    if reads_input {
        statuses.push((400, "invalid_request or invalid_job: a parameter, header or the body is refused; error.field names it and error.problems lists each problem"));
    }
    match route.access {
        Access::Public => {}
        Access::Read => statuses.push((
            401,
            "unauthorized: with --protect-reads, no bearer token or one not accepted",
        )),
        Access::Write => statuses.push((401, "unauthorized: no bearer token, or one not accepted")),
    }
    if route.access != Access::Public {
        statuses.push((403, "forbidden: the token's role does not allow this here; error.namespace and error.needs say where and which role would"));
    }
    if route.finds {
        statuses.push((
            404,
            "not_found: what the path (or the body) names is not there",
        ));
    }
    if route.conflicts {
        statuses.push((409, "conflict: the expected revision is not the current one (or a create found it there), or limit_exceeded: a configured limit would be passed"));
    }
    if route.method == Method::POST || route.method == Method::PUT {
        statuses.push((
            413,
            "too_large: the body is larger than the gateway's --http-body-limit",
        ));
    }
    match route.unavailable {
        Unavailable::Never => {}
        Unavailable::Dependency => statuses.push((503, "unavailable: NATS (or the tokens bucket, for a scoped token) did not answer")),
        Unavailable::History => statuses.push((503, "history_unavailable: ClickHouse (the run history) did not answer within --clickhouse-timeout (default 3 s), is not answering since, or failed; the message says which. Job definitions and writes are not affected. Or unavailable: NATS did not answer")),
        Unavailable::NotReady => statuses.push((503, "not ready: the report says what is awaited")),
    }
    statuses
}

/// The `responses` of `route`.
fn responses(route: &ApiRoute, answer: &Value, error: &Value) -> Value {
    let mut responses = Map::new();
    for (status, description) in statuses(route) {
        let success = status == route.ok_status || Some(status) == route.other_ok_status;
        let content = match (success, route.unavailable) {
            (true, _) if route.answers_text => {
                json!({ "text/plain; version=0.0.4": { "schema": { "type": "string" } } })
            }
            (true, _) => json!({ "application/json": { "schema": answer } }),
            (false, Unavailable::NotReady) if status == 503 => {
                json!({ "application/json": { "schema": answer } })
            }
            (false, _) => json!({ "application/json": { "schema": error } }),
        };
        let mut response = json!({ "description": description, "content": content });
        if status == 401 {
            response["headers"] = json!({
                "WWW-Authenticate": {
                    "description": "Bearer realm=\"jetcron\"",
                    "required": true,
                    "schema": { "type": "string" },
                }
            });
        }
        responses.insert(status.to_string(), response);
    }
    Value::Object(responses)
}

/// `{id}` → `id`, for every capture of `path`.
#[cfg(test)]
pub(super) fn path_parameters(path: &str) -> impl Iterator<Item = &str> {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
}

/// `GET /v1/jobs/{id}/runs` → `get_v1_jobs_id_runs`.
fn operation_id(method: &str, path: &str) -> String {
    let mut id = method.to_ascii_lowercase();
    for token in path
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
    {
        id.push('_');
        id.push_str(token);
    }
    id
}

/// Tag grouping an operation: `jobs`, `runs`, or `service`.
fn tag(path: &str) -> &'static str {
    if path.starts_with("/v1/jobs") || path.starts_with("/v1/rejections") {
        "jobs"
    } else if path.starts_with("/v1/") {
        "runs"
    } else {
        "service"
    }
}
