//! Local users, for installs without an identity provider: a name and an
//! Argon2id password hash ([`super::passwords`]) per user in the KV bucket
//! `jetcron_users` (key = the name, history kept: who was added, when a
//! password changed, who was removed). `jetcron users add NAME` writes
//! them; the console's sign-in reads the record from the bucket's stream
//! leader, so a removed user's next sign-in is refused. A local user's
//! roles are the bindings of `user:<name>`, like a provider's user.

use async_nats::jetstream::kv;
use chrono::{DateTime, Utc};
use jetcron_core::api::ApiError;
use serde::{Deserialize, Serialize};

/// Longest user name.
pub const MAX_NAME: usize = 64;

/// A local user as the bucket keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserRecord {
    pub name: String,
    /// The PHC string of the password's Argon2id hash.
    pub password: String,
    pub created_at: DateTime<Utc>,
    pub password_changed_at: DateTime<Utc>,
}

/// Why `name` cannot be a local user's name, if it cannot: 1 to 64 of
/// `a-z`, `0-9`, `-`, `_`, and dots between them (it is the bucket key; no
/// `@`, so it is never an e-mail address a provider's user is named by).
pub fn name_refusal(name: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
    if name.is_empty() || name.len() > MAX_NAME {
        return Some(format!("a user name has 1 to {MAX_NAME} characters"));
    }
    if !name
        .split('.')
        .all(|part| !part.is_empty() && part.chars().all(allowed))
    {
        return Some(format!(
            "{name:?}: a user name is lower-case letters, digits, '-' and '_', with dots only between them"
        ));
    }
    None
}

/// A user's record and its revision in the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptUser {
    pub record: UserRecord,
    pub revision: u64,
}

/// The users bucket.
#[derive(Clone)]
pub struct LocalUsers {
    bucket: kv::Store,
}

impl LocalUsers {
    pub fn new(bucket: kv::Store) -> Self {
        Self { bucket }
    }

    /// The record of `name`, if there is one (read from the stream
    /// leader). A name that cannot be a user's, or a value that does not
    /// read (written by hand), is no user.
    pub async fn get(&self, name: &str) -> anyhow::Result<Option<KeptUser>> {
        if name_refusal(name).is_some() {
            return Ok(None);
        }
        let Some(message) = jetcron_io::kv_entry::last_value(&self.bucket, name).await? else {
            return Ok(None);
        };
        Ok(serde_json::from_slice::<UserRecord>(&message.payload)
            .ok()
            .filter(|record| record.name == name)
            .map(|record| KeptUser {
                record,
                revision: message.sequence,
            }))
    }

    /// [`Self::get`] for a request: a bucket that does not answer is 503.
    pub async fn find(&self, name: &str) -> Result<Option<KeptUser>, ApiError> {
        self.get(name).await.map_err(|e| {
            ApiError::unavailable(format!("{}: {e:#}", jetcron_core::subjects::USERS_BUCKET))
        })
    }

    /// Add `record`'s user (refused when the name is taken).
    pub async fn add(&self, record: &UserRecord) -> anyhow::Result<()> {
        let value = serde_json::to_vec(record)?;
        self.bucket
            .create(&record.name, value.into())
            .await
            .map_err(|e| match e.kind() {
                kv::CreateErrorKind::AlreadyExists => {
                    anyhow::anyhow!(
                        "user {:?} exists already (jetcron users passwd changes a password)",
                        record.name
                    )
                }
                _ => anyhow::Error::from(e).context(format!("add user {:?}", record.name)),
            })?;
        Ok(())
    }

    /// Give user `name` the password hash `password` (refused when there
    /// is no such user).
    pub async fn set_password(
        &self,
        name: &str,
        password: String,
        now: DateTime<Utc>,
    ) -> anyhow::Result<()> {
        let entry = self
            .bucket
            .entry(name)
            .await?
            .filter(|e| e.operation == kv::Operation::Put)
            .ok_or_else(|| {
                anyhow::anyhow!("there is no user {name:?} (jetcron users add makes one)")
            })?;
        let mut record: UserRecord = serde_json::from_slice(&entry.value)
            .map_err(|e| anyhow::anyhow!("the record of user {name:?} does not read: {e}"))?;
        record.password = password;
        record.password_changed_at = now;
        self.bucket
            .update(name, serde_json::to_vec(&record)?.into(), entry.revision)
            .await
            .map_err(|e| {
                anyhow::Error::from(e).context(format!("change the password of {name:?}"))
            })?;
        Ok(())
    }

    /// Remove user `name`; whether there was one.
    pub async fn remove(&self, name: &str) -> anyhow::Result<bool> {
        if self.get(name).await?.is_none() {
            return Ok(false);
        }
        self.bucket.delete(name).await?;
        Ok(true)
    }

    /// Every user, by name.
    pub async fn list(&self) -> anyhow::Result<Vec<UserRecord>> {
        use futures::TryStreamExt as _;
        let mut names: Vec<String> = self.bucket.keys().await?.try_collect().await?;
        names.sort();
        let mut users = Vec::with_capacity(names.len());
        for name in names {
            if let Some(user) = self.get(&name).await? {
                users.push(user.record);
            }
        }
        Ok(users)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_keys_and_never_addresses() {
        for good in ["alice", "ops-bot", "a.b", "x_1", &"a".repeat(MAX_NAME)] {
            assert_eq!(name_refusal(good), None, "{good}");
        }
        for bad in [
            "",
            "Alice",
            "alice@corp.example",
            ".alice",
            "alice.",
            "a..b",
            "a b",
            "a*",
            "a>",
            &"a".repeat(MAX_NAME + 1),
        ] {
            assert!(name_refusal(bad).is_some(), "{bad}");
        }
    }
}
