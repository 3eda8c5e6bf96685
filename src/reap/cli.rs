//! `gatehouse workspace reap`, flattened into the `workspace` command.

use crate::{admin_log::Audit, cli::Outcome, config::Config, db::Db, tenants::cli::TenantArg};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Reap an archived workspace (terminal: its state is deleted, its slug released); prints
    /// the tombstone as JSON.
    Reap {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
    },
}

/// Runs `gatehouse workspace reap`.
pub async fn run(db: &Db, audit: &Audit, config: &Config, cmd: Command) -> anyhow::Result<Outcome> {
    let Command::Reap { t, workspace } = cmd;
    let tombstone = super::reap(db, &config.copies.snapshot_dir, t.resolve(db).await?, audit, &workspace).await?;
    println!("{}", serde_json::to_string(&tombstone)?);
    Ok(Outcome::Ok)
}
