//! `gatehouse workspace peer bind|unbind|list`: the trusted operator's view of a workspace's
//! peer connectors (the same functions as the API, audited as the CLI).

use crate::{admin_log::Audit, cli::Outcome, db::Db, workspaces::cli::WorkspaceArg};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Bind a peer connector to a workspace of the same tenant (replaces an earlier or
    /// invalidated binding).
    Bind {
        #[command(flatten)]
        w: WorkspaceArg,
        /// The peer connector's id.
        #[arg(long)]
        connector: String,
        /// The target workspace's slug.
        #[arg(long)]
        target: String,
    },
    /// Remove a binding: the connector resolves by its blueprint again.
    Unbind {
        #[command(flatten)]
        w: WorkspaceArg,
        #[arg(long)]
        connector: String,
    },
    /// One peer connector per line: connector, blueprint, resolution (bound, resolved,
    /// bound_unavailable, not_installed, ambiguous), target slug or `-`.
    List {
        #[command(flatten)]
        w: WorkspaceArg,
    },
}

/// Runs a `gatehouse workspace peer` command.
pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<Outcome> {
    let (Command::Bind { w, .. } | Command::Unbind { w, .. } | Command::List { w }) = &cmd;
    let tenant = w.t.resolve(db).await?;
    match cmd {
        Command::Bind { w, connector, target } => {
            let b = super::bind(db, tenant, audit, &w.workspace, &connector, &target).await?;
            println!("{}\t{}\t{}", b.connector, target, b.target_id);
        }
        Command::Unbind { w, connector } => super::unbind(db, tenant, audit, &w.workspace, &connector).await?,
        Command::List { w } => {
            for p in super::list(db, tenant, &w.workspace).await? {
                println!("{}\t{}\t{}\t{}", p.connector, p.blueprint, p.resolution, p.target.as_deref().unwrap_or("-"));
            }
        }
    }
    Ok(Outcome::Ok)
}
