//! The request bodies whose schema is more than a derived type: a job put
//! (the definition, [`jetcron_core::job::schema::tighten`], with its
//! `expected_revision`), the selectors and ranges of the job actions, and
//! the channels and policies with what their parsers check beyond their
//! types (formats, patterns, lengths, rules between fields).
//!
//! Each `fn(&mut SchemaGenerator) -> Schema` here is a route's body (the
//! route table names it); [`finish`] writes the definitions they refer to.

use jetcron_core::channel::{Channel, MAX_RECIPIENTS, MIN_SECRET_LEN};
use jetcron_core::job::patterns::{
    text_format, HTTP_HEADER_NAME_PATTERN, HTTP_HEADER_VALUE_PATTERN, HTTP_URL_FORMAT,
    HTTP_URL_PATTERN, ID_PATTERN, INSTANT_PATTERN, JOB_NAME_PATTERN, LABEL_KEY_PATTERN,
    MAIL_ADDRESS_FORMAT, MAIL_ADDRESS_PATTERN, MAIL_HOST_PATTERN, NO_CONTROL_PATTERN,
    PAST_INSTANT_FORMAT, SCOPE_PATTERN, SUBJECT_FILTER_FORMAT, SUBJECT_FILTER_PATTERN,
    URL_PREFIX_FORMAT, URL_PREFIX_PATTERN,
};
use jetcron_core::job::{JobSpec, MAX_LABELS};
use jetcron_core::policy::{Policy, MAX_POLICY_ENTRIES};
use schemars::{json_schema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

/// Where the document keeps its definitions.
const DEFINITIONS: &str = "#/components/schemas/";

fn reference(name: &str) -> Schema {
    json_schema!({ "$ref": format!("{DEFINITIONS}{name}") })
}

/// `POST /v1/jobs`: a definition with its id, and an optional
/// `expected_revision` (0: create only).
pub fn job_post(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<JobSpec>();
    reference("JobPost")
}

/// `PUT /v1/jobs/{id}`: a definition whose id, if given, is the path's.
pub fn job_put(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<JobSpec>();
    reference("JobPut")
}

/// `POST /v1/channels`.
pub fn channel_post(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<Channel>()
}

/// `PUT /v1/channels/{name}`: a channel whose name, if given, is the path's.
pub fn channel_put(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<Channel>();
    reference("ChannelPut")
}

/// `PUT /v1/namespaces/{namespace}/policy`.
pub fn policy(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<Policy>()
}

/// A label selector's labels: as a job's labels are checked.
fn labels() -> Value {
    json!({
        "type": "object",
        "minProperties": 1,
        "maxProperties": MAX_LABELS,
        "propertyNames": { "pattern": LABEL_KEY_PATTERN },
        "additionalProperties": {
            "type": "string",
            "maxLength": 255,
            "pattern": NO_CONTROL_PATTERN,
            "format": text_format(0, 255),
        },
    })
}

/// `POST /v1/jobs:pause` and `:resume`: one job by id, or a non-empty
/// label selector (`SelectJobs`; null is absent).
pub fn selector(_: &mut SchemaGenerator) -> Schema {
    let id = json!({ "type": "string", "pattern": JOB_NAME_PATTERN });
    json_schema!({
        "description": "A job's id, or every job whose labels include these.",
        "type": "object",
        "properties": {
            "id": { "anyOf": [id, { "type": "null" }] },
            "labels": { "anyOf": [labels(), { "type": "null" }] },
        },
        "additionalProperties": false,
        "anyOf": [
            {
                "required": ["id"],
                "properties": { "id": { "type": "string" }, "labels": { "type": "null" } },
            },
            {
                "required": ["labels"],
                "properties": { "labels": { "type": "object" }, "id": { "type": "null" } },
            },
        ],
    })
}

/// `POST /v1/jobs/{id}/pause`, `resume`, `trigger`: nothing, or the
/// path's job by its id.
pub fn job_action(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": { "id": { "type": "string", "pattern": JOB_NAME_PATTERN } },
        "additionalProperties": false,
    })
}

/// `POST /v1/jobs/{id}/backfill`: the range, and the path's job.
pub fn backfill(_: &mut SchemaGenerator) -> Schema {
    let instant = |what: &str| {
        json!({
            "description": what,
            "type": "string",
            "pattern": INSTANT_PATTERN,
            "format": PAST_INSTANT_FORMAT,
        })
    };
    json_schema!({
        "type": "object",
        "properties": {
            "id": { "type": "string", "pattern": JOB_NAME_PATTERN },
            "from": instant("RFC 3339 start of the range (included)"),
            "to": instant("RFC 3339 end of the range (included, not in the future)"),
        },
        "required": ["from", "to"],
        "additionalProperties": false,
    })
}

