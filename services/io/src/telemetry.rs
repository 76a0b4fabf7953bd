//! `tracing` set up the same way in every process: level from `RUST_LOG`
//! (default `info`, with the NATS client's connection chatter at `warn`),
//! text for people or JSON for log pipelines, always on standard error so
//! standard output stays for command results.

use tracing_subscriber::{fmt, prelude::*, EnvFilter};

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("log format must be text or json, got {other:?}")),
        }
    }
}

/// Install the global subscriber. Safe to call twice (the second call is a no-op).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,async_nats=warn"));
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match format {
        LogFormat::Text => registry
            .with(fmt::layer().with_target(false).with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
}
