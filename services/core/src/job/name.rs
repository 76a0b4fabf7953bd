//! A job's name and the namespace it is in.
//!
//! Many teams share one jetcron, and a namespace keeps their jobs apart:
//! `billing.export` is job `export` of namespace `billing`. A name without
//! a dot is in namespace [`DEFAULT_NAMESPACE`], so every name given before
//! namespaces existed keeps its meaning, its key and its subjects.
//!
//! The whole name is the job's key in `jetcron_jobs` and is used unchanged
//! wherever a job is named (API bodies, URLs, run events, ClickHouse,
//! alerts, chains). In a subject it is one token or two; code that takes a
//! subject apart reads the job as everything between the fixed prefix and
//! the last token ([`crate::subjects::run_event_parts`]), and a filter for
//! one job's subjects ends in `*`, never `>`, so `billing`'s filter does not
//! take `billing.export`'s events.
//!
//! A name has one spelling: the default namespace is never written out
//! (`export`, not `default.export`), so one job cannot sit under two keys.

use super::spec::{FieldError, MAX_ID_LEN};

/// The namespace of a name without a dot.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Namespaces no name may be in: [`DEFAULT_NAMESPACE`] (written without
/// it), and `deliver`, whose jobs' alert subjects
/// (`jetcron.notify.<ns>.<job>`) would be those of alert deliveries
/// (`jetcron.notify.deliver.<channel>`).
pub const RESERVED_NAMESPACES: [&str; 2] = [DEFAULT_NAMESPACE, "deliver"];

/// A valid job name taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobName<'a> {
    /// Its namespace ([`DEFAULT_NAMESPACE`] for a name without a dot).
    pub namespace: &'a str,
    /// Its name inside the namespace.
    pub local: &'a str,
}

impl<'a> JobName<'a> {
    /// `name` taken apart at its first dot (not validated).
    pub fn of(name: &'a str) -> Self {
        match name.split_once('.') {
            Some((namespace, local)) => Self { namespace, local },
            None => Self {
                namespace: DEFAULT_NAMESPACE,
                local: name,
            },
        }
    }

    /// Whether it is written with its namespace (not in the default one).
    pub fn is_namespaced(&self) -> bool {
        self.namespace != DEFAULT_NAMESPACE
    }
}

/// The namespace of the job named `name`.
pub fn namespace_of(name: &str) -> &str {
    JobName::of(name).namespace
}

/// The full name of job `local` in `namespace`.
pub fn job_name(namespace: &str, local: &str) -> String {
    if namespace == DEFAULT_NAMESPACE {
        local.to_string()
    } else {
        format!("{namespace}.{local}")
    }
}

/// Check a job's name (`<job>` or `<namespace>.<job>`): each part a token
/// ([`validate_token`]), at most one dot, no reserved namespace written out.
pub fn validate_job_name(field: &str, name: &str) -> Result<(), FieldError> {
    if name.is_empty() {
        return Err(FieldError::new(field, "required", "must not be empty"));
    }
    if name.matches('.').count() > 1 {
        return Err(FieldError::new(
            field,
            "invalid_id",
            format!("{name:?} has more than one '.': a job's name is <job> or <namespace>.<job>"),
        ));
    }
    let parts = JobName::of(name);
    if !parts.is_namespaced() && name.contains('.') {
        return Err(FieldError::new(
            field,
            "reserved_namespace",
            format!(
                "{name:?}: jobs of namespace {DEFAULT_NAMESPACE:?} are named without it ({:?})",
                parts.local
            ),
        ));
    }
    if name.contains('.') {
        validate_namespace(field, parts.namespace)?;
    }
    validate_token(field, parts.local)
}

/// Check a namespace as it is written in a name, a query or a subject.
pub fn validate_namespace(field: &str, namespace: &str) -> Result<(), FieldError> {
    validate_token(field, namespace)?;
    if namespace != DEFAULT_NAMESPACE && RESERVED_NAMESPACES.contains(&namespace) {
        return Err(FieldError::new(
            field,
            "reserved_namespace",
            format!("namespace {namespace:?} is reserved"),
        ));
    }
    Ok(())
}

/// Check a name that becomes one subject token and a KV key (a pool, a
/// channel, either part of a job's name).
pub fn validate_token(field: &str, id: &str) -> Result<(), FieldError> {
    if id.is_empty() {
        return Err(FieldError::new(field, "required", "must not be empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(FieldError::new(
            field,
            "too_long",
            format!("must be at most {MAX_ID_LEN} characters, got {}", id.len()),
        ));
    }
    let first_ok = id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !first_ok || !rest_ok {
        return Err(FieldError::new(
            field,
            "invalid_id",
            format!(
                "{id:?} must start with a letter or digit and contain only letters, digits, '-' and '_'"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_without_a_dot_is_in_the_default_namespace() {
        assert_eq!(
            JobName::of("export"),
            JobName {
                namespace: "default",
                local: "export"
            }
        );
        assert_eq!(namespace_of("billing.export"), "billing");
        assert_eq!(JobName::of("billing.export").local, "export");
        assert_eq!(job_name("default", "export"), "export");
        assert_eq!(job_name("billing", "export"), "billing.export");
    }

    #[test]
    fn names_take_one_dot_and_no_reserved_namespace() {
        for good in ["export", "billing.export", "a.b", "B-1_x.y_2"] {
            assert_eq!(validate_job_name("id", good), Ok(()), "{good}");
        }
        let code = |name: &str| validate_job_name("id", name).expect_err(name).code;
        assert_eq!(code("a.b.c"), "invalid_id");
        assert_eq!(code("default.export"), "reserved_namespace");
        assert_eq!(code("deliver.export"), "reserved_namespace");
        assert_eq!(code(".export"), "required");
        assert_eq!(code("billing."), "required");
        assert_eq!(code("bil ling.export"), "invalid_id");
        assert_eq!(code("-billing.export"), "invalid_id");
        assert_eq!(code(""), "required");
        assert_eq!(code(&format!("{}.x", "n".repeat(129))), "too_long");
        let longest = format!("{}.{}", "n".repeat(128), "j".repeat(128));
        assert_eq!(validate_job_name("id", &longest), Ok(()));
    }

    #[test]
    fn names_agree_with_the_schema_pattern() {
        let schema = serde_json::json!({"type": "string", "pattern": super::super::patterns::JOB_NAME_PATTERN});
        let pattern = jsonschema::validator_for(&schema).expect("the pattern compiles");
        for name in [
            "export",
            "billing.export",
            "a.b.c",
            "x.",
            ".x",
            "a b",
            "-a",
            "a.-b",
            "default.export",
            "deliver.x",
            "defaults.x",
            "delivery",
        ] {
            assert_eq!(
                pattern.is_valid(&serde_json::json!(name)),
                validate_job_name("id", name).is_ok(),
                "{name}"
            );
        }
    }
}
