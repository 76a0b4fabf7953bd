//! What every page shares: the frame (title, navigation, sign-in state,
//! notice), rendering a template into a response, the error and sign-in
//! pages, and how times and durations read on a page.

use askama::Template;
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, Utc};

/// The parts of the layout every page fills.
#[derive(Debug, Clone, Default)]
pub struct Frame {
    pub title: String,
    pub signed_in: bool,
    /// The page offers what an operator does (pause, trigger, kill…).
    pub may_operate: bool,
    /// The page offers what an editor does (new job, edit, delete).
    pub may_edit: bool,
    /// A scoped session's role, shown beside sign-out (`editor of billing`).
    pub who: String,
    /// The viewer administers a namespace (the Access page).
    pub may_admin: bool,
    /// The session's CSRF token, put in every form.
    pub csrf: String,
    /// What the last action did (from a fixed list: never text from a URL).
    pub notice: String,
}

impl Frame {
    /// A frame for pages shown before the viewer is known.
    pub fn plain(title: &str) -> Self {
        Self {
            title: title.to_string(),
            ..Self::default()
        }
    }

    /// This frame with the notice a `done` code stands for.
    pub fn with_done(mut self, done: Option<&str>) -> Self {
        self.notice = match done.unwrap_or_default() {
            "saved" => "Saved.",
            "created" => "Created.",
            "paused" => "Paused.",
            "resumed" => "Resumed.",
            "triggered" => "Triggered: the run starts in a moment.",
            "backfilled" => "Backfill queued.",
            "deleted" => "Deleted. Its history stays in the bucket.",
            "killed" => "Kill requested: the run stops in a moment.",
            "unchanged" => "Nothing to change.",
            "revoked" => "Revoked: every request with that token is refused from now on.",
            "removed" => "Removed.",
            _ => "",
        }
        .to_string();
        self
    }
}

/// A template as an HTML response; a template that fails to render (a bug)
/// is a plain 500.
pub fn render<T: Template>(page: &T) -> Response {
    match page.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "console template failed");
            (
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "the page could not be rendered",
            )
                .into_response()
        }
    }
}

#[derive(Template)]
#[template(path = "console/error.html")]
pub struct ErrorPage {
    pub frame: Frame,
    pub heading: String,
    pub message: String,
}

impl ErrorPage {
    pub fn new(frame: Frame, heading: &str, message: impl Into<String>) -> Self {
        Self {
            frame,
            heading: heading.to_string(),
            message: message.into(),
        }
    }
}

#[derive(Template)]
#[template(path = "console/login.html")]
pub struct LoginPage {
    pub frame: Frame,
    /// The identity provider's sign-in, when there is one.
    pub provider: Option<ProviderButton>,
    pub next: String,
    pub error: String,
    /// The gateway has no token: nobody can sign in.
    pub no_tokens: bool,
}

/// The link that signs in with the identity provider.
#[derive(Debug, Clone)]
pub struct ProviderButton {
    /// What the button calls the provider.
    pub name: String,
    pub link: String,
}

/// An instant as the pages show it: UTC, to the second.
pub fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// An RFC 3339 text as [`when`] shows it (unchanged when it does not parse).
pub fn when_text(text: &str) -> String {
    DateTime::parse_from_rfc3339(text)
        .map(|t| when(t.with_timezone(&Utc)))
        .unwrap_or_else(|_| text.to_string())
}

/// Milliseconds as a short duration: `850 ms`, `12.3 s`, `4 min 05 s`, `2 h 03 min`.
pub fn duration_ms(ms: i64) -> String {
    match ms {
        ms if ms < 1_000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms if ms < 3_600_000 => format!("{} min {:02} s", ms / 60_000, (ms / 1000) % 60),
        ms => format!("{} h {:02} min", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

/// The CSS class of a run status (a fixed set, so no text reaches a class).
pub fn status_class(status: &str) -> &'static str {
    match status {
        "succeeded" => "ok",
        "failed" | "timed_out" | "killed" => "bad",
        "running" | "retrying" => "busy",
        "skipped" => "muted",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_short() {
        assert_eq!(duration_ms(850), "850 ms");
        assert_eq!(duration_ms(12_340), "12.3 s");
        assert_eq!(duration_ms(245_000), "4 min 05 s");
        assert_eq!(duration_ms(7_380_000), "2 h 03 min");
    }

    #[test]
    fn notices_come_from_a_fixed_list() {
        assert_eq!(Frame::default().with_done(Some("paused")).notice, "Paused.");
        assert_eq!(Frame::default().with_done(Some("<script>")).notice, "");
    }
}
