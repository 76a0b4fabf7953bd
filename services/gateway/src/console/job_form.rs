//! The job form: the fields an operator edits most (schedule, zone, target
//! of each type, retry, timeout, concurrency, labels, notification), turned
//! into a definition and back.
//!
//! A form edit starts from the stored definition and replaces only the
//! fields the form shows, so settings the form does not have (jitter, shards,
//! headers, environment...) survive it; the raw JSON editor covers those.
//! The definition is then checked by the same validation as every other
//! door; its problems name fields such as `target.url`, which are the form's
//! input names, so each error is shown next to its input.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

/// What the form posts. Every field is text, as a browser sends it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct JobForm {
    #[serde(default)]
    pub csrf: String,
    /// The revision the edit started from; 0 for a new job.
    #[serde(default)]
    pub expected_revision: u64,
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub schedule: String,
    #[serde(default)]
    pub timezone: String,
    /// Parents: `job` or `job:on`, separated by commas or spaces.
    #[serde(default)]
    pub after: String,
    #[serde(default, rename = "target.type")]
    pub target_type: String,
    #[serde(default, rename = "target.url")]
    pub url: String,
    #[serde(default, rename = "target.method")]
    pub method: String,
    #[serde(default, rename = "target.body")]
    pub body: String,
    #[serde(default, rename = "target.subject")]
    pub subject: String,
    #[serde(default, rename = "target.payload")]
    pub payload: String,
    #[serde(default, rename = "target.command")]
    pub command: String,
    #[serde(default, rename = "retry.max_attempts")]
    pub max_attempts: String,
    #[serde(default, rename = "retry.backoff")]
    pub backoff: String,
    #[serde(default)]
    pub timeout: String,
    #[serde(default)]
    pub concurrency: String,
    /// One `key=value` per line.
    #[serde(default)]
    pub labels: String,
    #[serde(default, rename = "notify.webhook")]
    pub webhook: String,
    /// Alert channel names, separated by commas or spaces.
    #[serde(default, rename = "notify.channels")]
    pub channels: String,
    /// `on` when the box is ticked (absent otherwise).
    #[serde(default)]
    pub paused: Option<String>,
}

fn set_text(map: &mut Map<String, Value>, name: &str, text: &str) {
    let text = text.trim();
    if text.is_empty() {
        map.remove(name);
    } else {
        map.insert(name.to_string(), Value::String(text.to_string()));
    }
}

