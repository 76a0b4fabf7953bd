//! `GET /openapi.json`: an OpenAPI 3.1 description built from the route
//! table ([`super::routes`]) and the request types' JSON Schemas (schemars,
//! the same derivation as `schemas/`), so it follows the code.

use std::sync::OnceLock;

use axum::Json;
use jetcron_core::api::ErrorReply;
use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};

use super::auth::Access;

/// The document (built once).
pub async fn serve() -> Json<Value> {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    Json(DOCUMENT.get_or_init(document).clone())
}

/// Build the document from [`super::routes`].
pub fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator();
    let error = generator.subschema_for::<ErrorReply>();
    let mut paths = Map::new();
    for route in super::routes() {
        let mut parameters: Vec<Value> = path_parameters(route.path)
            .map(|name| {
                json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" } })
            })
            .collect();
        parameters.extend(route.query.iter().map(|(name, description)| {
            json!({ "name": name, "in": "query", "required": false, "description": description, "schema": { "type": "string" } })
        }));
        let answer = match route.answer {
            Some(schema) => serde_json::to_value(schema(&mut generator)).unwrap_or_default(),
            None => json!({ "type": "object", "properties": { "ok": { "const": true } } }),
        };
        let mut operation = json!({
            "operationId": operation_id(route.method.as_str(), route.path),
            "summary": route.summary,
            "tags": [tag(route.path)],
            "responses": {
                route.ok_status.to_string(): {
                    "description": "success: {\"ok\":true,...}",
                    "content": { "application/json": { "schema": answer } }
                },
                "default": {
                    "description": "failure: {\"ok\":false,\"error\":{code,message,field,problems}}; the status follows the error code",
                    "content": { "application/json": { "schema": error.clone() } }
                }
            }
        });
        if route.reads_history {
            operation["responses"]["503"] = json!({
                "description": HISTORY_UNAVAILABLE,
                "content": { "application/json": { "schema": error.clone() } }
            });
        }
        if !parameters.is_empty() {
            operation["parameters"] = parameters.into();
        }
        if let Some((schema, description)) = route.body {
            operation["requestBody"] = json!({
                "description": description,
                "required": false,
                "content": { "application/json": { "schema": schema(&mut generator) } }
            });
        }
        match route.access {
            Access::Public => operation["security"] = json!([]),
            Access::Read => operation["security"] = json!([{}, { "bearer": [] }]),
            Access::Write => operation["security"] = json!([{ "bearer": [] }]),
        }
        let entry = paths
            .entry(route.path.to_string())
            .or_insert_with(|| json!({}));
        entry[route.method.as_str().to_ascii_lowercase()] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "jetcron gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "HTTP API of jetcron. Writes need `Authorization: Bearer <token>`; reads need one only when the gateway runs with --protect-reads. The NATS service `jetcron` (jetcron.api.>) offers the same operations."
        },
        "paths": paths,
        "components": {
            "schemas": generator.take_definitions(true),
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } }
        }
    })
}

/// The 503 of a route that needs ClickHouse.
const HISTORY_UNAVAILABLE: &str = "history_unavailable: ClickHouse (the run history) did not \
    answer within --clickhouse-timeout (default 3 s), is not answering since, or failed; \
    the message says which. Job definitions and writes are not affected.";

/// `{id}` → `id`, for every capture of `path`.
fn path_parameters(path: &str) -> impl Iterator<Item = &str> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_documented_once_with_its_body_schema() {
        let document = document();
        let routes = super::super::routes();
        let mut operations = 0;
        for (path, item) in document["paths"].as_object().expect("paths") {
            operations += item.as_object().expect("path item").len();
            for capture in path_parameters(path) {
                for operation in item.as_object().expect("item").values() {
                    assert!(
                        operation["parameters"]
                            .as_array()
                            .is_some_and(|p| p.iter().any(|p| p["name"] == capture)),
                        "{path} documents {capture}"
                    );
                }
            }
        }
        assert_eq!(operations, routes.len());
        let put = &document["paths"]["/v1/jobs/{id}"]["put"];
        assert_eq!(put["security"], json!([{ "bearer": [] }]));
        let reference = put["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .expect("JobSpec by reference");
        let name = reference
            .strip_prefix("#/components/schemas/")
            .expect("components reference");
        assert!(document["components"]["schemas"][name]["properties"]["schedule"].is_object());
        assert_eq!(document["paths"]["/healthz"]["get"]["security"], json!([]));
        let history_503 = |path: &str, method: &str| {
            document["paths"][path][method]["responses"]["503"]["description"]
                .as_str()
                .is_some_and(|d| d.starts_with("history_unavailable"))
        };
        for path in [
            "/v1/runs",
            "/v1/runs/{run_id}",
            "/v1/jobs/{id}/runs",
            "/v1/stats",
            "/v1/rejections",
        ] {
            assert!(history_503(path, "get"), "{path} lists its 503");
        }
        assert!(history_503("/v1/jobs/{id}/backfill", "post"));
        assert!(
            !history_503("/v1/jobs/{id}", "get"),
            "a job answers without its history"
        );
    }

    #[test]
    fn a_documented_job_validates_against_the_documented_body_schema() {
        let document = document();
        let schema = json!({
            "$ref": document["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "components": document["components"],
        });
        let validator = jsonschema::validator_for(&schema).expect("schema compiles");
        let job = json!({
            "id": "nightly-report",
            "schedule": "0 0 2 * * *",
            "target": { "type": "http", "url": "https://example.com/hook" }
        });
        assert!(
            validator.is_valid(&job),
            "{:?}",
            validator
                .iter_errors(&job)
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
        );
        assert!(!validator.is_valid(&json!({ "id": "x", "bogus": 1 })));
    }
}
