//! The alert channel operations on the `jetcron_channels` bucket: each one
//! function from a typed request to a typed answer or an [`ApiError`]
//! ([`super::requests`]). A put is checked by
//! [`jetcron_core::channel::parse_channel`], so a refused definition names
//! its field and stores nothing; an optional `expected_revision` makes it a
//! compare-and-swap (0: create only); the placeholders of a redacted read
//! written back stand for the stored credentials.

use async_nats::jetstream::kv::{self, Operation};
use futures::TryStreamExt as _;
use jetcron_core::api::ApiError;
use jetcron_core::channel::{parse_channel, restore_redacted, REDACTED};
use jetcron_core::job::validate_token;

use super::requests::{
    ChannelDeletedReply, ChannelPutReply, ChannelReply, ChannelsReply, DeleteChannel, GetChannel,
    ListChannels, PutChannel, StoredChannel,
};

/// The channels bucket.
#[derive(Clone)]
pub struct ChannelStore {
    bucket: kv::Store,
}

fn unavailable(e: impl std::error::Error + Send + Sync + 'static) -> ApiError {
    ApiError::unavailable(e)
}

fn checked_name(name: &str) -> Result<(), ApiError> {
    validate_token("name", name).map_err(|p| ApiError::invalid_field("name", p.message))
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found("name", format!("no channel {name:?}"))
}

impl ChannelStore {
    pub fn new(bucket: kv::Store) -> Self {
        Self { bucket }
    }

    /// Store a definition (checked first; nothing is stored when it is refused).
    pub async fn put(&self, request: PutChannel) -> Result<ChannelPutReply, ApiError> {
        let (definition, in_body) =
            crate::request_body::split_expected_revision(&request.definition)?;
        let expected_revision = request.expected_revision.or(in_body);
        let body = definition.as_deref().unwrap_or(&request.definition);
        let restored = self.restore_redacted(body, request.key.as_deref()).await?;
        let body = restored.as_deref().unwrap_or(body);
        let channel =
            parse_channel(body, request.key.as_deref()).map_err(ApiError::invalid_request)?;
        let name = channel.name().to_string();
        let value: bytes::Bytes = serde_json::to_vec(&channel)
            .map_err(|e| ApiError::internal("encode the channel", e))?
            .into();
        let existed = match expected_revision {
            Some(0) => false,
            Some(_) => true,
            None => self
                .bucket
                .entry(&name)
                .await
                .map_err(unavailable)?
                .is_some_and(|e| e.operation == Operation::Put),
        };
        let revision = match expected_revision {
            None => self.bucket.put(&name, value).await.map_err(unavailable)?,
            Some(0) => self
                .bucket
                .create(&name, value)
                .await
                .map_err(|e| match e.kind() {
                    kv::CreateErrorKind::AlreadyExists => ApiError::conflict(
                        "expected_revision",
                        format!("channel {name:?} exists already"),
                    ),
                    _ => unavailable(e),
                })?,
            Some(expected) => {
                self.bucket
                    .update(&name, value, expected)
                    .await
                    .map_err(|e| match e.kind() {
                        kv::UpdateErrorKind::WrongLastRevision => ApiError::conflict(
                            "expected_revision",
                            format!("channel {name:?} is no longer at revision {expected}"),
                        ),
                        _ => unavailable(e),
                    })?
            }
        };
        Ok(ChannelPutReply {
            ok: true,
            // The writer knows what it sent; the answer may be logged.
            channel: channel.redacted(),
            revision,
            created: !existed,
        })
    }

    /// `body` with the stored credentials back in place of the placeholders
    /// of a redacted read ([`restore_redacted`]); `None` when it has none.
    async fn restore_redacted(
        &self,
        body: &[u8],
        key: Option<&str>,
    ) -> Result<Option<Vec<u8>>, ApiError> {
        if !body
            .windows(REDACTED.len())
            .any(|w| w == REDACTED.as_bytes())
        {
            return Ok(None);
        }
        // Not JSON: the parse below says so.
        let Ok(mut incoming) = serde_json::from_slice::<serde_json::Value>(body) else {
            return Ok(None);
        };
        let name = incoming
            .get("name")
            .and_then(|n| n.as_str())
            .or(key)
            .unwrap_or_default()
            .to_string();
        let stored = match validate_token("name", &name) {
            Ok(()) => self
                .bucket
                .entry(&name)
                .await
                .map_err(unavailable)?
                .filter(|e| e.operation == Operation::Put)
                .and_then(|e| serde_json::from_slice::<serde_json::Value>(&e.value).ok()),
            Err(_) => None,
        };
        restore_redacted(&mut incoming, stored.as_ref()).map_err(ApiError::invalid_request)?;
        serde_json::to_vec(&incoming)
            .map(Some)
            .map_err(|e| ApiError::internal("encode the channel", e))
    }

    pub async fn get(&self, request: GetChannel) -> Result<ChannelReply, ApiError> {
        checked_name(&request.name)?;
        let entry = self
            .bucket
            .entry(&request.name)
            .await
            .map_err(unavailable)?
            .filter(|e| e.operation == Operation::Put)
            .ok_or_else(|| not_found(&request.name))?;
        Ok(ChannelReply {
            ok: true,
            channel: StoredChannel::from_entry(entry),
        })
    }

    /// Every channel, by name.
    pub async fn list(&self, _request: ListChannels) -> Result<ChannelsReply, ApiError> {
        let mut names: Vec<String> = self
            .bucket
            .keys()
            .await
            .map_err(unavailable)?
            .try_collect()
            .await
            .map_err(unavailable)?;
        names.sort();
        let mut channels = Vec::with_capacity(names.len());
        for name in names {
            if let Some(entry) = self
                .bucket
                .entry(&name)
                .await
                .map_err(unavailable)?
                .filter(|e| e.operation == Operation::Put)
            {
                channels.push(StoredChannel::from_entry(entry));
            }
        }
        Ok(ChannelsReply { ok: true, channels })
    }

    /// Delete a channel (a delete marker: its history stays).
    pub async fn delete(&self, request: DeleteChannel) -> Result<ChannelDeletedReply, ApiError> {
        checked_name(&request.name)?;
        let current = self
            .bucket
            .entry(&request.name)
            .await
            .map_err(unavailable)?
            .filter(|e| e.operation == Operation::Put)
            .ok_or_else(|| not_found(&request.name))?
            .revision;
        let expected = request.expected_revision.unwrap_or(current);
        self.bucket
            .delete_expect_revision(&request.name, Some(expected))
            .await
            .map_err(|e| match e.kind() {
                kv::DeleteErrorKind::WrongLastRevision => ApiError::conflict(
                    "expected_revision",
                    format!(
                        "channel {:?} is no longer at revision {expected}",
                        request.name
                    ),
                ),
                _ => unavailable(e),
            })?;
        Ok(ChannelDeletedReply {
            ok: true,
            name: request.name,
            deleted_revision: expected,
        })
    }
}
