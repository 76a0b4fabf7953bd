//! The API's reply envelope and its one table of error codes.
//!
//! The NATS service and the HTTP gateway answer with the same JSON:
//! `{"ok":true,...}` or `{"ok":false,"error":{"code","message","field","problems"}}`.
//! [`ErrorCode`] maps each failure to one HTTP status and one NATS service
//! error code (`Nats-Service-Error-Code` uses the HTTP number, as the NATS
//! micro-services convention does).

use std::error::Error as StdError;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::job::FieldError;

/// Every way an API call can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request itself is malformed (not JSON, wrong shape).
    InvalidRequest,
    /// The job definition does not validate; `problems` lists why.
    InvalidJob,
    /// No such job or run.
    NotFound,
    /// A concurrent change won (revision mismatch).
    Conflict,
    /// A configured limit would be passed (e.g. the number of jobs).
    LimitExceeded,
    /// The request body is larger than the route accepts.
    TooLarge,
    /// A bearer token is missing or wrong.
    Unauthorized,
    /// The caller's role does not allow this here; `namespace` and `needs`
    /// say where and which role would.
    Forbidden,
    /// A dependency (NATS, ClickHouse) is not reachable.
    Unavailable,
    /// The run history (ClickHouse) did not answer in time or failed; job
    /// definitions and writes are not affected.
    HistoryUnavailable,
    /// A bug or an unexpected failure.
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidJob => "invalid_job",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::LimitExceeded => "limit_exceeded",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::HistoryUnavailable => "history_unavailable",
            ErrorCode::Internal => "internal",
        }
    }

    /// HTTP status, also used as the NATS service error code.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest | ErrorCode::InvalidJob => 400,
            ErrorCode::NotFound => 404,
            ErrorCode::Conflict | ErrorCode::LimitExceeded => 409,
            ErrorCode::TooLarge => 413,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::Unavailable | ErrorCode::HistoryUnavailable => 503,
            ErrorCode::Internal => 500,
        }
    }
}

/// Where a `forbidden` request was refused, and the role it needs there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Refusal {
    /// The namespace (`*`: every one).
    pub namespace: String,
    /// The role it needs there.
    pub needs: String,
}

/// What an error came from, kept for [`std::error::Error::source`] (logs
/// and callers that look at it); the reply carries its text in `message`.
pub type ErrorSource = Arc<dyn StdError + Send + Sync>;

/// The `error` object of a failed reply.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Every problem, when there are field-level ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<FieldError>,
    /// Where a `forbidden` request was refused, and the role it needs
    /// there (`"namespace"`, `"needs"` beside the code).
    #[serde(flatten, default)]
    pub refused: Option<Box<Refusal>>,
    /// The failure underneath (NATS, ClickHouse), not sent.
    #[serde(skip)]
    #[schemars(skip)]
    pub source: Option<ErrorSource>,
}

/// Equal when the replies are: the source is not part of the answer.
impl PartialEq for ApiError {
    fn eq(&self, other: &Self) -> bool {
        (&self.code, &self.message, &self.field, &self.problems)
            == (&other.code, &other.message, &other.field, &other.problems)
    }
}

