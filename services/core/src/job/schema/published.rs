//! The job schema as published (`schemas/job.schema.json`, the job bodies
//! of `GET /openapi.json`): the derived schema with what else the validator
//! checks stated where JSON Schema can say it.
//!
//! - formats ([`crate::job::patterns::FORMATS`]): a schedule line, instants
//!   and durations that parse within their bounds, URLs, subjects, paths and
//!   texts counted in bytes;
//! - the time zones by name ([`TIME_ZONE`]);
//! - `retry` and `notify` are objects when given (the parser refuses
//!   `null` there), a `notify` names a webhook or channels, each channel
//!   once, and long-running alerts need channels;
//! - the rules between fields, by name under `x-jetcron-rules`
//!   ([`crate::job::patterns::JOB_RULES`]).
//!
//! The derived schema stays what the parser consults on its failure path
//! ([`super::structural_problems`]): what is added here the validator
//! reports itself, with its own codes.

use schemars::Schema;
use serde_json::{json, Map, Value};

use crate::job::patterns::{
    bytes_format, duration_format, text_format, HTTP_URL_FORMAT, INSTANT_FORMAT, JOB_RULES,
    PATH_FORMAT, SCHEDULE_FORMAT, SUBJECT_FORMAT,
};
use crate::job::JobSpec;

/// The name of the time zone schema among the definitions.
pub const TIME_ZONE: &str = "TimeZone";

/// `schemas/job.schema.json`.
pub fn job_schema() -> Schema {
    let mut root = serde_json::to_value(schemars::schema_for!(JobSpec)).unwrap_or_default();
    let Some(object) = root.as_object_mut() else {
        return Schema::default();
    };
    let mut definitions = match object.remove("$defs") {
        Some(Value::Object(definitions)) => definitions,
        _ => Map::new(),
    };
    tighten(object, &mut definitions, "#/$defs/");
    object.insert("$defs".into(), Value::Object(definitions));
    Schema::try_from(root).unwrap_or_default()
}

/// The time zones `chrono_tz` knows, by name: what
/// [`crate::schedule::parse_timezone`] reads.
pub fn time_zone_schema() -> Value {
    let names: Vec<&str> = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect();
    json!({
        "description": "An IANA time zone name (chrono-tz's database)",
        "type": "string",
        "enum": names,
    })
}

/// Tighten `job` (the derived schema of [`JobSpec`]) and the definitions
/// it refers to, which are named `<prefix><name>` (`#/$defs/`,
/// `#/components/schemas/`); [`TIME_ZONE`] is added to them.
pub fn tighten(job: &mut Map<String, Value>, definitions: &mut Map<String, Value>, prefix: &str) {
    definitions.insert(TIME_ZONE.into(), time_zone_schema());
    let fields = properties(job);
    // Its default, the empty string, is no name: a direct KV write takes
    // the key, an API door needs the id.
    if let Some(Value::Object(id)) = fields.get_mut("id") {
        id.remove("default");
    }
    set_format(fields, "description", &bytes_format(0, 4096));
    set_format(fields, "schedule", SCHEDULE_FORMAT);
    for field in ["start_at", "end_at"] {
        set_format(fields, field, INSTANT_FORMAT);
    }
    set_format(fields, "timeout", &duration_format("1s", "24h"));
    set_format(fields, "jitter", &duration_format("0s", "1h"));
    set_format(fields, "catchup_window", &duration_format("1s", "7d"));
    if let Some(timezone) = fields.get_mut("timezone") {
        let description = timezone.get("description").cloned();
        *timezone = json!({
            "anyOf": [{ "$ref": format!("{prefix}{TIME_ZONE}") }, { "type": "null" }],
        });
        if let Some(description) = description {
            timezone["description"] = description;
        }
    }
    for field in ["retry", "notify"] {
        if let Some(Value::Array(alternatives)) = fields
            .get_mut(field)
            .and_then(|p| p.as_object_mut())
            .and_then(|p| p.remove("anyOf"))
        {
            let object = alternatives.into_iter().find(|a| a.get("$ref").is_some());
            if let (Some(Value::Object(object)), Some(Value::Object(property))) =
                (object, fields.get_mut(field))
            {
                property.extend(object);
            }
        }
    }
    if let Some(labels) = fields.get_mut("labels") {
        labels["additionalProperties"]["format"] = json!(text_format(0, 255));
    }
    let rules: Vec<&str> = JOB_RULES.iter().map(|(name, _)| *name).collect();
    job.insert("x-jetcron-rules".into(), json!(rules));
    if let Some(Value::Object(retry)) = definitions.get_mut("RetryPolicy") {
        let fields = properties(retry);
        set_format(fields, "backoff", &duration_format("100ms", "24h"));
        set_format(fields, "max_backoff", &duration_format("100ms", "24h"));
    }
    if let Some(Value::Object(notify)) = definitions.get_mut("NotifyPolicy") {
        tighten_notify(notify);
    }
    if let Some(Value::Object(target)) = definitions.get_mut("Target") {
        tighten_targets(target);
    }
}

/// `notify`: a webhook or channels (or both), each channel once; alerts of
/// long runs go to channels.
fn tighten_notify(notify: &mut Map<String, Value>) {
    let properties = properties(notify);
    set_format(properties, "webhook", HTTP_URL_FORMAT);
    set_format(
        properties,
        "running_longer_than",
        &duration_format("1s", "30d"),
    );
    set_format(properties, "repeat", &duration_format("1m", "7d"));
    if let Some(channels) = properties.get_mut("channels") {
        channels["uniqueItems"] = json!(true);
    }
    notify.insert(
        "anyOf".into(),
        json!([
            { "required": ["webhook"], "properties": { "webhook": { "type": "string" } } },
            { "required": ["channels"], "properties": { "channels": { "minItems": 1 } } },
        ]),
    );
    notify.insert(
        "if".into(),
        json!({
            "required": ["running_longer_than"],
            "properties": { "running_longer_than": { "type": "string" } },
        }),
    );
    notify.insert(
        "then".into(),
        json!({ "required": ["channels"], "properties": { "channels": { "minItems": 1 } } }),
    );
}

/// The targets' URL, subject and working directory.
fn tighten_targets(target: &mut Map<String, Value>) {
    let Some(Value::Array(variants)) = target.get_mut("oneOf") else {
        return;
    };
    for variant in variants.iter_mut().filter_map(Value::as_object_mut) {
        let properties = properties(variant);
        set_format(properties, "subject", SUBJECT_FORMAT);
        set_format(properties, "url", HTTP_URL_FORMAT);
        set_format(properties, "working_dir", PATH_FORMAT);
    }
}

/// The `properties` of an object schema (empty when it has none).
fn properties(schema: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let properties = schema
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if !properties.is_object() {
        *properties = Value::Object(Map::new());
    }
    properties.as_object_mut().expect("an object")
}

/// `format` on the property `name`, if there is one.
fn set_format(properties: &mut Map<String, Value>, name: &str, format: &str) {
    if let Some(Value::Object(property)) = properties.get_mut(name) {
        property.insert("format".into(), json!(format));
    }
}
