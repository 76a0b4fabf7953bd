//! Who changed what: the author of a revision of a job.
//!
//! The bucket's history is the audit log, and NATS records no author; so
//! the gateway writes each revision with headers naming who wrote it
//! ([`ACTOR_HEADER`]) and through which door ([`DOOR_HEADER`]), and for a
//! scoped token its description ([`NOTE_HEADER`]). A revision without them
//! was written straight into the bucket (`nats kv put`): its author is
//! [`Author::kv`]. Whoever may publish into the bucket could write these
//! headers too, so they name the gateway's callers faithfully and a direct
//! writer's claim only as far as the bucket's permissions trust it
//! (docs/security.md).

use serde::{Deserialize, Serialize};

/// Who wrote a revision: `token:<id>`, `admin-token`, `console`, `nats`,
/// `nats:<namespace>` (a namespace's door), `kv`.
pub const ACTOR_HEADER: &str = "Jetcron-Actor";
/// Through which door: `http`, `nats`, `console` (absent: `kv`).
pub const DOOR_HEADER: &str = "Jetcron-Door";
/// What the actor is, where there is more to say (a token's description).
pub const NOTE_HEADER: &str = "Jetcron-Actor-Note";

/// The actor of a revision written without the gateway.
pub const KV_ACTOR: &str = "kv";

/// Longest actor or note kept; longer ones are cut (a header written by
/// hand may be anything).
const MAX_TEXT: usize = 256;

/// The door a write came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Door {
    /// The HTTP API.
    Http,
    /// The NATS API (`jetcron.api.…`, a namespace's door included).
    Nats,
    /// The web console.
    Console,
    /// Straight into the bucket.
    Kv,
}

impl Door {
    pub fn as_str(self) -> &'static str {
        match self {
            Door::Http => "http",
            Door::Nats => "nats",
            Door::Console => "console",
            Door::Kv => "kv",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [Door::Http, Door::Nats, Door::Console, Door::Kv]
            .into_iter()
            .find(|door| door.as_str() == text)
    }
}

/// The author of one revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Author {
    /// `token:<id>`, `admin-token`, `console`, `nats`, `nats:<namespace>`, `kv`.
    pub actor: String,
    pub door: Door,
    /// A token's description, when the actor is a token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Author {
    /// A revision written straight into the bucket.
    pub fn kv() -> Self {
        Self {
            actor: KV_ACTOR.into(),
            door: Door::Kv,
            note: None,
        }
    }

    /// The author a revision's headers name (each as read, absent as
    /// `None`); [`Author::kv`] when they name no actor.
    pub fn from_headers(actor: Option<&str>, door: Option<&str>, note: Option<&str>) -> Self {
        let Some(actor) = actor.map(clean).filter(|a| !a.is_empty()) else {
            return Self::kv();
        };
        Self {
            actor,
            door: door.and_then(Door::parse).unwrap_or(Door::Kv),
            note: note.map(clean).filter(|n| !n.is_empty()),
        }
    }

    /// The headers that name this author: (name, value) pairs.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            (ACTOR_HEADER, clean(&self.actor)),
            (DOOR_HEADER, self.door.as_str().to_string()),
        ];
        if let Some(note) = &self.note {
            headers.push((NOTE_HEADER, clean(note)));
        }
        headers
    }
}

/// `text` without control characters, at most [`MAX_TEXT`] characters.
fn clean(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(MAX_TEXT)
        .collect::<String>()
        .trim()
        .to_string()
}

/// The `kind` of a revision that stores a definition.
pub const JOB_CHANGED_KIND: &str = "job.changed";
/// The `kind` of a delete (or purge) marker.
pub const JOB_DELETED_KIND: &str = "job.deleted";

/// Names the event of each (key, revision): the same revision read twice
/// is one event.
const CHANGE_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x6a0b_33c1_52e4_4d8e_9f31_0c2d_7ab4_11e6);

/// One revision of a job, as the audit records it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobChange {
    /// The job's name (its key).
    pub key: String,
    pub revision: u64,
    /// When the server stored it.
    pub at: chrono::DateTime<chrono::Utc>,
    /// A delete or purge marker.
    pub deleted: bool,
    /// Bytes of the value.
    pub size: u64,
    pub author: Author,
}

impl JobChange {
    pub fn kind(&self) -> &'static str {
        match self.deleted {
            true => JOB_DELETED_KIND,
            false => JOB_CHANGED_KIND,
        }
    }

    /// Derived from (key, revision).
    pub fn event_id(&self) -> String {
        let name = format!("{}\n{}", self.key, self.revision);
        uuid::Uuid::new_v5(&CHANGE_NAMESPACE, name.as_bytes()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_author_goes_through_headers_and_back() {
        let author = Author {
            actor: "token:abc".into(),
            door: Door::Http,
            note: Some("billing CI".into()),
        };
        let headers = author.headers();
        let find = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
        };
        let read = Author::from_headers(find(ACTOR_HEADER), find(DOOR_HEADER), find(NOTE_HEADER));
        assert_eq!(read, author);
    }

    #[test]
    fn without_an_actor_it_was_written_straight_into_the_bucket() {
        assert_eq!(Author::from_headers(None, Some("http"), None), Author::kv());
        assert_eq!(Author::from_headers(Some(" "), None, None), Author::kv());
        let forged = Author::from_headers(Some("x\r\ny"), Some("door?"), Some(""));
        assert_eq!(forged.actor, "xy");
        assert_eq!(forged.door, Door::Kv);
        assert_eq!(forged.note, None);
    }
}
