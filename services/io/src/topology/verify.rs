//! What exists against what jetcron would make: fewer replicas than asked
//! for, another retention or storage and missing subjects are a mismatch
//! ([`TopologyError::Mismatch`]), named with what differs and how to move
//! on; limits an operator may have tuned are only logged.

use async_nats::jetstream::{self, kv, stream};
use tracing::info;

use super::{is_not_found, Result, TopologyError};

/// What jetcron needs of a stream (or a bucket's stream), beside its name.
#[derive(Debug, Clone)]
pub(super) struct Wanted<'a> {
    /// "stream JETCRON_DUE", "KV bucket jetcron_jobs".
    pub what: String,
    pub config: &'a stream::Config,
    /// Subjects that must be captured (a subset of `config.subjects`).
    pub subjects: Vec<String>,
}

/// Compare an existing stream with what jetcron would create: `Err` with
/// every blocking difference, `Ok` with the tolerated ones.
pub(super) fn check(existing: &stream::Config, wanted: &Wanted<'_>) -> Result<Vec<String>> {
    let want = wanted.config;
    let mut blocking = Vec::new();
    let mut tolerated = Vec::new();
    let replicas = existing.num_replicas.max(1);
    if replicas < want.num_replicas.max(1) {
        blocking.push(format!(
            "{} replica(s), this process wants {} (--replicas / JETCRON_REPLICAS)",
            replicas, want.num_replicas
        ));
    }
    if existing.retention != want.retention {
        blocking.push(format!(
            "retention {:?}, jetcron needs {:?}",
            existing.retention, want.retention
        ));
    }
    if existing.storage != want.storage {
        blocking.push(format!(
            "storage {:?}, jetcron needs {:?}",
            existing.storage, want.storage
        ));
    }
    let missing: Vec<&String> = wanted
        .subjects
        .iter()
        .filter(|s| !existing.subjects.contains(s))
        .collect();
    if !missing.is_empty() {
        blocking.push(format!("no subject {missing:?}"));
    }
    if !want.duplicate_window.is_zero() && existing.duplicate_window < want.duplicate_window {
        tolerated.push(format!(
            "duplicate window {:?} (jetcron makes {:?})",
            existing.duplicate_window, want.duplicate_window
        ));
    }
    if existing.max_age != want.max_age {
        tolerated.push(format!(
            "max age {:?} (jetcron makes {:?})",
            existing.max_age, want.max_age
        ));
    }
    // The server stores "no limit" as -1 where a config says 0.
    let per_subject = |n: i64| (n > 0).then_some(n);
    if per_subject(existing.max_messages_per_subject) != per_subject(want.max_messages_per_subject)
    {
        tolerated.push(format!(
            "{} messages per subject (jetcron makes {})",
            existing.max_messages_per_subject, want.max_messages_per_subject
        ));
    }
    if blocking.is_empty() {
        return Ok(tolerated);
    }
    let replicas_only = blocking.len() == 1 && replicas < want.num_replicas.max(1);
    let how = if replicas_only {
        format!(
            "to give the existing streams and buckets {} replicas run `jetcron migrate --replicas {}` \
             against the cluster (docs/operations.md, \"From one node to three\"), or start this \
             process with --replicas {replicas}",
            want.num_replicas, want.num_replicas
        )
    } else {
        "it was not made by jetcron or by an incompatible version: move it aside \
         (`nats stream rm`, after a backup) or point jetcron at another account"
            .to_string()
    };
    Err(TopologyError::Mismatch(format!(
        "{} exists with settings jetcron cannot use: {}; {how}",
        wanted.what,
        blocking.join("; ")
    )))
}

/// Log what an operator changed (once per process start).
pub(super) fn log_tolerated(what: &str, tolerated: &[String]) {
    if !tolerated.is_empty() {
        info!(what, differences = %tolerated.join("; "), "using existing settings");
    }
}

/// Get `wanted` or create it, then check it.
pub(super) async fn ensure_stream(
    js: &jetstream::Context,
    wanted: Wanted<'_>,
) -> Result<stream::Stream> {
    let stream = match js.get_stream(&wanted.config.name).await {
        Ok(stream) => stream,
        Err(e) if is_not_found(&e) => js
            .create_stream(wanted.config.clone())
            .await
            .map_err(|e| TopologyError::unavailable(format!("create {}", wanted.what), e))?,
        Err(e) => {
            return Err(TopologyError::unavailable(
                format!("look up {}", wanted.what),
                e,
            ))
        }
    };
    let tolerated = check(&stream.cached_info().config, &wanted)?;
    log_tolerated(&wanted.what, &tolerated);
    Ok(stream)
}

