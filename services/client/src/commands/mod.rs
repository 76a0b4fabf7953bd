//! `jetcron jobs …` and `jetcron runs …`: each subcommand builds one API
//! request, and prints the answer as a table (or as the API's JSON with
//! `-o json`). A refusal is the API's own error ([`crate::api::Refusal`]).
//!
//! [`ClientArgs`] say where requests go: the NATS API by default (the
//! connection options are the binary's global `--nats-*` ones), through a
//! namespace's door with `--door`, or the HTTP API with `--http`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::output::Format;

pub mod jobs;
pub mod runs;

/// Where client commands send their requests, and how they print.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Use the HTTP API at this URL (e.g. `http://127.0.0.1:8080`) instead
    /// of NATS.
    #[arg(long, env = "JETCRON_HTTP_URL", global = true)]
    pub http: Option<String>,
    /// Bearer token for the HTTP API (writes; reads with --protect-reads).
    #[arg(
        long,
        env = "JETCRON_TOKEN",
        global = true,
        hide_env_values = true,
        conflicts_with = "token_file"
    )]
    pub token: Option<String>,
    /// File holding the bearer token (its first line).
    #[arg(long, env = "JETCRON_TOKEN_FILE", global = true)]
    pub token_file: Option<PathBuf>,
    /// Send NATS requests through this namespace's door
    /// (`jetcron.api.ns.<namespace>.…`), as a team's NATS user must.
    #[arg(long, env = "JETCRON_DOOR", global = true)]
    pub door: Option<String>,
    /// How long to wait for each answer.
    #[arg(long, default_value = "10s", value_parser = positive_duration, global = true)]
    pub timeout: Duration,
    /// `table` for people, `json` for scripts (the API's answer as is).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table, global = true)]
    pub output: Format,
}

impl ClientArgs {
    /// The HTTP token: `--token`, or the first line of `--token-file`.
    pub fn token(&self) -> anyhow::Result<Option<String>> {
        use anyhow::Context as _;
        match (&self.token, &self.token_file) {
            (Some(token), _) => Ok(Some(token.clone())),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("read --token-file {}", path.display()))?;
                let token = text.lines().next().unwrap_or_default().trim().to_string();
                anyhow::ensure!(
                    !token.is_empty(),
                    "--token-file {} is empty",
                    path.display()
                );
                Ok(Some(token))
            }
            (None, None) => Ok(None),
        }
    }
}

/// A duration longer than zero (`10s`, `500ms`): a clap value parser, for
/// the binary's service flags too.
pub fn positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(parsed) if parsed.is_zero() => Err("must be longer than 0s".into()),
        Ok(parsed) => Ok(parsed),
        Err(e) => Err(e.to_string()),
    }
}

/// `key=value` of a `--label`.
pub fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{text:?} is not key=value")),
    }
}
