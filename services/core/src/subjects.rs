//! Every name jetcron puts on the wire or in storage, in one place.
//!
//! Users and later releases rely on these names, so they are constants and
//! builder functions here rather than `format!` calls scattered across services.

/// KV bucket holding job definitions; key = job id. The source of truth.
pub const JOBS_BUCKET: &str = "jetcron_jobs";
/// KV bucket of alert channel definitions (key = channel name).
pub const CHANNELS_BUCKET: &str = "jetcron_channels";
/// KV bucket of open alert incidents (key = `<job id>.<rule>`).
pub const INCIDENTS_BUCKET: &str = "jetcron_incidents";
/// KV bucket of the scoped API tokens (key = token id; hashes only).
pub const TOKENS_BUCKET: &str = "jetcron_tokens";
/// KV bucket of the namespaces' target policies (key = namespace).
pub const POLICIES_BUCKET: &str = "jetcron_policies";
/// KV bucket of role bindings (key = `<namespace or _all>.<user|group>.<digest>`).
pub const BINDINGS_BUCKET: &str = "jetcron_bindings";
/// KV bucket of local users (key = user name; Argon2id hashes only).
pub const USERS_BUCKET: &str = "jetcron_users";
/// KV bucket of sign-ins waiting for the identity provider (key =
/// SHA-256 of the id in the browser's cookie; 10 minutes each).
pub const SIGN_INS_BUCKET: &str = "jetcron_sign_ins";
/// KV bucket of console sessions (key = SHA-256 of the session id).
pub const SESSIONS_BUCKET: &str = "jetcron_sessions";

/// KV bucket of the tickers: shard leases with their fired-up-to watermarks,
/// and replica heartbeats.
pub const TICKER_BUCKET: &str = "jetcron_ticker";

/// Object store of the tickers' shard snapshots (one object per shard).
pub const TICKER_SNAPSHOTS_BUCKET: &str = "jetcron_ticker_snapshots";

/// Stream of due events (ticker → executors).
pub const DUE_STREAM: &str = "JETCRON_DUE";
/// Subjects captured by [`DUE_STREAM`].
pub const DUE_SUBJECTS: &str = "jetcron.due.>";

/// Stream of run events (executors → projector, and anyone who listens).
pub const RUNS_STREAM: &str = "JETCRON_RUNS";
/// Subjects captured by [`RUNS_STREAM`].
pub const RUNS_SUBJECTS: &str = "jetcron.runs.>";

/// Name of the NATS micro service that answers the API (`nats micro ls`).
pub const API_SERVICE: &str = "jetcron";
/// Subject prefix of the job endpoints; endpoints are `<prefix>.<verb>`.
pub const API_JOBS_GROUP: &str = "jetcron.api.jobs";
/// `jetcron.api.jobs.put`: create or replace a job.
pub const API_JOBS_PUT: &str = "jetcron.api.jobs.put";
/// `jetcron.api.jobs.trigger`: run a job now.
pub const API_JOBS_TRIGGER: &str = "jetcron.api.jobs.trigger";
/// `jetcron.api.jobs.backfill`: run a job's scheduled times of a past range.
pub const API_JOBS_BACKFILL: &str = "jetcron.api.jobs.backfill";
/// Subject prefix of the schedule endpoints.
pub const API_SCHEDULES_GROUP: &str = "jetcron.api.schedules";
/// `jetcron.api.schedules.preview`: a line's next fires before it is saved.
pub const API_SCHEDULES_PREVIEW: &str = "jetcron.api.schedules.preview";
/// Subject prefix of the run endpoints.
pub const API_RUNS_GROUP: &str = "jetcron.api.runs";
/// Alert channel endpoints: `put`, `get`, `list`, `delete`.
pub const API_CHANNELS_GROUP: &str = "jetcron.api.channels";
/// `jetcron.api.runs.kill`: stop a run wherever it is.
pub const API_RUNS_KILL: &str = "jetcron.api.runs.kill";

/// What every API subject starts with.
pub const API_PREFIX: &str = "jetcron.api";

/// The subject of `endpoint` (`jobs.put`) for callers acting everywhere.
pub fn api_subject(endpoint: &str) -> String {
    format!("{API_PREFIX}.{endpoint}")
}

