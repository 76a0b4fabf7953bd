//! What a namespace's jobs may reach: its target policy.
//!
//! The executors call targets with their own rights: without a policy, a
//! job of one team may call any NATS subject or URL the executors reach,
//! another team's services included. A namespace's policy lists what its
//! jobs may use (NATS subject patterns, URL prefixes, pools, shell, the
//! namespaces whose jobs may start its chained jobs); a kind it does not
//! name is not limited, and a namespace without a policy (every namespace,
//! `default` included, until an admin sets one) keeps today's behaviour.
//!
//! A policy is checked where a definition enters (the API refuses the put
//! with the field named) and again where it runs: a definition that reached
//! the bucket past the API (a direct `nats kv put`) is recorded as rejected
//! by the ticker and every fire of it is refused by the executor, never
//! called. A policy may be `locked` by an admin of `*`: then only an admin
//! of `*` changes it, so a platform team can bound a team's reach without
//! the team's own admin widening it.

use serde::{Deserialize, Serialize};

use crate::job::{
    is_valid_publish_subject, namespace_of, validate_namespace, validate_token, FieldError,
    JobSpec, Target,
};

/// Entries a list of a policy may hold.
pub const MAX_POLICY_ENTRIES: usize = 256;

/// Largest encoded policy the bucket takes.
pub const MAX_POLICY_BYTES: usize = 64 * 1024;

/// The `code` of a problem a policy finds in a job.
pub const POLICY_CODE: &str = "forbidden_by_policy";

/// What the jobs of one namespace may use. A list that is absent does not
/// limit its kind; an empty one allows none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Subjects a `nats` target may name, as NATS subject patterns
    /// (`billing.>`, `billing.*.export`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats_subjects: Option<Vec<String>>,
    /// Prefixes an `http` target's URL must start with. A prefix ends at a
    /// path boundary: `https://billing.internal` allows
    /// `https://billing.internal/x`, not `https://billing.internal.example`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_prefixes: Option<Vec<String>>,
    /// Pools the namespace's jobs may run in (`default` for a job that
    /// names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<Vec<String>>,
    /// Whether `shell` targets may be used (absent: they may).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<bool>,
    /// Namespaces whose jobs may be named in `after` (a job's own
    /// namespace always may; `*` for every one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_from: Option<Vec<String>>,
    /// Most runs of the namespace's jobs calling their targets at once,
    /// over every executor; a fire beyond it waits for a run to end (none
    /// is dropped or skipped). Absent: no limit but the executors' slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_concurrent_runs: Option<u32>,
    /// Set by an admin of `*`: only an admin of `*` changes or removes
    /// the policy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub locked: bool,
}

/// The largest `max_concurrent_runs`: each run of a limited namespace takes
/// one of that many keys in `jetcron_running`.
pub const MAX_CONCURRENT_RUNS: u32 = 1000;

