//! What a team's NATS user may do: the `permissions` of a nats-server user
//! for one role in one namespace, so that nats-server itself keeps teams
//! apart on the doors it serves (`jetcron nats-permissions` prints them).
//!
//! A team talks to jetcron through its namespace's door,
//! `jetcron.api.ns.<namespace>.<endpoint>` (the gateway acts on that
//! namespace only, [`crate::subjects::namespace_api_subject`]), and, as an
//! editor, writes its jobs straight into the bucket under its namespace's
//! keys (`nats kv put jetcron_jobs <namespace>.<job>`). Which endpoints a
//! role may send to follows [`crate::access::Role`]: a viewer lists and
//! reads, an operator also triggers, pauses, resumes, backfills and kills,
//! an editor (and an admin: tokens are an HTTP matter) also puts and
//! deletes. It hears its own jobs' run events live. Replies come to an
//! inbox of its own (`_INBOX_<namespace>.>`: set the client's inbox prefix,
//! `nats --inbox-prefix _INBOX_<namespace>`), so no team reads another's
//! answers.

use serde::Serialize;

use crate::access::Role;
use crate::subjects::{namespace_api_subject, JOBS_BUCKET};

/// A nats-server user's `permissions` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NatsPermissions {
    pub publish: Allow,
    pub subscribe: Allow,
}

/// An `allow` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Allow {
    pub allow: Vec<String>,
}

/// The API endpoints of each role, each role's on top of the one before.
const VIEWER_ENDPOINTS: [&str; 7] = [
    "jobs.get",
    "jobs.list",
    "runs.list",
    "runs.get",
    "schedules.preview",
    "channels.get",
    "channels.list",
];
const OPERATOR_ENDPOINTS: [&str; 5] = [
    "jobs.trigger",
    "jobs.pause",
    "jobs.resume",
    "jobs.backfill",
    "runs.kill",
];
const EDITOR_ENDPOINTS: [&str; 2] = ["jobs.put", "jobs.delete"];

/// The inbox prefix a team's clients use (`nats --inbox-prefix`).
pub fn inbox_prefix(namespace: &str) -> String {
    format!("_INBOX_{namespace}")
}

/// The permissions of `role` in `namespace` (a valid namespace, not `*`).
pub fn nats_permissions(namespace: &str, role: Role) -> NatsPermissions {
    let mut endpoints: Vec<&str> = VIEWER_ENDPOINTS.to_vec();
    if role >= Role::Operator {
        endpoints.extend(OPERATOR_ENDPOINTS);
    }
    if role >= Role::Editor {
        endpoints.extend(EDITOR_ENDPOINTS);
    }
    let mut publish: Vec<String> = endpoints
        .into_iter()
        .map(|endpoint| namespace_api_subject(namespace, endpoint))
        .collect();
    let stream = format!("KV_{JOBS_BUCKET}");
    // `nats kv get/put` bind the bucket first, then read by key.
    publish.push(format!("$JS.API.STREAM.INFO.{stream}"));
    publish.push(format!(
        "$JS.API.DIRECT.GET.{stream}.$KV.{JOBS_BUCKET}.{namespace}.>"
    ));
    if role >= Role::Editor {
        publish.push(format!("$KV.{JOBS_BUCKET}.{namespace}.>"));
    }
    NatsPermissions {
        publish: Allow { allow: publish },
        subscribe: Allow {
            allow: vec![
                format!("{}.>", inbox_prefix(namespace)),
                format!("jetcron.runs.{namespace}.*.*"),
            ],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_reaches_its_own_namespace_and_no_more() {
        let viewer = nats_permissions("billing", Role::Viewer);
        let editor = nats_permissions("billing", Role::Editor);
        let admin = nats_permissions("billing", Role::Admin);
        let has = |p: &NatsPermissions, s: &str| p.publish.allow.iter().any(|a| a == s);
        assert!(has(&viewer, "jetcron.api.ns.billing.jobs.list"));
        assert!(!has(&viewer, "jetcron.api.ns.billing.jobs.trigger"));
        assert!(!has(&viewer, "$KV.jetcron_jobs.billing.>"));
        assert!(has(
            &nats_permissions("billing", Role::Operator),
            "jetcron.api.ns.billing.jobs.trigger"
        ));
        assert!(has(&editor, "jetcron.api.ns.billing.jobs.put"));
        assert!(has(&editor, "$KV.jetcron_jobs.billing.>"));
        assert_eq!(editor, admin);
        for permissions in [&viewer, &editor] {
            for subject in &permissions.publish.allow {
                assert!(
                    subject.contains(".billing.") || subject.ends_with("KV_jetcron_jobs"),
                    "{subject} reaches beyond billing"
                );
            }
            assert!(!permissions
                .subscribe
                .allow
                .iter()
                .any(|s| s.starts_with("_INBOX.")));
        }
        let json = serde_json::to_value(&viewer).expect("json");
        assert!(json["publish"]["allow"].is_array() && json["subscribe"]["allow"].is_array());
    }
}
