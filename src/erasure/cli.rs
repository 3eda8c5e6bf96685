//! `gatehouse workspace erase`, flattened into the `workspace` command.

use crate::{admin_log::Audit, cli::Outcome, db::Db, tenants::cli::TenantArg};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Erase a subject (a member's id or email, or an external subject id) across a workspace
    /// and every copy of it; prints the receipt as JSON.
    Erase {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
        #[arg(long)]
        subject: String,
    },
}

/// Runs `gatehouse workspace erase`.
pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<Outcome> {
    let Command::Erase { t, workspace, subject } = cmd;
    let receipt = super::erase(db, t.resolve(db).await?, audit, &workspace, &subject).await?;
    println!("{}", serde_json::to_string(&receipt)?);
    Ok(Outcome::Ok)
}