impl Policy {
    /// A policy sent as `bytes`, or every problem found, each naming its
    /// field.
    pub fn parse(bytes: &[u8]) -> Result<Self, Vec<FieldError>> {
        if bytes.len() > MAX_POLICY_BYTES {
            return Err(vec![FieldError::new(
                "",
                "too_large",
                format!(
                    "a policy is at most {MAX_POLICY_BYTES} bytes, got {}",
                    bytes.len()
                ),
            )]);
        }
        let not_a_policy = |why: String| {
            vec![FieldError::new(
                "",
                "invalid_json",
                format!("not a policy: {why}"),
            )]
        };
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| not_a_policy(e.to_string()))?;
        // serde would take an array for a struct, field by field.
        if !value.is_object() {
            return Err(not_a_policy("a policy is a JSON object".into()));
        }
        let policy: Policy =
            serde_json::from_value(value).map_err(|e| not_a_policy(e.to_string()))?;
        let problems = policy.problems();
        match problems.is_empty() {
            true => Ok(policy),
            false => Err(problems),
        }
    }

    /// Every problem of the policy's own entries.
    pub fn problems(&self) -> Vec<FieldError> {
        let mut problems = Vec::new();
        check_list(
            "nats_subjects",
            &self.nats_subjects,
            &mut problems,
            |field, pattern| {
                is_subject_pattern(pattern).then_some(()).ok_or_else(|| {
                    FieldError::new(
                        field,
                        "invalid_pattern",
                        format!("{pattern:?} is not a NATS subject pattern (dot-separated tokens, `*` for one token, `>` last for the rest)"),
                    )
                })
            },
        );
        check_list(
            "url_prefixes",
            &self.url_prefixes,
            &mut problems,
            check_url_prefix,
        );
        check_list("pools", &self.pools, &mut problems, validate_token);
        check_list(
            "chain_from",
            &self.chain_from,
            &mut problems,
            |field, namespace| match namespace {
                "*" => Ok(()),
                _ => validate_namespace(field, namespace),
            },
        );
        if let Some(max) = self.max_concurrent_runs {
            if !(1..=MAX_CONCURRENT_RUNS).contains(&max) {
                problems.push(FieldError::new(
                    "max_concurrent_runs",
                    "out_of_range",
                    format!("max_concurrent_runs is 1 to {MAX_CONCURRENT_RUNS} (leave it out for no limit), got {max}"),
                ));
            }
        }
        problems
    }

    /// Every use of `job` (a job of namespace `namespace`) this policy does
    /// not allow, each naming the job's field.
    pub fn refusals(&self, namespace: &str, job: &JobSpec) -> Vec<FieldError> {
        let mut refusals = Vec::new();
        let mut refuse = |field: &str, message: String| {
            refusals.push(FieldError::new(
                field,
                POLICY_CODE,
                format!("{message} (policy of namespace {namespace:?})"),
            ));
        };
        match &job.target {
            Target::Nats(target) => {
                if let Some(patterns) = &self.nats_subjects {
                    if !patterns.iter().any(|p| subject_matches(p, &target.subject)) {
                        refuse(
                            "target.subject",
                            format!(
                                "subject {:?} is outside the allowed subjects {patterns:?}",
                                target.subject
                            ),
                        );
                    }
                }
            }
            Target::Http(target) => {
                if let Some(prefixes) = &self.url_prefixes {
                    if !prefixes.iter().any(|p| url_under(p, &target.url)) {
                        refuse(
                            "target.url",
                            format!("URL is outside the allowed prefixes {prefixes:?}"),
                        );
                    }
                }
            }
            Target::Shell(_) => {
                if self.shell == Some(false) {
                    refuse("target.type", "shell targets are not allowed".into());
                }
            }
        }
        if let Some(pools) = &self.pools {
            let pool = job.pool.as_deref().unwrap_or(crate::subjects::DEFAULT_POOL);
            if !pools.iter().any(|allowed| allowed == pool) {
                refuse(
                    "pool",
                    format!("pool {pool:?} is not one of the allowed pools {pools:?}"),
                );
            }
        }
        if let Some(namespaces) = &self.chain_from {
            for (index, link) in job.after.iter().enumerate() {
                let parent = namespace_of(&link.job);
                let allowed =
                    parent == namespace || namespaces.iter().any(|n| n == "*" || n == parent);
                if !allowed {
                    refuse(
                        &format!("after[{index}].job"),
                        format!(
                            "jobs of namespace {parent:?} may not start this namespace's jobs (chain_from {namespaces:?})"
                        ),
                    );
                }
            }
        }
        refusals
    }
}

/// Check each entry of the list `field`, if there is one, with `check`.
fn check_list(
    field: &str,
    list: &Option<Vec<String>>,
    problems: &mut Vec<FieldError>,
    check: impl Fn(&str, &str) -> Result<(), FieldError>,
) {
    let Some(list) = list else { return };
    if list.len() > MAX_POLICY_ENTRIES {
        problems.push(FieldError::new(
            field,
            "too_many",
            format!("at most {MAX_POLICY_ENTRIES} entries, got {}", list.len()),
        ));
        return;
    }
    for (index, entry) in list.iter().enumerate() {
        if let Err(problem) = check(&format!("{field}[{index}]"), entry) {
            problems.push(problem);
        }
    }
}

/// An `http`/`https` URL prefix with a host.
fn check_url_prefix(field: &str, prefix: &str) -> Result<(), FieldError> {
    let host = prefix
        .strip_prefix("https://")
        .or_else(|| prefix.strip_prefix("http://"));
    let has_host = host.is_some_and(|rest| {
        rest.split(['/', '?', '#'])
            .next()
            .is_some_and(|h| !h.is_empty())
    });
    let clean = !prefix.chars().any(|c| c.is_whitespace() || c.is_control());
    match has_host && clean && prefix.len() <= 2048 {
        true => Ok(()),
        false => Err(FieldError::new(
            field,
            "invalid_url_prefix",
            format!("{prefix:?} is not an http:// or https:// URL prefix with a host"),
        )),
    }
}

