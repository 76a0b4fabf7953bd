//! Writes into a bucket people change (`jetcron_jobs`, `jetcron_bindings`)
//! that say who made them.
//!
//! A KV put is a publish to `$KV.<bucket>.<key>` (a delete, one with
//! `KV-Operation: DEL`), and a compare-and-swap the same publish with
//! `Nats-Expected-Last-Subject-Sequence`: this module makes those
//! publishes itself, so that each carries its author's headers
//! ([`jetcron_core::audit`]). The bucket, its history and every reader see
//! nothing else different.

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::kv::{self, Operation};
use async_nats::HeaderMap;
use bytes::Bytes;
use jetcron_core::audit::Author;

/// Header of a KV delete marker.
const KV_OPERATION: &str = "KV-Operation";
/// Header of a compare-and-swap.
const EXPECTED_LAST_SUBJECT_SEQUENCE: &str = "Nats-Expected-Last-Subject-Sequence";

/// Why a write was not made.
#[derive(Debug)]
pub enum WriteError {
    /// The key was not at the revision expected.
    WrongRevision,
    /// A create found the key holding a value.
    Exists,
    /// NATS did not take it.
    Unavailable(anyhow::Error),
}

/// The writes of one bucket.
#[derive(Clone)]
pub struct AuditedWrites {
    bucket: kv::Store,
    js: async_nats::jetstream::Context,
}

impl AuditedWrites {
    /// Writes into `bucket`, published through `js`.
    pub fn new(bucket: kv::Store, js: async_nats::jetstream::Context) -> Self {
        Self { bucket, js }
    }

    fn subject(&self, key: &str) -> String {
        let prefix = self
            .bucket
            .put_prefix
            .as_deref()
            .unwrap_or(&self.bucket.prefix);
        format!("{prefix}{key}")
    }

    /// Put `value` under `key` whatever it holds; its revision.
    pub async fn put(&self, key: &str, value: Bytes, author: &Author) -> Result<u64, WriteError> {
        self.publish(key, value, headers(author, None, None)).await
    }

    /// Put `value` under `key` if its last revision is `expected`.
    pub async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: u64,
        author: &Author,
    ) -> Result<u64, WriteError> {
        self.publish(key, value, headers(author, Some(expected), None))
            .await
    }

    /// Put `value` under `key` if it holds none (never written, or deleted).
    pub async fn create(
        &self,
        key: &str,
        value: Bytes,
        author: &Author,
    ) -> Result<u64, WriteError> {
        match self.update(key, value.clone(), 0, author).await {
            Err(WriteError::WrongRevision) => {}
            other => return other,
        }
        let entry = self
            .bucket
            .entry(key)
            .await
            .map_err(|e| WriteError::Unavailable(e.into()))?;
        match entry {
            Some(entry) if entry.operation != Operation::Put => {
                self.update(key, value, entry.revision, author).await
            }
            Some(_) => Err(WriteError::Exists),
            None => Err(WriteError::WrongRevision),
        }
    }

    /// A delete marker for `key`, if its last revision is `expected`.
    pub async fn delete(
        &self,
        key: &str,
        expected: u64,
        author: &Author,
    ) -> Result<u64, WriteError> {
        let headers = headers(author, Some(expected), Some("DEL"));
        self.publish(key, Bytes::new(), headers).await
    }

    async fn publish(
        &self,
        key: &str,
        value: Bytes,
        headers: HeaderMap,
    ) -> Result<u64, WriteError> {
        let ack = self
            .js
            .publish_with_headers(self.subject(key), headers, value)
            .await
            .map_err(|e| WriteError::Unavailable(e.into()))?
            .await
            .map_err(|e| match e.kind() {
                PublishErrorKind::WrongLastSequence => WriteError::WrongRevision,
                _ => WriteError::Unavailable(e.into()),
            })?;
        Ok(ack.sequence)
    }
}

/// The headers of a write by `author`: a compare-and-swap when `expected`
/// is given, a delete marker with `operation`.
fn headers(author: &Author, expected: Option<u64>, operation: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in author.headers() {
        headers.insert(name, value.as_str());
    }
    if let Some(expected) = expected {
        headers.insert(
            EXPECTED_LAST_SUBJECT_SEQUENCE,
            expected.to_string().as_str(),
        );
    }
    if let Some(operation) = operation {
        headers.insert(KV_OPERATION, operation);
    }
    headers
}
