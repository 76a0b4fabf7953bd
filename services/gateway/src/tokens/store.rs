//! The bucket `jetcron_tokens`: one record per token, keyed by its id.

use async_nats::jetstream::kv;
use futures::TryStreamExt as _;
use jetcron_core::api::ApiError;

use super::record::TokenRecord;

/// The tokens bucket.
#[derive(Clone)]
pub struct TokenStore {
    bucket: kv::Store,
}

fn unavailable(e: impl std::error::Error + Send + Sync + 'static) -> ApiError {
    ApiError::unavailable(e)
}

impl TokenStore {
    pub fn new(bucket: kv::Store) -> Self {
        Self { bucket }
    }

    /// Keep a new record (its id must be new).
    pub async fn create(&self, record: &TokenRecord) -> Result<u64, ApiError> {
        let value = serde_json::to_vec(record)
            .map_err(|e| ApiError::internal("encode the token record", e))?;
        self.bucket
            .create(&record.id, value.into())
            .await
            .map_err(unavailable)
    }

    /// The record of token `id`, if it exists (a revoked one does not).
    /// Asked of the bucket's stream leader (not a replica, which may lag),
    /// so a revocation answered is seen by the next request.
    pub async fn get(&self, id: &str) -> Result<Option<TokenRecord>, ApiError> {
        let Some(message) = jetcron_io::kv_entry::last_value(&self.bucket, id)
            .await
            .map_err(unavailable)?
        else {
            return Ok(None);
        };
        // A record that does not read (written by hand) is no token.
        Ok(serde_json::from_slice(&message.payload).ok())
    }

    /// Every token's record, sorted by namespace, then id.
    pub async fn list(&self) -> Result<Vec<TokenRecord>, ApiError> {
        let keys: Vec<String> = match self.bucket.keys().await {
            Ok(keys) => keys.try_collect().await.map_err(unavailable)?,
            Err(e) => return Err(unavailable(e)),
        };
        let mut records = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(record) = self.get(&key).await? {
                records.push(record);
            }
        }
        records.sort_by(|a, b| (&a.namespace, &a.id).cmp(&(&b.namespace, &b.id)));
        Ok(records)
    }

    /// Revoke token `id`: its record is deleted (the bucket's history keeps
    /// that it was).
    pub async fn revoke(&self, id: &str) -> Result<(), ApiError> {
        self.bucket.delete(id).await.map_err(unavailable)
    }
}