/// What a namespace's door to the API starts with:
/// `jetcron.api.ns.<namespace>.<group>.<endpoint>` acts in that namespace
/// only, so nats-server's permissions on it keep teams apart.
pub const API_NAMESPACE_PREFIX: &str = "jetcron.api.ns";

/// The subject of `endpoint` (`jobs.put`) on `namespace`'s door.
pub fn namespace_api_subject(namespace: &str, endpoint: &str) -> String {
    format!("{API_NAMESPACE_PREFIX}.{namespace}.{endpoint}")
}

/// The namespace of a subject of a namespace's door, if it is one.
pub fn namespace_of_api_subject(subject: &str) -> Option<&str> {
    subject
        .strip_prefix(API_NAMESPACE_PREFIX)?
        .strip_prefix('.')?
        .split('.')
        .next()
        .filter(|namespace| !namespace.is_empty())
}

/// Durable consumer of the projector.
pub const PROJECTOR_CONSUMER: &str = "projector";

/// Durable consumer of the projector on the jobs bucket's stream: every
/// revision of a job, with its author, into `job_events`.
pub const PROJECTOR_JOBS_CONSUMER: &str = "projector-jobs";

/// Pool of jobs that name none.
pub const DEFAULT_POOL: &str = "default";

/// KV bucket of runs in progress: overlap claims (`claim.<job>[.<shard>]`)
/// and kill requests (`kill.<run_id>`).
pub const RUNNING_BUCKET: &str = "jetcron_running";

/// Stream of failure notifications waiting to be delivered (executors → webhooks).
pub const NOTIFY_STREAM: &str = "JETCRON_NOTIFY";
/// Subjects captured by [`NOTIFY_STREAM`].
pub const NOTIFY_SUBJECTS: &str = "jetcron.notify.>";
/// Durable consumer of the executors delivering notifications.
pub const NOTIFIER_CONSUMER: &str = "notifier";
/// Durable consumer of `JETCRON_RUNS` through which executors start the
/// runs of chained jobs when a parent run ends.
pub const CHAINS_CONSUMER: &str = "chains";

/// The run events that can start chained runs: a run's endings.
pub fn chain_filter_subjects() -> Vec<String> {
    // A job's name is one token or two (`export`, `billing.export`).
    ["succeeded", "failed", "timed_out", "killed"]
        .iter()
        .flat_map(|kind| {
            [
                format!("jetcron.runs.*.{kind}"),
                format!("jetcron.runs.*.*.{kind}"),
            ]
        })
        .collect()
}

/// Core-NATS subjects on which executors hear kill requests.
pub const KILL_CONTROL_FILTER: &str = "jetcron.control.kill.*";

/// Core-NATS subjects on which executors answer whether they run a run.
pub const RUNNING_PROBE_FILTER: &str = "jetcron.control.running.*";

/// What every [`running_probe_subject`] starts with.
pub const RUNNING_PROBE_PREFIX: &str = "jetcron.control.running.";

/// Core-NATS subject on which every executor connection answers with the
/// name of its NATS server: whether a server still reaches the others
/// (`jetcron_io::peer_reach`).
pub const PEER_HELLO: &str = "jetcron.control.hello";

/// Subject asking every executor whether it runs `run_id` now (request/reply:
/// those that do answer). Core NATS, so it works while JetStream elects.
pub fn running_probe_subject(run_id: &str) -> String {
    format!("{RUNNING_PROBE_PREFIX}{run_id}")
}

/// Durable consumer of the executors serving `pool`.
pub fn executor_consumer(pool: &str) -> String {
    format!("executor-{pool}")
}

/// Subject a notification of a run of `job_id` waits on.
pub fn notify_subject(job_id: &str) -> String {
    format!("jetcron.notify.{job_id}")
}

/// What every [`alert_delivery_subject`] starts with (no job's
/// [`notify_subject`] does: namespace `deliver` is reserved).
pub const ALERT_DELIVERY_PREFIX: &str = "jetcron.notify.deliver.";

/// Subject of one alert's delivery to one channel (inside
/// [`NOTIFY_STREAM`]).
pub fn alert_delivery_subject(channel: &str) -> String {
    format!("{ALERT_DELIVERY_PREFIX}{channel}")
}

/// Subject telling every executor to stop `run_id` (request/reply: running
/// executors answer).
pub fn kill_control_subject(run_id: &str) -> String {
    format!("jetcron.control.kill.{run_id}")
}