impl JobForm {
    /// The form of a stored definition (`None`: a new job).
    pub fn of(definition: Option<&Value>, revision: u64) -> Self {
        let empty = Map::new();
        let d = definition.and_then(Value::as_object).unwrap_or(&empty);
        let text = |v: Option<&Value>| match v {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        let target = d.get("target").and_then(Value::as_object).unwrap_or(&empty);
        let retry = d.get("retry").and_then(Value::as_object).unwrap_or(&empty);
        let notify = d.get("notify").and_then(Value::as_object).unwrap_or(&empty);
        let labels = d
            .get("labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        Self {
            csrf: String::new(),
            expected_revision: revision,
            id: text(d.get("id")),
            description: text(d.get("description")),
            schedule: text(d.get("schedule")),
            timezone: text(d.get("timezone")),
            after: d
                .get("after")
                .and_then(Value::as_array)
                .map(|links| {
                    links
                        .iter()
                        .filter_map(|link| {
                            let job = link.get("job")?.as_str()?;
                            Some(match link.get("on").and_then(Value::as_str) {
                                Some(on) if on != "success" => format!("{job}:{on}"),
                                _ => job.to_string(),
                            })
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default(),
            target_type: match text(target.get("type")) {
                t if t.is_empty() => "http".into(),
                t => t,
            },
            url: text(target.get("url")),
            method: text(target.get("method")),
            body: text(target.get("body")),
            subject: text(target.get("subject")),
            payload: target
                .get("payload")
                .map(|p| match p {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .unwrap_or_default(),
            command: text(target.get("command")),
            max_attempts: text(retry.get("max_attempts")),
            backoff: text(retry.get("backoff")),
            timeout: text(d.get("timeout")),
            concurrency: text(d.get("concurrency")),
            labels,
            webhook: text(notify.get("webhook")),
            channels: notify
                .get("channels")
                .and_then(Value::as_array)
                .map(|names| {
                    names
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default(),
            paused: (d.get("paused") == Some(&Value::Bool(true))).then(|| "on".into()),
        }
    }

    /// `base` (the stored definition, or `{}`) with the form's fields put in.
    /// Text that must be a number or JSON and is not stays text, so the
    /// validation names the field.
    pub fn apply_to(&self, base: Option<&Value>) -> Value {
        let mut d = base.and_then(Value::as_object).cloned().unwrap_or_default();
        d.insert("id".into(), Value::String(self.id.trim().to_string()));
        set_text(&mut d, "description", &self.description);
        // Left empty: no schedule (a job with parents runs after them; one
        // without is told the schedule is missing).
        set_text(&mut d, "schedule", &self.schedule);
        set_text(&mut d, "timezone", &self.timezone);
        let after: Vec<Value> = self
            .after
            .split([',', ' ', '\n'])
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|parent| match parent.split_once(':') {
                Some((job, on)) => serde_json::json!({"job": job, "on": on}),
                None => serde_json::json!({ "job": parent }),
            })
            .collect();
        if after.is_empty() {
            d.remove("after");
        } else {
            d.insert("after".into(), Value::Array(after));
        }
        set_text(&mut d, "timeout", &self.timeout);
        set_text(&mut d, "concurrency", &self.concurrency);
        if self.paused.is_some() {
            d.insert("paused".into(), Value::Bool(true));
        } else {
            d.remove("paused");
        }

        // The target: the same type keeps its other settings (headers, env).
        let mut target = d
            .get("target")
            .and_then(Value::as_object)
            .filter(|t| t.get("type").and_then(Value::as_str) == Some(self.target_type.as_str()))
            .cloned()
            .unwrap_or_default();
        target.insert(
            "type".into(),
            Value::String(self.target_type.trim().to_string()),
        );
        match self.target_type.as_str() {
            "http" => {
                set_text(&mut target, "url", &self.url);
                set_text(&mut target, "method", &self.method);
                set_text(&mut target, "body", &self.body);
            }
            "nats" => {
                set_text(&mut target, "subject", &self.subject);
                let payload = self.payload.trim();
                if payload.is_empty() {
                    target.remove("payload");
                } else {
                    // JSON when it parses, else the text itself.
                    let value = serde_json::from_str(payload)
                        .unwrap_or_else(|_| Value::String(payload.to_string()));
                    target.insert("payload".into(), value);
                }
            }
            "shell" => set_text(&mut target, "command", &self.command),
            _ => {}
        }
        d.insert("target".into(), Value::Object(target));

        let mut retry = d
            .get("retry")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        match self.max_attempts.trim() {
            "" => {
                retry.remove("max_attempts");
            }
            text => {
                let value = text
                    .parse::<u64>()
                    .map(Value::from)
                    .unwrap_or_else(|_| Value::String(text.to_string()));
                retry.insert("max_attempts".into(), value);
            }
        }
        set_text(&mut retry, "backoff", &self.backoff);
        if retry.is_empty() {
            d.remove("retry");
        } else {
            d.insert("retry".into(), Value::Object(retry));
        }

        let labels: Map<String, Value> = self
            .labels
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|line| match line.split_once('=') {
                Some((k, v)) => (k.trim().to_string(), Value::String(v.trim().to_string())),
                // A line without `=` becomes a key the validation refuses by name.
                None => (line.to_string(), Value::Null),
            })
            .collect();
        if labels.is_empty() {
            d.remove("labels");
        } else {
            d.insert("labels".into(), Value::Object(labels));
        }

        let mut notify = d
            .get("notify")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        set_text(&mut notify, "webhook", &self.webhook);
        let channels: Vec<Value> = self
            .channels
            .split([',', ' ', '\n'])
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| Value::String(c.to_string()))
            .collect();
        if channels.is_empty() {
            notify.remove("channels");
        } else {
            notify.insert("channels".into(), Value::Array(channels));
        }
        if notify.get("webhook").is_none() && notify.get("channels").is_none() {
            d.remove("notify");
        } else {
            d.insert("notify".into(), Value::Object(notify));
        }
        Value::Object(d)
    }
}

/// Problems by the form input they belong to; those of fields the form does
/// not show are under `""` (shown above the form).
pub fn errors_by_field(
    problems: &[jetcron_core::job::FieldError],
) -> BTreeMap<String, Vec<String>> {
    const FIELDS: [&str; 19] = [
        "id",
        "description",
        "schedule",
        "timezone",
        "after",
        "target.type",
        "target.url",
        "target.method",
        "target.body",
        "target.subject",
        "target.payload",
        "target.command",
        "retry.max_attempts",
        "retry.backoff",
        "timeout",
        "concurrency",
        "labels",
        "notify.webhook",
        "notify.channels",
    ];
    let mut by_field: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for problem in problems {
        let field = FIELDS
            .iter()
            .find(|f| {
                problem.field == **f
                    || problem.field.starts_with(&format!("{f}."))
                    || problem.field.starts_with(&format!("{f}["))
            })
            .map_or("", |f| *f);
        let message = if field.is_empty() && !problem.field.is_empty() {
            format!("{}: {}", problem.field, problem.message)
        } else {
            problem.message.clone()
        };
        by_field.entry(field.to_string()).or_default().push(message);
    }
    by_field
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetcron_core::job::FieldError;
    use serde_json::json;

    #[test]
    fn a_form_edit_keeps_what_the_form_does_not_show() {
        let stored = json!({
            "id": "report", "schedule": "0 3 * * *", "jitter": "30s",
            "target": {"type": "http", "url": "https://a.example/", "headers": {"Authorization": "Bearer x"}},
            "retry": {"max_attempts": 3, "multiplier": 3.0},
            "labels": {"team": "billing"}
        });
        let mut form = JobForm::of(Some(&stored), 7);
        assert_eq!(form.expected_revision, 7);
        assert_eq!(form.labels, "team=billing");
        form.schedule = "0 4 * * *".into();
        form.max_attempts = "5".into();
        form.labels = "team=billing\nenv=prod".into();
        let edited = form.apply_to(Some(&stored));
        assert_eq!(edited["schedule"], "0 4 * * *");
        assert_eq!(edited["jitter"], "30s");
        assert_eq!(edited["target"]["headers"]["Authorization"], "Bearer x");
        assert_eq!(
            edited["retry"],
            json!({"max_attempts": 5, "multiplier": 3.0})
        );
        assert_eq!(edited["labels"], json!({"team": "billing", "env": "prod"}));

        // Another target type starts that target afresh.
        form.target_type = "shell".into();
        form.command = "echo hi".into();
        let edited = form.apply_to(Some(&stored));
        assert_eq!(
            edited["target"],
            json!({"type": "shell", "command": "echo hi"})
        );
    }

    #[test]
    fn parents_round_trip_and_an_empty_schedule_is_left_out() {
        let stored = json!({
            "id": "load",
            "after": [{"job": "extract"}, {"job": "audit", "on": "failure"}],
            "target": {"type": "nats", "subject": "svc.load"}
        });
        let mut form = JobForm::of(Some(&stored), 3);
        assert_eq!(form.after, "extract, audit:failure");
        assert_eq!(form.schedule, "");
        let edited = form.apply_to(Some(&stored));
        assert_eq!(
            edited["after"],
            json!([{"job": "extract"}, {"job": "audit", "on": "failure"}])
        );
        assert!(edited.get("schedule").is_none(), "{edited}");
        jetcron_core::job::parse_job(edited.to_string().as_bytes(), None).expect("valid");
        form.after = String::new();
        let edited = form.apply_to(Some(&stored));
        assert!(edited.get("after").is_none(), "{edited}");
        let problems = jetcron_core::job::parse_job(edited.to_string().as_bytes(), None)
            .expect_err("neither schedule nor parents");
        assert!(errors_by_field(&problems).contains_key("schedule"));
        form.after = "no such id!".into();
        let problems =
            jetcron_core::job::parse_job(form.apply_to(Some(&stored)).to_string().as_bytes(), None)
                .expect_err("bad parent");
        assert!(
            errors_by_field(&problems).contains_key("after"),
            "{problems:?}"
        );
    }

    #[test]
    fn bad_text_stays_text_so_the_validation_names_the_field() {
        let form = JobForm {
            id: "x".into(),
            schedule: "* * * * *".into(),
            target_type: "nats".into(),
            subject: "svc.x".into(),
            max_attempts: "three".into(),
            ..JobForm::default()
        };
        let d = form.apply_to(None);
        assert_eq!(d["retry"]["max_attempts"], "three");
        let by_field = errors_by_field(&[
            FieldError::new("retry.max_attempts", "invalid_type", "must be a number"),
            FieldError::new("shards", "out_of_range", "too many"),
        ]);
        assert_eq!(by_field["retry.max_attempts"], ["must be a number"]);
        assert_eq!(by_field[""], ["shards: too many"]);
    }
}
