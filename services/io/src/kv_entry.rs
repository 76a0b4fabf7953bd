//! What a message of a KV bucket's stream does to its key, and a key's
//! last message read from the stream's leader (not a replica, which may
//! lag: a revocation or a removal answered is seen by the next read).

use async_nats::jetstream::kv::{self, Operation};
use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::{LastRawMessageError, LastRawMessageErrorKind};
use async_nats::HeaderMap;

/// What a message with `headers` does to its key: a value (no header, or
/// `KV-Operation: PUT`), a delete or a purge (the header, or a marker the
/// server left); `None` for an operation no client writes.
pub fn operation_in(headers: Option<&HeaderMap>) -> Option<Operation> {
    let Some(headers) = headers else {
        return Some(Operation::Put);
    };
    if let Some(operation) = headers.get("KV-Operation") {
        return operation.as_str().parse().ok();
    }
    match headers
        .get(async_nats::header::NATS_MARKER_REASON)
        .map(|reason| reason.as_str())
    {
        None => Some(Operation::Put),
        Some("MaxAge" | "Purge") => Some(Operation::Purge),
        Some("Remove") => Some(Operation::Delete),
        Some(_) => None,
    }
}

/// The last message of `key` in `bucket` when it holds a value (its
/// payload, revision, time and headers); `None` when the key was never
/// written, or was deleted or purged last.
pub async fn last_value(
    bucket: &kv::Store,
    key: &str,
) -> Result<Option<StreamMessage>, LastRawMessageError> {
    let subject = format!("{}{key}", bucket.prefix);
    match bucket
        .stream
        .get_last_raw_message_by_subject(&subject)
        .await
    {
        Ok(message) if operation_in(Some(&message.headers)) == Some(Operation::Put) => {
            Ok(Some(message))
        }
        Ok(_) => Ok(None),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(e),
    }
}