/// Subject an asynchronous target publishes its result to; it lies inside
/// `JETCRON_RUNS`, so completions are stored with the run's events.
pub fn run_complete_subject(run_id: &str) -> String {
    format!("jetcron.runs.{run_id}.complete")
}

/// Last token of [`run_complete_subject`].
pub const RUN_COMPLETE_TOKEN: &str = "complete";

/// Every [`run_complete_subject`]: what an executor listens on.
pub const RUN_COMPLETE_SUBJECTS: &str = "jetcron.runs.*.complete";

/// The run id of a [`run_complete_subject`].
pub fn run_of_complete_subject(subject: &str) -> Option<&str> {
    subject
        .strip_prefix("jetcron.runs.")?
        .strip_suffix(".complete")
        .filter(|run_id| !run_id.is_empty() && !run_id.contains('.'))
}

/// KV key of the overlap claim of `job_id` (of one shard of it). A job of
/// the default namespace has `claim.<job>[.<shard>]`, as before namespaces;
/// a namespaced one always four tokens, `claim.<ns>.<job>.<shard or all>`,
/// so that `billing.7` and shard 7 of `billing` never share a claim.
pub fn claim_key(job_id: &str, shard: Option<u32>) -> String {
    let namespaced = job_id.contains('.');
    match (shard, namespaced) {
        (None, false) => format!("claim.{job_id}"),
        (None, true) => format!("claim.{job_id}.all"),
        (Some(k), _) => format!("claim.{job_id}.{k}"),
    }
}

/// KV key of the retry-budget ledger of `run_id` (of one shard of it).
pub fn tries_key(run_id: &str, shard: Option<u32>) -> String {
    match shard {
        None => format!("tries.{run_id}"),
        Some(k) => format!("tries.{run_id}.{k}"),
    }
}

/// The keys of every namespace's run slots in `jetcron_running`.
pub const NAMESPACE_SLOT_KEYS: &str = "slot.>";

/// KV key of run slot `index` of `namespace` (a policy's
/// `max_concurrent_runs`).
pub fn namespace_slot_key(namespace: &str, index: u32) -> String {
    format!("slot.{namespace}.{index}")
}

/// The keys of every kill request in `jetcron_running`.
pub const KILL_KEYS: &str = "kill.*";

/// KV key of the kill request of `run_id`.
pub fn kill_key(run_id: &str) -> String {
    format!("kill.{run_id}")
}

/// The run id of a kill request's key ([`kill_key`]), if `key` is one.
pub fn run_of_kill_key(key: &str) -> Option<&str> {
    key.strip_prefix("kill.").filter(|run| !run.contains('.'))
}

/// Where refused definitions are recorded ([`crate::job_events`]); inside
/// `JETCRON_RUNS`, so the projector stores them.
pub const JOB_REJECTED_SUBJECT: &str = "jetcron.jobs.rejected";
/// Where missed fires are recorded ([`crate::job_events`]); inside
/// `JETCRON_RUNS` beside the refused definitions, projected into the same table.
pub const FIRE_MISSED_SUBJECT: &str = "jetcron.jobs.missed";

/// Where the projector parks events it cannot store (kept for people).
pub const DEAD_LETTER_STREAM: &str = "JETCRON_DEADLETTER";
/// Subjects captured by [`DEAD_LETTER_STREAM`].
pub const DEAD_LETTER_SUBJECTS: &str = "jetcron.deadletter.>";

/// Subject a parked event of `original` is kept on.
pub fn dead_letter_subject(original: &str) -> String {
    format!("jetcron.deadletter.{original}")
}

/// ClickHouse database holding run history.
pub const CLICKHOUSE_DATABASE: &str = "jetcron";
/// Append-only table of run events (qualified; a trusted constant, used unescaped in SQL).
pub const RUN_EVENTS_TABLE: &str = "jetcron.run_events";
/// Append-only table of `job.rejected` events.
pub const JOB_EVENTS_TABLE: &str = "jetcron.job_events";

/// Subject a due event for `job_id` in `pool` is published on.
pub fn due_subject(pool: &str, job_id: &str) -> String {
    // Pushed rather than `format!`ed: the ticker builds one per fire.
    const PREFIX: &str = "jetcron.due.";
    let mut subject = String::with_capacity(PREFIX.len() + pool.len() + 1 + job_id.len());
    subject.push_str(PREFIX);
    subject.push_str(pool);
    subject.push('.');
    subject.push_str(job_id);
    subject
}