/// `error` and its causes, outermost first, as one line.
fn chain_text(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        next = cause.source();
    }
    text
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
            problems: Vec::new(),
            refused: None,
            source: None,
        }
    }

    /// A refused definition: the first problem names the field, all are listed.
    pub fn invalid_job(problems: Vec<FieldError>) -> Self {
        let message = problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        let field = problems
            .first()
            .map(|p| p.field.clone())
            .filter(|f| !f.is_empty());
        Self {
            code: ErrorCode::InvalidJob,
            message,
            field,
            problems,
            refused: None,
            source: None,
        }
    }

    /// A request (not a definition) with problems in named fields; the
    /// first names the field, all are listed.
    pub fn invalid_request(problems: Vec<FieldError>) -> Self {
        Self {
            code: ErrorCode::InvalidRequest,
            ..Self::invalid_job(problems)
        }
    }

    /// NATS or ClickHouse could not be reached or did not answer: the
    /// message is `source` with its causes, and `source` is kept.
    pub fn unavailable(source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self::new(ErrorCode::Unavailable, String::new()).caused_by(source)
    }

    /// The run history (ClickHouse) gave no answer: the message is `source`
    /// with its causes, and `source` is kept.
    pub fn history_unavailable(source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self::new(ErrorCode::HistoryUnavailable, String::new()).caused_by(source)
    }

    /// This error with `source` kept as its cause and its text (with its own
    /// causes) as the message.
    pub fn caused_by(mut self, source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        let source: ErrorSource = Arc::from(source.into());
        let text = chain_text(source.as_ref());
        self.message = match self.message.is_empty() {
            true => text,
            false => format!("{}: {text}", self.message),
        };
        self.source = Some(source);
        self
    }

    /// No job (or run) `id`, named in `field`.
    pub fn not_found(field: &str, what: impl std::fmt::Display) -> Self {
        Self {
            field: Some(field.into()),
            ..Self::new(ErrorCode::NotFound, what.to_string())
        }
    }

    /// A bug or an unexpected failure, with what was being done.
    pub fn internal(doing: &str, source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self::new(ErrorCode::Internal, doing).caused_by(source)
    }

    /// A request whose decoding stopped at `e` (its path names the field).
    pub fn undecodable<E: std::fmt::Display>(e: &serde_path_to_error::Error<E>) -> Self {
        let path = e.path().to_string();
        Self {
            field: (path != ".").then_some(path),
            ..Self::new(ErrorCode::InvalidRequest, e.inner().to_string())
        }
    }

    /// A compare-and-swap lost: `field` named the revision that was expected.
    pub fn conflict(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: Some(field.into()),
            ..Self::new(ErrorCode::Conflict, message)
        }
    }

    /// A configured limit would be passed by what `field` asks for.
    pub fn limit_exceeded(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: Some(field.into()),
            ..Self::new(ErrorCode::LimitExceeded, message)
        }
    }

    /// The caller did not prove who it is, or is not allowed.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }

    /// A body larger than a configured limit.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::TooLarge, message)
    }

    /// A request that could not be read at all (a query string, a path
    /// segment, a method): no one field to name.
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// A field-level problem with the request itself (not the definition).
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: Some(field.into()),
            ..Self::new(ErrorCode::InvalidRequest, message)
        }
    }

    /// The reply body: `{"ok":false,"error":{...}}`.
    pub fn to_reply(&self) -> serde_json::Value {
        serde_json::json!({ "ok": false, "error": self })
    }
}

/// The body of every failed reply, for schemas and OpenAPI.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ErrorReply {
    /// Always `false`.
    pub ok: bool,
    pub error: ApiError,
}

/// `text` made safe for a NATS header value: CR and LF become spaces
/// (async-nats refuses them, and user text can contain them).
pub fn header_safe(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl StdError for ApiError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_job_reply_names_the_first_field_and_lists_all() {
        let err = ApiError::invalid_job(vec![
            FieldError::new(
                "schedule",
                "invalid_schedule",
                "expected 5, 6 or 7 fields, got 4",
            ),
            FieldError::new("target.url", "invalid_url", "scheme must be http or https"),
        ]);
        let reply = err.to_reply();
        assert_eq!(reply["ok"], false);
        assert_eq!(reply["error"]["code"], "invalid_job");
        assert_eq!(reply["error"]["field"], "schedule");
        assert_eq!(reply["error"]["problems"][1]["field"], "target.url");
        assert_eq!(
            reply["error"]["message"],
            "schedule: expected 5, 6 or 7 fields, got 4; target.url: scheme must be http or https"
        );
        assert_eq!(ErrorCode::InvalidJob.http_status(), 400);
        assert_eq!(header_safe("a\r\nb"), "a  b");
    }

    #[test]
    fn a_cause_is_kept_and_its_chain_is_the_message() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "read jetcron_jobs")
            }
        }
        impl StdError for Outer {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let error = ApiError::unavailable(Outer(std::io::Error::other("no responders")));
        assert_eq!(error.message, "read jetcron_jobs: no responders");
        assert!(StdError::source(&error).is_some(), "the cause is kept");
        assert_eq!(error.code, ErrorCode::Unavailable);
        let reply = serde_json::to_value(&error).expect("encode");
        assert!(reply.get("source").is_none(), "not sent: {reply}");
        assert_eq!(
            ApiError::internal("encode the answer", "bad float").message,
            "encode the answer: bad float"
        );
    }
}