/// Get the KV bucket `config.bucket` or create it, then check its stream.
pub(super) async fn ensure_bucket(
    js: &jetstream::Context,
    config: kv::Config,
) -> Result<kv::Store> {
    let what = format!("KV bucket {}", config.bucket);
    let stream_name = format!("KV_{}", config.bucket);
    let store = match js.get_stream(&stream_name).await {
        Ok(_) => js
            .get_key_value(&config.bucket)
            .await
            .map_err(|e| TopologyError::unavailable(format!("open {what}"), e))?,
        Err(e) if is_not_found(&e) => js
            .create_key_value(config.clone())
            .await
            .map_err(|e| TopologyError::unavailable(format!("create {what}"), e))?,
        Err(e) => return Err(TopologyError::unavailable(format!("look up {what}"), e)),
    };
    let wanted_config = stream::Config {
        name: stream_name,
        subjects: vec![format!("$KV.{}.>", config.bucket)],
        num_replicas: config.num_replicas,
        storage: config.storage,
        max_age: config.max_age,
        max_messages_per_subject: config.history,
        ..Default::default()
    };
    let wanted = Wanted {
        what: what.clone(),
        subjects: wanted_config.subjects.clone(),
        config: &wanted_config,
    };
    let tolerated = check(&store.stream.cached_info().config, &wanted)?;
    log_tolerated(&what, &tolerated);
    Ok(store)
}

impl<'a> Wanted<'a> {
    /// A stream that must capture every subject of its configuration.
    pub(super) fn stream(config: &'a stream::Config) -> Self {
        Self {
            what: format!("stream {}", config.name),
            subjects: config.subjects.clone(),
            config,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn due(replicas: usize) -> stream::Config {
        stream::Config {
            name: "JETCRON_DUE".into(),
            subjects: vec!["jetcron.due.>".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            duplicate_window: Duration::from_secs(600),
            num_replicas: replicas,
            ..Default::default()
        }
    }

    #[test]
    fn the_same_settings_pass_and_more_replicas_are_fine() {
        let wanted = due(3);
        assert_eq!(
            check(&due(3), &Wanted::stream(&wanted)).expect("same"),
            Vec::<String>::new()
        );
        let one = due(1);
        assert!(
            check(&due(3), &Wanted::stream(&one)).is_ok(),
            "R3 serves an R1 process"
        );
    }

    #[test]
    fn fewer_replicas_than_asked_for_name_the_migration() {
        let wanted = due(3);
        let err = check(&due(1), &Wanted::stream(&wanted)).expect_err("R1 is not R3");
        let text = err.to_string();
        assert!(
            text.starts_with("stream JETCRON_DUE exists with settings jetcron cannot use: 1 replica(s), this process wants 3"),
            "{text}"
        );
        assert!(text.contains("jetcron migrate --replicas 3"), "{text}");
        assert!(matches!(err, TopologyError::Mismatch(_)));
    }

    #[test]
    fn another_retention_or_missing_subjects_block_and_limits_are_tolerated() {
        let wanted = due(1);
        let mut limits = due(1);
        limits.retention = stream::RetentionPolicy::Limits;
        limits.subjects = vec!["other.>".into()];
        let text = check(&limits, &Wanted::stream(&wanted))
            .expect_err("not a work queue")
            .to_string();
        assert!(
            text.contains("retention Limits, jetcron needs WorkQueue"),
            "{text}"
        );
        assert!(text.contains("no subject [\"jetcron.due.>\"]"), "{text}");
        assert!(text.contains("not made by jetcron"), "{text}");

        let mut tuned = due(1);
        tuned.duplicate_window = Duration::from_secs(2);
        tuned.max_age = Duration::from_secs(3600);
        let tolerated = check(&tuned, &Wanted::stream(&wanted)).expect("tuned limits are fine");
        assert_eq!(tolerated.len(), 2, "{tolerated:?}");
    }
}
