//! The author a message of a bucket names in its headers
//! ([`jetcron_core::audit`]): read by the gateway (a job's history, a
//! binding's listing) and by the projector (every revision into
//! ClickHouse) the same way.

use async_nats::HeaderMap;
use jetcron_core::audit::{self, Author};

/// The author `headers` name; [`Author::kv`] when there are none.
pub fn author_in(headers: Option<&HeaderMap>) -> Author {
    let header = |name: &str| {
        headers
            .and_then(|h| h.get(name))
            .map(|value| value.as_str().to_string())
    };
    Author::from_headers(
        header(audit::ACTOR_HEADER).as_deref(),
        header(audit::DOOR_HEADER).as_deref(),
        header(audit::NOTE_HEADER).as_deref(),
    )
}

/// The author of revision `revision` of `bucket` (the headers of its
/// message, read from the stream's leader); `None` when it cannot be read.
pub async fn author_of(bucket: &async_nats::jetstream::kv::Store, revision: u64) -> Option<Author> {
    match bucket.stream.get_raw_message(revision).await {
        Ok(message) => Some(author_in(Some(&message.headers))),
        Err(e) => {
            tracing::debug!(revision, error = %e, "cannot read a revision's author");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_headers_name_the_author_and_none_name_kv() {
        let mut headers = HeaderMap::new();
        headers.insert(audit::ACTOR_HEADER, "token:ab12");
        headers.insert(audit::DOOR_HEADER, "console");
        let author = author_in(Some(&headers));
        assert_eq!(author.actor, "token:ab12");
        assert_eq!(author.door, audit::Door::Console);
        assert_eq!(author_in(None), Author::kv());
    }
}
