//! The client commands (`jobs`, `runs`, `apply`, `diff`, `export`,
//! `import-crontab`, `completion`): where their requests go, what they print, their exit code.
//! What each does is `jetcron-client`'s; this only wires the command line's
//! connection options to it.
//!
//! Output goes to standard output, errors to standard error as
//! `jetcron: <the API's error>`, and the exit code is 0 (done, or nothing
//! to do), 2 (`apply`/`diff`: changes made or planned) or 1 (an error).
//! No logging: a script reading `-o json` gets JSON only.

use std::io::Write as _;

use clap::CommandFactory as _;
use jetcron_client::api::{Api, HttpApi, NatsApi};
use jetcron_client::commands::{self, ClientArgs};
use jetcron_client::{apply, crontab_import, export, Outcome};
use jetcron_core::nats_doors::inbox_prefix;

use crate::cli::{Cli, Command, CommonArgs};

/// Run a client command; the process's exit code.
pub fn main(common: CommonArgs, command: Command) -> u8 {
    if let Command::Completion { shell } = command {
        // Written whole, so a closed pipe (`| head`) is no panic.
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "jetcron", &mut script);
        let _ = std::io::stdout().lock().write_all(&script);
        return 0;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("jetcron: cannot start the runtime: {e}");
            return 1;
        }
    };
    match runtime.block_on(run(&common, command)) {
        Ok((text, outcome)) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
            outcome.exit_code()
        }
        Err(e) => {
            eprintln!("jetcron: {e:#}");
            1
        }
    }
}

async fn run(common: &CommonArgs, command: Command) -> anyhow::Result<(String, Outcome)> {
    let done = |text| Ok((text, Outcome::NothingToDo));
    match command {
        Command::Jobs { client, command } => {
            let api = connect(common, &client).await?;
            done(commands::jobs::run(&api, command, client.output).await?)
        }
        Command::Runs { client, command } => {
            let api = connect(common, &client).await?;
            done(commands::runs::run(&api, command, client.output).await?)
        }
        Command::Apply { client, args } => {
            let api = connect(common, &client).await?;
            let report = apply::apply(&api, args, client.output).await?;
            Ok((report.text, report.outcome))
        }
        Command::Diff { client, args } => {
            let api = connect(common, &client).await?;
            let report = apply::diff(&api, args, client.output).await?;
            Ok((report.text, report.outcome))
        }
        Command::ImportCrontab { client, args } => {
            let api = connect(common, &client).await?;
            let report = crontab_import::import(&api, args, client.output).await?;
            Ok((report.text, report.outcome))
        }
        Command::Export { client, args } => {
            let api = connect(common, &client).await?;
            done(export::export(&api, args).await?)
        }
        _ => anyhow::bail!("not a client command"),
    }
}

/// The API the client arguments name: HTTP with `--http`, else NATS
/// (through `--door`'s namespace door, replying on its inbox prefix).
async fn connect(common: &CommonArgs, client: &ClientArgs) -> anyhow::Result<Api> {
    if let Some(url) = &client.http {
        return Ok(Api::Http(HttpApi::new(
            url,
            client.token()?,
            client.timeout,
        )?));
    }
    if let Some(namespace) = &client.door {
        jetcron_core::job::validate_namespace("--door", namespace)
            .map_err(|p| anyhow::anyhow!("{p}"))?;
    }
    let inbox = client.door.as_deref().map(inbox_prefix);
    let nats = common.connect_with_inbox("jetcron client", inbox).await?;
    Ok(Api::Nats(NatsApi::new(
        nats,
        client.door.clone(),
        client.timeout,
    )))
}
