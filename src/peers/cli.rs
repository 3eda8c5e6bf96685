//! `gatehouse workspace peer bind|unbind|list`: the trusted operator's view of a workspace's
//! peer connectors (the same functions as the API, audited as the CLI).

use crate::{admin_log::Audit, db::Db};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Bind a peer connector to a workspace of the same tenant (replaces an earlier or
    /// invalidated binding).
    Bind {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        workspace: String,
        /// The peer connector's id.
        #[arg(long)]
        connector: String,
        /// The target workspace's slug.
        #[arg(long)]
        target: String,
    },
    /// Remove a binding: the connector resolves by its blueprint again.
    Unbind {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        workspace: String,
        #[arg(long)]
        connector: String,
    },
    /// One peer connector per line: connector, blueprint, resolution (bound, resolved,
    /// bound_unavailable, not_installed, ambiguous), target slug or `-`.
    List {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        workspace: String,
    },
}

/// Runs a `gatehouse workspace peer` command.
pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<()> {
    let slug = match &cmd {
        Command::Bind { tenant, .. } | Command::Unbind { tenant, .. } | Command::List { tenant, .. } => tenant,
    };
    let tenant = crate::tenants::by_slug(db, slug).await?.id;
    match cmd {
        Command::Bind { workspace, connector, target, .. } => {
            let b = super::bind(db, tenant, audit, &workspace, &connector, &target).await?;
            println!("{}\t{}\t{}", b.connector, target, b.target_id);
        }
        Command::Unbind { workspace, connector, .. } => super::unbind(db, tenant, audit, &workspace, &connector).await?,
        Command::List { workspace, .. } => {
            for p in super::list(db, tenant, &workspace).await? {
                println!("{}\t{}\t{}\t{}", p.connector, p.blueprint, p.resolution, p.target.as_deref().unwrap_or("-"));
            }
        }
    }
    Ok(())
}
