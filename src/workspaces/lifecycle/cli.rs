//! `gatehouse workspace bind | activate | suspend | resume | archive | unarchive`, flattened
//! into the `workspace` command.

use super::Transition;
use crate::{admin_log::Audit, cli::Outcome, db::Db, tenants::cli::TenantArg};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Bind the workspace to an admitted blueprint version, by compare-and-set on the version it
    /// runs; prints the new bound version and revision (exit 1, binding_changed, on a lost race).
    Bind {
        #[command(flatten)]
        t: TenantArg,
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
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
    },
    /// active → suspended (its MCP endpoint answers 403 workspace_suspended).
    Suspend {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
    },
    /// suspended → active.
    Resume {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
    },
    /// active | suspended → archived (its MCP endpoint answers 404).
    Archive {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
    },
    /// archived → active (a restore).
    Unarchive {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
    },
}

/// Runs a lifecycle command of `gatehouse workspace`.
pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<Outcome> {
    let (t, workspace, transition) = match cmd {
        Command::Bind { t, workspace, blueprint, version, expected_version } => {
            let tenant = t.resolve(db).await?;
            let b = super::bind(db, tenant, audit, &workspace, &blueprint, version, expected_version).await?;
            println!("{}\t{}", b.workspace.bound_version, b.workspace.revision);
            return Ok(Outcome::Ok);
        }
        Command::Activate { t, workspace } => (t, workspace, Transition::Activate),
        Command::Suspend { t, workspace } => (t, workspace, Transition::Suspend),
        Command::Resume { t, workspace } => (t, workspace, Transition::Resume),
        Command::Archive { t, workspace } => (t, workspace, Transition::Archive),
        Command::Unarchive { t, workspace } => (t, workspace, Transition::Unarchive),
    };
    let ws = super::transition(db, t.resolve(db).await?, audit, &workspace, transition).await?;
    println!("{}\t{}\t{}", ws.slug, ws.status, ws.revision);
    Ok(Outcome::Ok)
}
