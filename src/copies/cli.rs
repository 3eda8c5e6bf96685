//! `gatehouse copies …`: the copy ledger from the command line.

use crate::{cli::Outcome, db::Db, tenants::cli::TenantArg, workspaces};

#[derive(clap::Subcommand)]
pub enum Command {
    /// One ledger row per line: move, kind, role, copy, state, lease until, claimant, created at.
    List {
        #[command(flatten)]
        t: TenantArg,
        /// Only the rows of this workspace (as the copied workspace or as a copy).
        #[arg(long)]
        workspace: Option<String>,
    },
}

/// Runs a `gatehouse copies` command.
pub async fn run(db: &Db, cmd: Command) -> anyhow::Result<Outcome> {
    let Command::List { t, workspace } = cmd;
    let tenant = t.resolve(db).await?;
    let workspace = match workspace {
        Some(slug) => Some(workspaces::bound(db, tenant, &slug).await?.workspace.id.0),
        None => None,
    };
    for c in super::list(db, tenant, workspace).await? {
        let owner = c.lease_owner.unwrap_or_else(|| "-".into());
        let (lease, created) = (c.lease_until.to_rfc3339(), c.created_at.to_rfc3339());
        println!("{}\t{}\t{}\t{}\t{}\t{lease}\t{owner}\t{created}", c.move_id, c.kind, c.role, c.copy_ref, c.state);
    }
    Ok(Outcome::Ok)
}
