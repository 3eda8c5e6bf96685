//! `gatehouse workspace bind | activate | suspend | resume | archive | unarchive`, flattened
//! into the `workspace` command.

use super::Transition;
use crate::{admin_log::Audit, db::Db, tenants};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Bind the workspace to an admitted blueprint version, by compare-and-set on the version it
    /// runs; prints the new bound version and revision (exit 1, binding_changed, on a lost race).
    Bind {
        #[arg(long)]
        tenant: String,
        workspace: String,
        #[arg(long)]
        blueprint: String,
        #[arg(long)]
        version: i32,
        /// The bound version the caller read (`workspace list` shows it).
        #[arg(long)]
        expected_version: i32,
    },
    /// provisioning → active; prints slug, status, revision.
    Activate {
        #[arg(long)]
        tenant: String,
        workspace: String,
    },
    /// active → suspended (its MCP endpoint answers 403 workspace_suspended).
    Suspend {
        #[arg(long)]
        tenant: String,
        workspace: String,
    },
    /// suspended → active.
    Resume {
        #[arg(long)]
        tenant: String,
        workspace: String,
    },
    /// active | suspended → archived (its MCP endpoint answers 404).
    Archive {
        #[arg(long)]
        tenant: String,
        workspace: String,
    },
    /// archived → active (a restore).
    Unarchive {
        #[arg(long)]
        tenant: String,
        workspace: String,
    },
}

pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<()> {
    let (tenant, workspace, transition) = match cmd {
        Command::Bind { tenant, workspace, blueprint, version, expected_version } => {
            let tenant = tenants::by_slug(db, &tenant).await?.id;
            let b = super::bind(db, tenant, audit, &workspace, &blueprint, version, expected_version).await?;
            println!("{}\t{}", b.workspace.bound_version, b.workspace.revision);
            return Ok(());
        }
        Command::Activate { tenant, workspace } => (tenant, workspace, Transition::Activate),
        Command::Suspend { tenant, workspace } => (tenant, workspace, Transition::Suspend),
        Command::Resume { tenant, workspace } => (tenant, workspace, Transition::Resume),
        Command::Archive { tenant, workspace } => (tenant, workspace, Transition::Archive),
        Command::Unarchive { tenant, workspace } => (tenant, workspace, Transition::Unarchive),
    };
    let tenant = tenants::by_slug(db, &tenant).await?.id;
    let ws = super::transition(db, tenant, audit, &workspace, transition).await?;
    println!("{}\t{}\t{}", ws.slug, ws.status, ws.revision);
    Ok(())
}
