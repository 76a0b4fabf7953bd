//! The document against the route table and the handlers' checks.

use std::collections::BTreeSet;

use jetcron_core::job::patterns::{
    CURSOR_PATTERN, FORMATS, JOB_RULES, LABEL_SELECTOR_PATTERN, TOKEN_ID_PATTERN,
};
use serde_json::{json, Value};

use super::operation::{path_parameters, statuses};
use super::*;
use crate::http::auth::Access;
use crate::http::{routes, Unavailable};

fn operations(document: &Value) -> impl Iterator<Item = (&String, &String, &Value)> {
    document["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .expect("path item")
                .iter()
                .map(move |(method, operation)| (path, method, operation))
        })
}

#[test]
fn every_route_is_documented_once_with_its_parameters() {
    let document = document();
    let mut count = 0;
    for (path, method, operation) in operations(&document) {
        count += 1;
        let parameters = operation["parameters"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for capture in path_parameters(path) {
            let documented = parameters
                .iter()
                .find(|p| p["name"] == capture && p["in"] == "path")
                .unwrap_or_else(|| panic!("{method} {path} documents {capture}"));
            assert_eq!(documented["required"], true);
            assert!(
                documented["schema"]["pattern"].is_string(),
                "{method} {path}: {capture} has its pattern"
            );
        }
        for parameter in &parameters {
            let types = &parameter["schema"]["type"];
            assert!(
                !types.as_array().is_some_and(|t| t.contains(&json!("null"))),
                "{method} {path}: {} is not null when absent",
                parameter["name"]
            );
        }
    }
    assert_eq!(count, routes().len());
    let put = &document["paths"]["/v1/jobs/{id}"]["put"];
    assert_eq!(put["security"], json!([{ "bearer": [] }]));
    let headers: Vec<&Value> = put["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .filter(|p| p["in"] == "header")
        .map(|p| &p["name"])
        .collect();
    assert_eq!(headers, [&json!("If-Match"), &json!("If-None-Match")]);
    assert_eq!(document["paths"]["/healthz"]["get"]["security"], json!([]));
    let status = &document["paths"]["/v1/runs"]["get"]["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["name"] == "status")
        .cloned()
        .expect("status");
    assert_eq!(status["style"], "form");
    assert_eq!(status["explode"], false);
    assert_eq!(status["required"], false);
    assert_eq!(status["schema"]["items"]["enum"][0], "running");
}

#[test]
fn each_route_answers_the_statuses_its_kind_has() {
    let document = document();
    for route in routes() {
        let method = route.method.as_str().to_ascii_lowercase();
        let responses = &document["paths"][route.path][method.as_str()]["responses"];
        let documented: BTreeSet<u16> = responses
            .as_object()
            .expect("responses")
            .keys()
            .map(|k| k.parse().expect("a status, not default"))
            .collect();
        let expected: BTreeSet<u16> = statuses(&route).iter().map(|(s, _)| *s).collect();
        assert_eq!(documented, expected, "{method} {}", route.path);
        let has = |status: u16| documented.contains(&status);
        let writes = route.access == Access::Write;
        assert_eq!(has(401), route.access != Access::Public, "{}", route.path);
        assert_eq!(has(403), route.access != Access::Public, "{}", route.path);
        let reads_input = route.path.contains('{') || route.query.is_some() || route.body.is_some();
        assert_eq!(
            has(400),
            reads_input || route.headers.is_some(),
            "{}",
            route.path
        );
        assert_eq!(
            has(413),
            method == "post" || method == "put",
            "{}",
            route.path
        );
        if route.path.contains('{') && route.method == axum::http::Method::GET {
            let names_a_thing =
                !route.path.starts_with("/v1/namespaces/") && !route.path.ends_with("/runs");
            assert_eq!(has(404), names_a_thing, "{}", route.path);
        }
        if writes
            && route.method == axum::http::Method::DELETE
            && route.path.starts_with("/v1/jobs")
        {
            assert!(has(404) && has(409), "{}", route.path);
        }
        let unavailable = &responses["503"]["description"];
        match route.unavailable {
            Unavailable::Never => assert!(!has(503)),
            Unavailable::History => assert!(unavailable
                .as_str()
                .is_some_and(|d| d.starts_with("history_unavailable"))),
            Unavailable::Dependency | Unavailable::NotReady => assert!(has(503)),
        }
        if has(401) {
            assert_eq!(
                responses["401"]["headers"]["WWW-Authenticate"]["required"],
                true
            );
        }
    }
    for path in [
        "/v1/runs",
        "/v1/runs/{run_id}",
        "/v1/jobs/{id}/runs",
        "/v1/stats",
        "/v1/rejections",
    ] {
        let description = &document["paths"][path]["get"]["responses"]["503"]["description"];
        assert!(
            description
                .as_str()
                .is_some_and(|d| d.starts_with("history_unavailable")),
            "{path}"
        );
    }
    let job = &document["paths"]["/v1/jobs/{id}"]["get"]["responses"]["503"]["description"];
    assert!(
        job.as_str().is_some_and(|d| d.starts_with("unavailable")),
        "a job answers without its history"
    );
    let metrics = &document["paths"]["/metrics"]["get"]["responses"];
    assert!(metrics["200"]["content"]["text/plain; version=0.0.4"].is_object());
    assert!(metrics["503"]["content"]["application/json"].is_object());
    assert!(document["paths"]["/healthz"]["get"]["responses"]["503"].is_null());
    let created = &document["paths"]["/v1/jobs"]["post"]["responses"];
    assert!(created["201"].is_object() && created["200"].is_object());
}

fn validator(document: &Value, schema: &Value) -> jsonschema::Validator {
    let mut schema = schema.clone();
    schema["components"] = document["components"].clone();
    jsonschema::validator_for(&schema).expect("schema compiles")
}

fn errors(validator: &jsonschema::Validator, value: &Value) -> Vec<String> {
    validator
        .iter_errors(value)
        .map(|e| e.to_string())
        .collect()
}

#[test]
fn job_bodies_are_the_definition_with_its_revision() {
    let document = document();
    let body = |path: &str, method: &str| {
        let body = &document["paths"][path][method]["requestBody"];
        assert_eq!(body["required"], true, "{method} {path}");
        validator(&document, &body["content"]["application/json"]["schema"])
    };
    let post = body("/v1/jobs", "post");
    let put = body("/v1/jobs/{id}", "put");
    let job = json!({
        "id": "nightly-report",
        "schedule": "0 0 2 * * *",
        "timezone": "Europe/Berlin",
        "retry": { "backoff": "2s", "max_backoff": "1m" },
        "notify": { "channels": ["ops"], "running_longer_than": "10m" },
        "target": { "type": "http", "url": "https://example.com/hook" },
        "expected_revision": 0,
    });
    assert!(errors(&post, &job).is_empty(), "{:?}", errors(&post, &job));
    let mut without_id = job.clone();
    without_id.as_object_mut().expect("object").remove("id");
    assert!(!post.is_valid(&without_id), "POST needs the id");
    assert!(put.is_valid(&without_id), "PUT takes it from the path");
    for (field, bad) in [
        ("bogus", json!(1)),
        ("timezone", json!("Mars/Olympus")),
        ("retry", Value::Null),
        ("notify", json!({})),
        (
            "notify",
            json!({ "webhook": "https://e.com", "running_longer_than": "1m" }),
        ),
        ("notify", json!({ "channels": ["a", "a"] })),
        ("expected_revision", json!(-1)),
        ("description", json!("x".repeat(4097))),
    ] {
        let mut value = job.clone();
        value[field] = bad.clone();
        assert!(!post.is_valid(&value), "{field}: {bad}");
    }
    let schemas = &document["components"]["schemas"];
    for name in ["JobSpec", "JobPost", "JobPut"] {
        assert_eq!(schemas[name]["additionalProperties"], false, "{name}");
        assert_eq!(
            schemas[name]["properties"]["schedule"]["format"],
            "jetcron-schedule"
        );
    }
    assert!(schemas["JobPost"]["properties"]["expected_revision"].is_object());
    assert!(schemas["JobSpec"]["properties"]["expected_revision"].is_null());
}

#[test]
fn selectors_name_one_job_or_labels() {
    let document = document();
    let schema = &document["paths"]["/v1/jobs:pause"]["post"]["requestBody"]["content"]
        ["application/json"]["schema"];
    let selector = validator(&document, schema);
    for good in [
        json!({ "id": "a" }),
        json!({ "id": "a", "labels": null }),
        json!({ "labels": { "team": "ops" } }),
    ] {
        assert!(selector.is_valid(&good), "{good}");
    }
    for bad in [
        json!({}),
        json!({ "labels": {} }),
        json!({ "id": "a", "labels": { "team": "ops" } }),
        json!({ "id": "a b" }),
        json!({ "labels": { "-x": "y" } }),
    ] {
        assert!(!selector.is_valid(&bad), "{bad}");
    }
}

#[test]
fn every_rule_and_format_is_named_and_explained() {
    let document = document();
    let rules = document["info"]["x-jetcron-rules"]
        .as_object()
        .expect("rules");
    for (path, method, operation) in operations(&document) {
        for rule in operation["x-jetcron-rules"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                rules.contains_key(rule.as_str().expect("name")),
                "{method} {path}: {rule}"
            );
        }
    }
    let post = &document["paths"]["/v1/jobs"]["post"]["x-jetcron-rules"];
    for (rule, _) in JOB_RULES {
        assert!(
            post.as_array().expect("rules").contains(&json!(rule)),
            "{rule}"
        );
    }
    let formats = document["info"]["x-jetcron-formats"]
        .as_object()
        .expect("formats");
    let families: BTreeSet<&str> = FORMATS.iter().map(|(name, _)| *name).collect();
    for (name, check) in formats {
        let family = name.split(':').next().unwrap_or_default();
        assert!(families.contains(family), "{name}");
        assert_ne!(check, "(unknown)", "{name}");
    }
    assert!(formats.contains_key("jetcron-instant"));
}

#[test]
fn the_preview_query_is_the_preview_request() {
    let document = document();
    let documented: BTreeSet<String> = document["paths"]["/v1/schedules/preview"]["get"]
        ["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect();
    let query = documented
        .iter()
        .map(|name| match name.as_str() {
            "count" => "count=3".to_string(),
            other => format!("{other}=x"),
        })
        .collect::<Vec<_>>()
        .join("&");
    let uri: axum::http::Uri = format!("/v1/schedules/preview?{query}")
        .parse()
        .expect("uri");
    let axum::extract::Query(request) =
        axum::extract::Query::<jetcron_core::schedule_preview::PreviewRequest>::try_from_uri(&uri)
            .expect("every documented parameter is read");
    assert_eq!(request.schedule, "x");
    assert_eq!(request.timezone.as_deref(), Some("x"));
    assert_eq!(request.count, Some(3));
    assert_eq!(request.from.as_deref(), Some("x"));
    assert_eq!(documented.len(), 4);
}

/// Strings of the bad-input corpus (`tests/bad_input/`) and a few more.
fn corpus_strings() -> BTreeSet<String> {
    fn collect(value: &Value, out: &mut BTreeSet<String>) {
        match value {
            Value::String(s) => {
                out.insert(s.clone());
                out.extend(s.split(['/', '?', '&', '=', ' ']).map(str::to_string));
            }
            Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
            Value::Object(object) => object.iter().for_each(|(k, v)| {
                out.insert(k.clone());
                collect(v, out);
            }),
            _ => {}
        }
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/bad_input");
    let mut strings = BTreeSet::new();
    for entry in std::fs::read_dir(dir).expect("tests/bad_input") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).expect("corpus file");
            collect(&serde_json::from_str(&text).expect("JSON"), &mut strings);
        }
    }
    strings.extend(
        [
            "0_67e55044-10b1-426f-9247-bb680e5fe0c8",
            "-1_{67e55044-10b1-426f-9247-bb680e5fe0c8}",
            "+9223372036854775807_67e55044-10b1-426f-9247-bb680e5fe0c8",
            "9223372036854775808_67e55044-10b1-426f-9247-bb680e5fe0c8",
            "1_x",
            "a=b,,c=d",
            ",a=b=c,",
            "=v",
            "a",
            "team=\u{85}",
            "0123456789abcdef",
            "0123456789ABCDEF0123456789abcdef0",
        ]
        .map(str::to_string),
    );
    strings
}

#[test]
fn the_gateways_own_checks_match_their_patterns() {
    let strings = corpus_strings();
    let matches = |pattern: &str, s: &str| {
        jsonschema::validator_for(&json!({ "type": "string", "pattern": pattern }))
            .expect("pattern")
            .is_valid(&json!(s))
    };
    for s in &strings {
        if crate::runs::listing::decode_cursor(s).is_ok() {
            assert!(matches(CURSOR_PATTERN, s), "cursor {s:?}");
        }
        assert_eq!(
            crate::http::tokens::is_token_id(s),
            matches(TOKEN_ID_PATTERN, s),
            "token id {s:?}"
        );
        let selector = crate::http::jobs::label_selector(Some(s))
            .ok()
            .filter(|labels| jetcron_core::job::validate_labels("labels", labels).is_empty());
        if selector.is_some() {
            assert!(matches(LABEL_SELECTOR_PATTERN, s), "labels {s:?}");
        }
    }
}
