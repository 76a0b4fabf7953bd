//! `jetcron migrate`: move jetcron's streams and buckets to another replica
//! count. (Being written: see docs/operations.md.)

use crate::cli::{CommonArgs, MigrateArgs};

pub async fn run(_common: &CommonArgs, args: MigrateArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "jetcron migrate --replicas {} is not available in this build",
        args.replicas
    )
}
