//! Each stream and bucket of jetcron, as it makes it.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use jetcron_core::subjects;
use tracing::warn;

use super::verify::{check, ensure_bucket, ensure_stream, log_tolerated, Wanted};
use super::{is_not_found, Result, TopologyError, TopologyOptions};

/// The job definitions bucket.
///
/// Made as the stream `nats kv add` would make (`KV_jetcron_jobs` on
/// `$KV.jetcron_jobs.>`, one message per revision, direct gets), except that
/// it refuses rollups and purges: the bucket's history is the audit log, so
/// `nats kv purge` (a rollup) and `nats stream purge` are refused for every
/// user; `nats kv del` leaves a delete marker and the history stays. An admin
/// who must erase a definition edits the stream first. A bucket made by an
/// older jetcron (with rollups allowed) is used as it is.
pub async fn ensure_jobs_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    let config = jobs_bucket_stream(options);
    let what = format!("KV bucket {}", subjects::JOBS_BUCKET);
    let wanted = Wanted {
        what: what.clone(),
        subjects: config.subjects.clone(),
        config: &config,
    };
    ensure_stream(js, wanted).await?;
    js.get_key_value(subjects::JOBS_BUCKET)
        .await
        .map_err(|e| TopologyError::unavailable(format!("open {what}"), e))
}

/// The stream of the jobs bucket: KV conventions, no rollup, no purge.
fn jobs_bucket_stream(options: &TopologyOptions) -> stream::Config {
    stream::Config {
        name: format!("KV_{}", subjects::JOBS_BUCKET),
        description: Some(
            "jetcron job definitions (key = job id); history is the audit log".into(),
        ),
        subjects: vec![format!("$KV.{}.>", subjects::JOBS_BUCKET)],
        max_messages_per_subject: options.jobs_history.max(1),
        // The server refuses bigger values, `nats kv put` included.
        max_message_size: jetcron_core::job::MAX_DEFINITION_BYTES as i32,
        storage: stream::StorageType::File,
        num_replicas: options.replicas.max(1),
        discard: stream::DiscardPolicy::New,
        allow_direct: true,
        allow_rollup: false,
        deny_delete: true,
        deny_purge: true,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    }
}

/// The tickers' coordination bucket: one key per shard (owner, lease,
/// watermark) and one per live replica. History 1: only the latest matters.
pub async fn ensure_ticker_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    ensure_bucket(
        js,
        kv::Config {
            bucket: subjects::TICKER_BUCKET.to_string(),
            description: "jetcron ticker shard leases and fired-up-to watermarks".into(),
            history: 1,
            storage: stream::StorageType::File,
            num_replicas: options.replicas.max(1),
            ..Default::default()
        },
    )
    .await
}

