//! The alert channel operations' typed requests and answers
//! (`jetcron.api.channels.put | get | list | delete` and `/v1/channels`),
//! shared by the NATS service, the HTTP handlers and the console.
//!
//! Answers carry the whole definition; the doors hide credentials for open
//! reads ([`StoredChannel::redacted`], [`Channel::redacted`]).

use async_nats::jetstream::kv;
use jetcron_core::channel::{parse_channel, Channel};
use jetcron_core::job::FieldError;
use jetcron_core::time_format::rfc3339_millis;
use serde::{Deserialize, Serialize};

/// `put`: a definition as sent; `key`, the name given by the HTTP path.
#[derive(Debug, Default)]
pub struct PutChannel {
    pub definition: Vec<u8>,
    pub key: Option<String>,
    pub expected_revision: Option<u64>,
}

/// `get` `{"name"}`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetChannel {
    pub name: String,
}

/// `list` `{}`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListChannels {}

/// `delete` `{"name","expected_revision"?}`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteChannel {
    pub name: String,
    pub expected_revision: Option<u64>,
}

/// A stored channel as the API shows it; a value written straight into the
/// bucket that does not validate is listed with its problems.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct StoredChannel {
    pub name: String,
    pub revision: u64,
    pub updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<Channel>,
    pub valid: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<FieldError>,
}

impl StoredChannel {
    pub(super) fn from_entry(entry: kv::Entry) -> Self {
        let parsed = parse_channel(&entry.value, Some(&entry.key));
        Self {
            name: entry.key,
            revision: entry.revision,
            updated_at: rfc3339_millis(entry.created),
            valid: parsed.is_ok(),
            problems: parsed.clone().err().unwrap_or_default(),
            channel: parsed.ok(),
        }
    }

    /// This answer with credentials hidden.
    pub fn redacted(mut self) -> Self {
        self.channel = self.channel.map(|c| c.redacted());
        self
    }
}

/// The answer of `put`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ChannelPutReply {
    pub ok: bool,
    pub channel: Channel,
    pub revision: u64,
    pub created: bool,
}

/// The answer of `get`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ChannelReply {
    pub ok: bool,
    pub channel: StoredChannel,
}

/// The answer of `list`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ChannelsReply {
    pub ok: bool,
    pub channels: Vec<StoredChannel>,
}

/// The answer of `delete`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ChannelDeletedReply {
    pub ok: bool,
    pub name: String,
    pub deleted_revision: u64,
}
