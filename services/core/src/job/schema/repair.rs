//! A refused definition made decodable: the fields the schema found
//! broken are taken out, and what serde still stumbles on is taken out or
//! replaced by a placeholder, one field at a time, so that the rest of the
//! definition can be validated and every problem reported at once.

use serde_json::{Map, Value};

use super::{field_name, Structural};
use crate::job::spec::{FieldError, JobSpec};

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