/// The tickers' snapshots: one object per shard holding its jobs in their
/// held form, read by a replica taking the shard over instead of the whole
/// jobs bucket (`jetcron_ticker::snapshot`). Each write replaces the
/// shard's object; nothing else is kept.
pub async fn ensure_ticker_snapshots(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<jetstream::object_store::ObjectStore> {
    let bucket = subjects::TICKER_SNAPSHOTS_BUCKET;
    let what = format!("object store {bucket}");
    let stream_name = format!("OBJ_{bucket}");
    let existing = match js.get_stream(&stream_name).await {
        Ok(stream) => stream.cached_info().config.clone(),
        Err(e) if is_not_found(&e) => {
            return js
                .create_object_store(jetstream::object_store::Config {
                    bucket: bucket.to_string(),
                    description: Some(
                        "jetcron ticker: each shard's jobs, for the replica that takes it over"
                            .into(),
                    ),
                    storage: stream::StorageType::File,
                    num_replicas: options.replicas.max(1),
                    ..Default::default()
                })
                .await
                .map_err(|e| TopologyError::unavailable(format!("create {what}"), e));
        }
        Err(e) => return Err(TopologyError::unavailable(format!("look up {what}"), e)),
    };
    // An object store's stream as the client makes it: chunks and metadata.
    let wanted_config = stream::Config {
        name: stream_name,
        subjects: vec![format!("$O.{bucket}.C.>"), format!("$O.{bucket}.M.>")],
        num_replicas: options.replicas.max(1),
        storage: stream::StorageType::File,
        ..Default::default()
    };
    let wanted = Wanted {
        what: what.clone(),
        subjects: wanted_config.subjects.clone(),
        config: &wanted_config,
    };
    let tolerated = check(&existing, &wanted)?;
    log_tolerated(&what, &tolerated);
    js.get_object_store(bucket)
        .await
        .map_err(|e| TopologyError::unavailable(format!("open {what}"), e))
}

/// The due events stream: a work queue, each due event consumed once per pool.
pub async fn ensure_due_stream(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<stream::Stream> {
    let config = stream::Config {
        name: subjects::DUE_STREAM.to_string(),
        description: Some("jetcron due events: one per (job, scheduled time)".into()),
        subjects: vec![subjects::DUE_SUBJECTS.to_string()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: options.due_duplicate_window,
        num_replicas: options.replicas.max(1),
        ..Default::default()
    };
    ensure_stream(js, Wanted::stream(&config)).await
}

/// The run events stream, read by the projector (and anyone curious); it
/// also holds the job events `job.rejected` and `fire.missed`. A stream made
/// by an older jetcron, without those subjects, gets them added.
pub async fn ensure_runs_stream(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<stream::Stream> {
    let config = stream::Config {
        name: subjects::RUNS_STREAM.to_string(),
        description: Some("jetcron run events (every step of every run) and job.rejected".into()),
        subjects: [
            subjects::RUNS_SUBJECTS,
            subjects::JOB_REJECTED_SUBJECT,
            subjects::FIRE_MISSED_SUBJECT,
        ]
        .iter()
        .map(ToString::to_string)
        .collect(),
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        max_age: options.runs_max_age,
        duplicate_window: Duration::from_secs(120),
        num_replicas: options.replicas.max(1),
        ..Default::default()
    };
    // Only the run events are required; the job events' subjects are added
    // below when missing (an older jetcron made the stream).
    let wanted = Wanted {
        what: format!("stream {}", subjects::RUNS_STREAM),
        subjects: vec![subjects::RUNS_SUBJECTS.to_string()],
        config: &config,
    };
    let stream = ensure_stream(js, wanted).await?;
    let mut existing = stream.cached_info().config.clone();
    let missing: Vec<String> = config
        .subjects
        .iter()
        .filter(|w| !existing.subjects.contains(w))
        .cloned()
        .collect();
    if !missing.is_empty() {
        existing.subjects.extend(missing.iter().cloned());
        // Needs STREAM.UPDATE, which only the admin role has (infra/nats):
        // without it the stream works as before, and the events of the
        // missing subjects are refused until an admin starts a service once.
        if let Err(e) = js.update_stream(existing).await {
            warn!(
                stream = subjects::RUNS_STREAM,
                missing = ?missing,
                error = %e,
                "cannot add subjects to the stream; start any jetcron service once as admin"
            );
        }
    }
    Ok(stream)
}

/// Events the projector could not store, with the reason in a header.
pub async fn ensure_dead_letter_stream(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<stream::Stream> {
    let config = stream::Config {
        name: subjects::DEAD_LETTER_STREAM.to_string(),
        description: Some("jetcron events the projector could not store, and why".into()),
        subjects: vec![subjects::DEAD_LETTER_SUBJECTS.to_string()],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        max_age: Duration::from_secs(30 * 86_400),
        duplicate_window: Duration::from_secs(120),
        num_replicas: options.replicas.max(1),
        ..Default::default()
    };
    ensure_stream(js, Wanted::stream(&config)).await
}

/// Runs in progress: overlap claims and kill requests. Claims carry their own
/// expiry (refreshed while the run goes on); the bucket's age limit only
/// sweeps what nobody will read again.
pub async fn ensure_running_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    let config = kv::Config {
        max_age: options.running_max_age,
        ..passing_bucket(
            subjects::RUNNING_BUCKET,
            "jetcron runs in progress: overlap claims and kill requests",
            options,
        )
    };
    ensure_bucket(js, config).await
}

/// The alert channels bucket (key = channel name), history kept like the
/// jobs bucket's so a changed channel can be traced.
pub async fn ensure_channels_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    let config = traced_bucket(
        subjects::CHANNELS_BUCKET,
        "jetcron alert channels (key = channel name)",
        jetcron_core::channel::MAX_CHANNEL_BYTES,
        options,
    );
    ensure_bucket(js, config).await
}

/// The scoped API tokens (key = token id; a record with the hash of the
/// secret, never the secret), history kept like the jobs bucket's so who
/// made and revoked which token can be traced.
pub async fn ensure_tokens_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    let config = traced_bucket(
        subjects::TOKENS_BUCKET,
        "jetcron scoped API tokens (key = token id; secret hashes only)",
        4096,
        options,
    );
    ensure_bucket(js, config).await
}

/// The namespaces' target policies (key = namespace), history kept like
/// the jobs bucket's: who narrowed or widened a team's reach is traced.
pub async fn ensure_policies_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    let config = traced_bucket(
        subjects::POLICIES_BUCKET,
        "jetcron target policies (key = namespace)",
        jetcron_core::policy::MAX_POLICY_BYTES,
        options,
    );
    ensure_bucket(js, config).await
}

/// Role bindings (key = `<namespace or _all>.<user|group>.<digest>`),
/// history kept: who was given which role, by whom, is traced.
pub async fn ensure_bindings_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    let config = traced_bucket(
        subjects::BINDINGS_BUCKET,
        "jetcron role bindings (people and groups per namespace)",
        4096,
        options,
    );
    ensure_bucket(js, config).await
}