/// The definitions the bodies refer to, as the parsers check them.
pub fn finish(definitions: &mut Map<String, Value>) {
    if let Some(Value::Object(mut job)) = definitions.remove("JobSpec") {
        jetcron_core::job::schema::tighten(&mut job, definitions, DEFINITIONS);
        let mut post = job.clone();
        post["properties"]["expected_revision"] = json!({
            "description": "Store only if the job is at this revision (0: only if there is none); not with If-Match or If-None-Match",
            "type": "integer",
            "minimum": 0,
            "maximum": u64::MAX,
        });
        let mut put = post.clone();
        post.insert("required".into(), json!(["id", "target"]));
        put["properties"]["id"]["description"] =
            json!("The job's name; if given, the path's {id}.");
        definitions.insert("JobPost".into(), Value::Object(post));
        definitions.insert("JobPut".into(), Value::Object(put));
        definitions.insert("JobSpec".into(), Value::Object(job));
    }
    if let Some(Value::Object(channel)) = definitions.get_mut("Channel") {
        tighten_channel(channel);
        let mut put = channel.clone();
        for variant in variants(&mut put) {
            if let Some(Value::Array(required)) = variant.get_mut("required") {
                required.retain(|r| r != "name");
            }
        }
        definitions.insert("ChannelPut".into(), Value::Object(put));
    }
    if let Some(Value::Object(policy)) = definitions.get_mut("Policy") {
        tighten_policy(policy);
    }
}

/// The alternatives of a tagged type's schema.
fn variants(schema: &mut Map<String, Value>) -> impl Iterator<Item = &mut Map<String, Value>> {
    schema
        .get_mut("oneOf")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// `jetcron_core::channel::validate` in schema form.
fn tighten_channel(channel: &mut Map<String, Value>) {
    let text = |min: usize, max: usize| {
        json!({
            "type": "string",
            "minLength": min.div_ceil(4),
            "maxLength": max,
            "pattern": NO_CONTROL_PATTERN,
            "format": text_format(min, max),
        })
    };
    let url = json!({ "type": "string", "pattern": HTTP_URL_PATTERN, "format": HTTP_URL_FORMAT });
    let address = json!({
        "type": "string",
        "maxLength": 320,
        "pattern": MAIL_ADDRESS_PATTERN,
        "format": MAIL_ADDRESS_FORMAT,
    });
    for variant in variants(channel) {
        let kind = variant["properties"]["type"]["const"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let fields = &mut variant["properties"];
        fields["name"] = json!({ "type": "string", "pattern": ID_PATTERN });
        fields["description"] = nullable(text(0, 1024));
        match kind.as_str() {
            "email" => {
                fields["smtp_host"] = json!({ "type": "string", "pattern": MAIL_HOST_PATTERN });
                fields["smtp_port"]["minimum"] = json!(1);
                fields["username"] = nullable(text(0, 256));
                fields["password"] = nullable(text(1, 512));
                fields["from"] = address.clone();
                fields["to"] = json!({ "type": "array", "items": address, "minItems": 1, "maxItems": MAX_RECIPIENTS });
                fields["cc"] =
                    json!({ "type": "array", "items": address, "maxItems": MAX_RECIPIENTS });
                variant.insert("allOf".into(), json!([
                    given_then_given("username", "password"),
                    given_then_given("password", "username"),
                    {
                        "if": given("password"),
                        "then": { "properties": { "tls": { "enum": ["starttls", "implicit"] } } },
                    },
                ]));
            }
            "webhook" => {
                fields["url"] = url.clone();
                fields["headers"] = json!({
                    "type": "object",
                    "propertyNames": { "pattern": HTTP_HEADER_NAME_PATTERN },
                    "additionalProperties": { "type": "string", "pattern": HTTP_HEADER_VALUE_PATTERN },
                });
                fields["secret"] = nullable(text(MIN_SECRET_LEN, 512));
            }
            "feishu" | "dingtalk" => {
                fields["url"] = url.clone();
                fields["secret"] = nullable(text(1, 512));
            }
            _ => fields["url"] = url.clone(),
        }
    }
}

fn nullable(schema: Value) -> Value {
    json!({ "anyOf": [schema, { "type": "null" }] })
}

/// `field` is there and not null.
fn given(field: &str) -> Value {
    json!({ "required": [field], "properties": { field: { "type": "string" } } })
}

/// When `first` is given, so is `second`.
fn given_then_given(first: &str, second: &str) -> Value {
    json!({ "if": given(first), "then": given(second) })
}

/// `Policy::problems` in schema form.
fn tighten_policy(policy: &mut Map<String, Value>) {
    let list = |item: Value| {
        json!({
            "anyOf": [
                { "type": "array", "items": item, "maxItems": MAX_POLICY_ENTRIES },
                { "type": "null" },
            ],
        })
    };
    let entries = [
        (
            "nats_subjects",
            json!({ "type": "string", "maxLength": 1024, "pattern": SUBJECT_FILTER_PATTERN, "format": SUBJECT_FILTER_FORMAT }),
        ),
        (
            "url_prefixes",
            json!({ "type": "string", "maxLength": 2048, "pattern": URL_PREFIX_PATTERN, "format": URL_PREFIX_FORMAT }),
        ),
        ("pools", json!({ "type": "string", "pattern": ID_PATTERN })),
        (
            "chain_from",
            json!({ "type": "string", "pattern": SCOPE_PATTERN }),
        ),
    ];
    for (field, item) in entries {
        let Some(Value::Object(property)) =
            policy.get_mut("properties").and_then(|p| p.get_mut(field))
        else {
            continue;
        };
        let description = property.remove("description");
        let Value::Object(mut tightened) = list(item) else {
            continue;
        };
        if let Some(description) = description {
            tightened.insert("description".into(), description);
        }
        *property = tightened;
    }
}
