//! What a service needs of the topology, declared as data: each service
//! names its streams and buckets in one list, and
//! [`super::Converging::ensure_needs`] makes or verifies them in that order.

use async_nats::jetstream::{self, kv, stream};

use super::{parts, Result, TopologyOptions};

/// A stream or bucket of jetcron that a service needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// `jetcron_jobs`, the job definitions.
    JobsBucket,
    /// `JETCRON_DUE`, the due events.
    DueStream,
    /// `JETCRON_RUNS`, the run events.
    RunsStream,
    /// `JETCRON_DEAD_LETTER`, run events ClickHouse refused.
    DeadLetterStream,
    /// `JETCRON_NOTIFY`, alerts on their way.
    NotifyStream,
    /// `jetcron_running`, claims, ledgers and kill markers.
    RunningBucket,
    /// `jetcron_channels`, alert channels.
    ChannelsBucket,
    /// `jetcron_incidents`, open alert incidents.
    IncidentsBucket,
    /// `jetcron_tokens`, the scoped API tokens (hashes only).
    TokensBucket,
    /// `jetcron_policies`, the namespaces' target policies.
    PoliciesBucket,
    /// `jetcron_bindings`, who holds which role in a namespace.
    BindingsBucket,
    /// `jetcron_sessions`, the console's sessions.
    SessionsBucket,
    /// `jetcron_users`, local users (password hashes only).
    UsersBucket,
    /// `jetcron_sign_ins`, sign-ins waiting for the identity provider.
    SignInsBucket,
}

/// A part as made: a stream or a bucket.
pub(super) enum Part {
    Stream(stream::Stream),
    Bucket(kv::Store),
}

impl Need {
    /// Make or verify this part.
    pub(super) async fn ensure(
        self,
        js: &jetstream::Context,
        options: &TopologyOptions,
    ) -> Result<Part> {
        Ok(match self {
            Need::JobsBucket => Part::Bucket(parts::ensure_jobs_bucket(js, options).await?),
            Need::DueStream => Part::Stream(parts::ensure_due_stream(js, options).await?),
            Need::RunsStream => Part::Stream(parts::ensure_runs_stream(js, options).await?),
            Need::DeadLetterStream => {
                Part::Stream(parts::ensure_dead_letter_stream(js, options).await?)
            }
            Need::NotifyStream => Part::Stream(parts::ensure_notify_stream(js, options).await?),
            Need::RunningBucket => Part::Bucket(parts::ensure_running_bucket(js, options).await?),
            Need::ChannelsBucket => Part::Bucket(parts::ensure_channels_bucket(js, options).await?),
            Need::IncidentsBucket => {
                Part::Bucket(parts::ensure_incidents_bucket(js, options).await?)
            }
            Need::TokensBucket => Part::Bucket(parts::ensure_tokens_bucket(js, options).await?),
            Need::PoliciesBucket => Part::Bucket(parts::ensure_policies_bucket(js, options).await?),
            Need::BindingsBucket => Part::Bucket(parts::ensure_bindings_bucket(js, options).await?),
            Need::SessionsBucket => Part::Bucket(parts::ensure_sessions_bucket(js, options).await?),
            Need::UsersBucket => Part::Bucket(parts::ensure_users_bucket(js, options).await?),
            Need::SignInsBucket => Part::Bucket(parts::ensure_sign_ins_bucket(js, options).await?),
        })
    }
}

/// The parts a service declared, once made or verified.
#[derive(Default)]
pub struct Ensured {
    streams: Vec<(Need, stream::Stream)>,
    buckets: Vec<(Need, kv::Store)>,
}

impl Ensured {
    pub(super) fn add(&mut self, need: Need, part: Part) {
        match part {
            Part::Stream(stream) => self.streams.push((need, stream)),
            Part::Bucket(bucket) => self.buckets.push((need, bucket)),
        }
    }

    /// The stream of `need`, which the service must have declared.
    pub fn stream(&self, need: Need) -> anyhow::Result<stream::Stream> {
        self.streams
            .iter()
            .find(|(n, _)| *n == need)
            .map(|(_, stream)| stream.clone())
            .ok_or_else(|| anyhow::anyhow!("{need:?} is not a stream this service declared"))
    }

    /// The bucket of `need`, which the service must have declared.
    pub fn bucket(&self, need: Need) -> anyhow::Result<kv::Store> {
        self.buckets
            .iter()
            .find(|(n, _)| *n == need)
            .map(|(_, bucket)| bucket.clone())
            .ok_or_else(|| anyhow::anyhow!("{need:?} is not a bucket this service declared"))
    }
}