/// Local users (key = user name; the record holds an Argon2id hash of the
/// password, never the password), history kept like the tokens': who
/// was added and when a password changed is traced.
pub async fn ensure_users_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    let config = traced_bucket(
        subjects::USERS_BUCKET,
        "jetcron local users (key = name; password hashes only)",
        4096,
        options,
    );
    ensure_bucket(js, config).await
}

/// The console's sessions (key = the SHA-256 of a session id; the record
/// says who signed in, the CSRF token, when it began and was last used).
/// One value per key; the age limit sweeps sessions nobody ended, none of
/// which outlives [`SESSIONS_MAX_AGE`] (the gateways check their own,
/// shorter timeouts on every request).
pub async fn ensure_sessions_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    let config = kv::Config {
        max_age: SESSIONS_MAX_AGE,
        // A person's session lists their groups (at most 200 names).
        max_value_size: 64 * 1024,
        ..passing_bucket(
            subjects::SESSIONS_BUCKET,
            "jetcron console sessions (key = SHA-256 of the session id)",
            options,
        )
    };
    ensure_bucket(js, config).await
}

/// Sign-ins waiting for the identity provider's redirect back: gone after
/// [`SIGN_INS_MAX_AGE`] whether taken or not, and at most
/// [`SIGN_INS_MAX_BYTES`] in all (anyone may begin a sign-in, so a flood
/// of them must not fill the server's storage: past the cap new ones are
/// refused until old ones age out).
pub async fn ensure_sign_ins_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    let config = kv::Config {
        max_age: SIGN_INS_MAX_AGE,
        max_bytes: SIGN_INS_MAX_BYTES,
        max_value_size: 4096,
        ..passing_bucket(
            subjects::SIGN_INS_BUCKET,
            "jetcron sign-ins waiting for the identity provider",
            options,
        )
    };
    ensure_bucket(js, config).await
}

/// How long a sign-in may take at the identity provider.
pub const SIGN_INS_MAX_AGE: Duration = Duration::from_secs(600);
/// The most bytes all waiting sign-ins may hold.
pub const SIGN_INS_MAX_BYTES: i64 = 64 * 1024 * 1024;

/// The longest a console session may last.
pub const SESSIONS_MAX_AGE: Duration = Duration::from_secs(7 * 86_400);

/// A bucket of state that passes (claims, incidents, sessions): one value
/// per key, no history, on file, at the deployment's replica count.
fn passing_bucket(bucket: &str, description: &str, options: &TopologyOptions) -> kv::Config {
    kv::Config {
        bucket: bucket.to_string(),
        description: description.into(),
        history: 1,
        storage: stream::StorageType::File,
        num_replicas: options.replicas.max(1),
        ..Default::default()
    }
}

/// A bucket of definitions people change (channels, tokens, policies, bindings): on file, at
/// the deployment's replica count, with the jobs bucket's history.
fn traced_bucket(
    bucket: &str,
    description: &str,
    max_value_size: usize,
    options: &TopologyOptions,
) -> kv::Config {
    kv::Config {
        bucket: bucket.to_string(),
        description: description.into(),
        history: options.jobs_history.clamp(1, 64),
        max_value_size: i32::try_from(max_value_size).unwrap_or(i32::MAX),
        storage: stream::StorageType::File,
        num_replicas: options.replicas.max(1),
        ..Default::default()
    }
}

/// Open alert incidents (key = `<job id>.<rule>`): one value each, kept
/// until the job recovers.
pub async fn ensure_incidents_bucket(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<kv::Store> {
    let config = passing_bucket(
        subjects::INCIDENTS_BUCKET,
        "jetcron open alert incidents (key = <job id>.<rule>)",
        options,
    );
    ensure_bucket(js, config).await
}

/// Failure notifications waiting for delivery: a work queue, so a webhook
/// that is down gets JetStream's redelivery with backoff like a due event.
pub async fn ensure_notify_stream(
    js: &jetstream::Context,
    options: &TopologyOptions,
) -> Result<stream::Stream> {
    let config = stream::Config {
        name: subjects::NOTIFY_STREAM.to_string(),
        description: Some("jetcron failure notifications waiting for delivery".into()),
        subjects: vec![subjects::NOTIFY_SUBJECTS.to_string()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: options.due_duplicate_window,
        max_age: options.runs_max_age,
        num_replicas: options.replicas.max(1),
        ..Default::default()
    };
    ensure_stream(js, Wanted::stream(&config)).await
}