/// Filter selecting every due event of one pool.
pub fn due_pool_filter(pool: &str) -> String {
    format!("jetcron.due.{pool}.>")
}

/// Subject a run event of kind `event` for `job_id` is published on.
pub fn run_event_subject(job_id: &str, event: &str) -> String {
    format!("jetcron.runs.{job_id}.{event}")
}

/// The job and kind of a run event's subject (`jetcron.runs.<job>.<kind>`,
/// the job's name one token or two).
pub fn run_event_parts(subject: &str) -> Option<(&str, &str)> {
    subject
        .strip_prefix("jetcron.runs.")?
        .rsplit_once('.')
        .filter(|(job, _)| job.matches('.').count() <= 1)
}

/// KV key of a job: its name itself (`export`, `billing.export`; names are
/// restricted to key-safe characters).
pub fn job_key(job_id: &str) -> &str {
    job_id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_event_subjects_come_apart() {
        let subject = run_event_subject("nightly-export", "succeeded");
        assert_eq!(
            run_event_parts(&subject),
            Some(("nightly-export", "succeeded"))
        );
        let namespaced = run_event_subject("billing.export", "failed");
        assert_eq!(namespaced, "jetcron.runs.billing.export.failed");
        assert_eq!(
            run_event_parts(&namespaced),
            Some(("billing.export", "failed"))
        );
        assert_eq!(run_event_parts("jetcron.runs.a.b.c.d"), None);
        assert_eq!(run_event_parts("jetcron.due.default.a"), None);
    }

    #[test]
    fn claims_of_names_and_shards_never_meet() {
        let keys = [
            claim_key("billing", None),
            claim_key("billing", Some(7)),
            claim_key("billing.7", None),
            claim_key("billing.7", Some(7)),
            claim_key("billing.all", None),
        ];
        let distinct: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len(), "{keys:?}");
        assert_eq!(claim_key("export", None), "claim.export");
        assert_eq!(claim_key("export", Some(2)), "claim.export.2");
    }

    #[test]
    fn chains_hear_endings_of_names_of_either_shape() {
        let filters = chain_filter_subjects();
        assert!(filters.contains(&"jetcron.runs.*.succeeded".to_string()));
        assert!(filters.contains(&"jetcron.runs.*.*.succeeded".to_string()));
        assert_eq!(filters.len(), 8);
    }

    #[test]
    fn namespace_doors_name_their_namespace() {
        let subject = namespace_api_subject("billing", "jobs.put");
        assert_eq!(subject, "jetcron.api.ns.billing.jobs.put");
        assert_eq!(namespace_of_api_subject(&subject), Some("billing"));
        assert_eq!(namespace_of_api_subject("jetcron.api.jobs.put"), None);
        assert_eq!(namespace_of_api_subject("jetcron.api.ns..jobs.put"), None);
        assert_eq!(namespace_of_api_subject("jetcron.api.nsx.a.jobs.put"), None);
    }

    #[test]
    fn kill_keys_come_apart() {
        let run = "0b6a1e52-6a0c-5f0e-9d4b-2f1f5f0a9c11";
        assert_eq!(run_of_kill_key(&kill_key(run)), Some(run));
        assert_eq!(run_of_kill_key(&claim_key("job", None)), None);
        assert_eq!(run_of_kill_key("kill.a.b"), None);
    }

    #[test]
    fn completion_subjects_come_apart() {
        let run = "0b6a1e52-6a0c-5f0e-9d4b-2f1f5f0a9c11";
        assert_eq!(
            run_of_complete_subject(&run_complete_subject(run)),
            Some(run)
        );
        assert_eq!(run_of_complete_subject("jetcron.runs..complete"), None);
        assert_eq!(run_of_complete_subject("jetcron.runs.a.b.complete"), None);
        assert_eq!(run_of_complete_subject("jetcron.runs.job.started"), None);
    }

    #[test]
    fn due_subjects_nest_under_the_stream_filter() {
        assert_eq!(due_subject("default", "hello"), "jetcron.due.default.hello");
        assert_eq!(due_pool_filter("gpu"), "jetcron.due.gpu.>");
        assert_eq!(
            run_event_subject("hello", "started"),
            "jetcron.runs.hello.started"
        );
    }
}