/// A NATS subject pattern: tokens, `*` for one, `>` last for the rest.
pub fn is_subject_pattern(pattern: &str) -> bool {
    let tokens: Vec<&str> = pattern.split('.').collect();
    let literal: String = tokens
        .iter()
        .map(|t| match *t {
            "*" | ">" => "x",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(".");
    let tail_last = tokens
        .iter()
        .position(|t| *t == ">")
        .is_none_or(|at| at == tokens.len() - 1);
    tail_last && is_valid_publish_subject(&literal)
}

/// Whether `subject` (no wildcards) matches `pattern`.
pub fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut subject_tokens = subject.split('.');
    for token in pattern.split('.') {
        match (token, subject_tokens.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (literal, Some(s)) if literal == s => {}
            _ => return false,
        }
    }
    subject_tokens.next().is_none()
}

/// Whether `url` starts with `prefix` at a boundary: the prefix ends with
/// `/`, or the URL goes on with `/`, `?`, `#` or ends there.
fn url_under(prefix: &str, url: &str) -> bool {
    let Some(rest) = url.strip_prefix(prefix) else {
        return false;
    };
    prefix.ends_with('/') || rest.is_empty() || rest.starts_with(['/', '?', '#'])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(json: &str) -> JobSpec {
        crate::job::parse_job(json.as_bytes(), None)
            .expect("job")
            .spec
    }

    fn policy(json: &str) -> Policy {
        Policy::parse(json.as_bytes()).expect("policy")
    }

    #[test]
    fn subject_patterns_match_as_nats_does() {
        assert!(subject_matches("billing.>", "billing.export"));
        assert!(subject_matches("billing.>", "billing.a.b"));
        assert!(!subject_matches("billing.>", "billing"));
        assert!(subject_matches("billing.*.run", "billing.x.run"));
        assert!(!subject_matches("billing.*.run", "billing.x.y.run"));
        assert!(!subject_matches("billing.*", "billing.x.y"));
        assert!(subject_matches("billing.export", "billing.export"));
        assert!(!subject_matches("billing.export", "payments.export"));
        assert!(is_subject_pattern("billing.>"));
        assert!(is_subject_pattern("*.x"));
        assert!(!is_subject_pattern("billing.>.x"));
        assert!(!is_subject_pattern("billing..x"));
        assert!(!is_subject_pattern("bill ing"));
    }

    #[test]
    fn url_prefixes_end_at_a_boundary() {
        assert!(url_under("https://b.internal", "https://b.internal/x"));
        assert!(url_under("https://b.internal", "https://b.internal"));
        assert!(url_under(
            "https://b.internal/api/",
            "https://b.internal/api/x"
        ));
        assert!(!url_under(
            "https://b.internal",
            "https://b.internal.evil.example/"
        ));
        assert!(!url_under(
            "https://b.internal/api",
            "https://b.internal/apiary"
        ));
        assert!(!url_under("https://b.internal", "http://b.internal/"));
    }

    #[test]
    fn a_policy_refuses_what_it_does_not_list_naming_the_field() {
        let p = policy(
            r#"{"nats_subjects":["billing.>"],"url_prefixes":["https://billing.internal"],"pools":["billing"],"shell":false,"chain_from":["ops"]}"#,
        );
        let nats = job(
            r#"{"id":"billing.a","schedule":"@daily","pool":"billing","target":{"type":"nats","subject":"payments.charge"}}"#,
        );
        let refused = p.refusals("billing", &nats);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0].field, "target.subject");
        assert_eq!(refused[0].code, POLICY_CODE);
        let shell = job(
            r#"{"id":"billing.a","schedule":"@daily","target":{"type":"shell","command":"true"}}"#,
        );
        let fields: Vec<String> = p
            .refusals("billing", &shell)
            .into_iter()
            .map(|r| r.field)
            .collect();
        assert_eq!(fields, ["target.type", "pool"]);
        let chained = job(
            r#"{"id":"billing.a","pool":"billing","after":[{"job":"ops.backup"},{"job":"billing.b"},{"job":"hr.sync"}],"target":{"type":"http","url":"https://billing.internal/x"}}"#,
        );
        let fields: Vec<String> = p
            .refusals("billing", &chained)
            .into_iter()
            .map(|r| r.field)
            .collect();
        assert_eq!(fields, ["after[2].job"]);
        let allowed = job(
            r#"{"id":"billing.a","schedule":"@daily","pool":"billing","target":{"type":"nats","subject":"billing.export"}}"#,
        );
        assert!(p.refusals("billing", &allowed).is_empty());
    }

    #[test]
    fn an_empty_policy_limits_nothing() {
        let shell = job(
            r#"{"id":"a","schedule":"@daily","pool":"x","after":[{"job":"ops.b"}],"target":{"type":"shell","command":"true"}}"#,
        );
        assert!(Policy::default().refusals("default", &shell).is_empty());
    }

    #[test]
    fn bad_policies_name_each_field() {
        let problems = Policy::parse(
            br#"{"nats_subjects":["ok.>","a.>.b"],"url_prefixes":["ftp://x","https://"],"pools":["bad pool"],"chain_from":["*","deliver"]}"#,
        )
        .expect_err("bad");
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "nats_subjects[1]",
                "url_prefixes[0]",
                "url_prefixes[1]",
                "pools[0]",
                "chain_from[1]"
            ]
        );
        let array = Policy::parse(b"[]").expect_err("array");
        assert_eq!(array[0].code, "invalid_json");
        let unknown = Policy::parse(br#"{"shel":false}"#).expect_err("unknown");
        assert_eq!(unknown[0].code, "invalid_json");
        assert!(unknown[0].message.contains("shel"), "{unknown:?}");
    }
}
