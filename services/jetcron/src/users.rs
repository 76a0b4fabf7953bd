//! `jetcron users add|passwd|remove|list`: the console's local users, in
//! the bucket `jetcron_users` (docs/console.md, "Local users").
//!
//! A password is never an argument or an environment variable (it would
//! sit in the shell's history and in `ps`): on a terminal it is asked
//! twice without echo, otherwise one line is read from standard input
//! (`jetcron users add alice < password-file`, or a pipe in scripts).

use std::io::{BufRead as _, IsTerminal as _};
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream;
use jetcron_gateway::people::local_users::{name_refusal, LocalUsers, UserRecord};
use jetcron_gateway::people::passwords;

use crate::cli::{CommonArgs, UsersCommand};

pub async fn run(common: &CommonArgs, command: UsersCommand) -> anyhow::Result<()> {
    if let UsersCommand::Add(user) | UsersCommand::Passwd(user) | UsersCommand::Remove(user) =
        &command
    {
        if let Some(why) = name_refusal(&user.name) {
            anyhow::bail!("NAME: {why}");
        }
    }
    let users = connect(common).await?;
    match command {
        UsersCommand::Add(user) => {
            let hash = new_password_hash(&user.name)?;
            let now = chrono::Utc::now();
            users
                .add(&UserRecord {
                    name: user.name.clone(),
                    password: hash,
                    created_at: now,
                    password_changed_at: now,
                })
                .await?;
            println!(
                "user {} added; give them a role with a binding of user:{} (docs/security.md)",
                user.name, user.name
            );
        }
        UsersCommand::Passwd(user) => {
            let hash = new_password_hash(&user.name)?;
            users
                .set_password(&user.name, hash, chrono::Utc::now())
                .await?;
            println!(
                "password of {} changed; their console sessions have ended",
                user.name
            );
        }
        UsersCommand::Remove(user) => match users.remove(&user.name).await? {
            true => println!(
                "user {} removed; their console sessions have ended",
                user.name
            ),
            false => anyhow::bail!("there is no user {:?}", user.name),
        },
        UsersCommand::List => {
            for user in users.list().await? {
                println!(
                    "{}\tadded {}\tpassword changed {}",
                    user.name,
                    user.created_at.format("%Y-%m-%d %H:%M:%S UTC"),
                    user.password_changed_at.format("%Y-%m-%d %H:%M:%S UTC")
                );
            }
        }
    }
    Ok(())
}

/// The users bucket, made when missing.
async fn connect(common: &CommonArgs) -> anyhow::Result<LocalUsers> {
    let client = common.connect_command("jetcron-users").await?;
    let mut js = jetstream::new(client);
    js.set_timeout(Duration::from_secs(10));
    let options = jetcron_io::topology::TopologyOptions {
        replicas: common.replicas,
        ..Default::default()
    };
    let bucket = jetcron_io::topology::ensure_users_bucket(&js, &options)
        .await
        .context("open the users bucket")?;
    Ok(LocalUsers::new(bucket))
}

/// A password for `name`, read and checked, as its Argon2id hash.
fn new_password_hash(name: &str) -> anyhow::Result<String> {
    let password = read_password(name)?;
    if let Some(why) = passwords::refusal(&password) {
        anyhow::bail!("password: {why}");
    }
    passwords::hash(&password)
}

/// The password typed twice on a terminal, or one line of standard input.
fn read_password(name: &str) -> anyhow::Result<String> {
    if !std::io::stdin().is_terminal() {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .context("read the password from standard input")?;
        return Ok(line.trim_end_matches(['\r', '\n']).to_string());
    }
    let first = rpassword::prompt_password(format!("Password for {name}: "))
        .context("read the password")?;
    let again = rpassword::prompt_password("Again: ").context("read the password")?;
    anyhow::ensure!(first == again, "the two passwords differ; nothing changed");
    Ok(first)
}
