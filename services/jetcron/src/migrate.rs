//! `jetcron migrate --replicas N`: move jetcron's streams and buckets to
//! another replica count on the cluster they live on (R1 to R3 when a
//! deployment started with the default `JETCRON_REPLICAS=1` on a cluster).
//!
//! JetStream does the work: a stream update with a new `num_replicas`
//! places the new replicas, copies every message to them and scales the
//! stream's consumers along (their positions and pending acks kept), online.
//! So the jobs with their history, the ticker's progress, undelivered due
//! events and the consumers' positions all stay; running services go on.
//! This command only asks for it asset by asset, waits until each one's new
//! replicas are current, and says what it did. Copying a standalone
//! server's streams into a new cluster (`--from`) is another matter: see
//! docs/operations.md, "From one node to three".

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream;
use jetcron_io::topology::{self, is_not_found};

use crate::cli::{CommonArgs, MigrateArgs};

/// How long one asset may take to have its new replicas current.
const CURRENT_WAIT: Duration = Duration::from_secs(120);

pub async fn run(common: &CommonArgs, args: MigrateArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=5).contains(&args.replicas),
        "--replicas {}: JetStream keeps 1 to 5 replicas",
        args.replicas
    );
    if let Some(from) = &args.from {
        anyhow::bail!(
            "--from {from}: copying a standalone server's streams into another cluster is not \
             done by jetcron migrate yet; docs/operations.md (\"From one node to three\") \
             gives the steps"
        );
    }
    let client = common.connect_command("jetcron-migrate").await?;
    let mut js = jetstream::new(client);
    js.set_timeout(Duration::from_secs(10));
    let mut changed = 0;
    for name in topology::stream_names() {
        changed += u32::from(migrate_stream(&js, &name, args.replicas, args.dry_run).await?);
    }
    match (changed, args.dry_run) {
        (0, _) => println!("nothing to change: every stream is R{}", args.replicas),
        (n, true) => println!("{n} streams would change (dry run: nothing changed)"),
        (n, false) => println!("{n} streams now R{}", args.replicas),
    }
    Ok(())
}

/// Move one stream to `replicas`; whether it had another count.
async fn migrate_stream(
    js: &jetstream::Context,
    name: &str,
    replicas: usize,
    dry_run: bool,
) -> anyhow::Result<bool> {
    let mut stream = match js.get_stream(name).await {
        Ok(stream) => stream,
        Err(e) if is_not_found(&e) => {
            println!("{name}: not there (the services create it with --replicas {replicas})");
            return Ok(false);
        }
        Err(e) => return Err(anyhow::Error::from(e).context(format!("read stream {name}"))),
    };
    let info = stream
        .info()
        .await
        .with_context(|| format!("read stream {name}"))?
        .clone();
    let current = info.config.num_replicas;
    if current == replicas {
        println!("{name}: R{current} already");
        return Ok(false);
    }
    println!(
        "{name}: R{current} -> R{replicas} ({} messages){}",
        info.state.messages,
        if dry_run { " (dry run)" } else { "" }
    );
    if dry_run {
        return Ok(true);
    }
    let mut config = info.config.clone();
    config.num_replicas = replicas;
    js.update_stream(&config).await.with_context(|| {
        format!(
            "update {name} to R{replicas} (does the cluster have {replicas} JetStream servers?)"
        )
    })?;
    wait_current(&mut stream, name, replicas).await?;
    println!("{name}: R{replicas}, every replica current");
    Ok(true)
}

/// Wait until `stream` has `replicas` members, all current.
async fn wait_current(
    stream: &mut jetstream::stream::Stream,
    name: &str,
    replicas: usize,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + CURRENT_WAIT;
    loop {
        if let Ok(info) = stream.info().await {
            let cluster = info.cluster.as_ref();
            let peers = cluster.map(|c| c.replicas.len() + 1).unwrap_or(1);
            let current =
                cluster.is_some_and(|c| c.leader.is_some() && c.replicas.iter().all(|r| r.current));
            if peers == replicas && (replicas == 1 || current) {
                return Ok(());
            }
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{name}: the new replicas are not current after {CURRENT_WAIT:?}; \
             JetStream goes on placing them (jetcron migrate may be run again)"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
