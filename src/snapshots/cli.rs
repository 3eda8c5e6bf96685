//! `gatehouse snapshot export | restore`: snapshot files from the command line.

use crate::{admin_log::Audit, cli::Outcome, config::Config, db::Db, tenants::cli::TenantArg};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Export a workspace to a new file in GATEHOUSE_SNAPSHOT_DIR; prints the file and the move.
    Export {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
    },
    /// Restore a snapshot file into a new workspace; prints slug, id, and subjects restored and unreadable.
    Restore {
        #[command(flatten)]
        t: TenantArg,
        file: String,
        #[arg(long)]
        slug: String,
    },
}

/// Runs a `gatehouse snapshot` command.
pub async fn run(db: &Db, audit: &Audit, config: &Config, cmd: Command) -> anyhow::Result<Outcome> {
    match cmd {
        Command::Export { t, workspace } => {
            let e = super::export(db, config, t.resolve(db).await?, audit, &workspace).await?;
            println!("{}\t{}", e.file, e.move_id);
        }
        Command::Restore { t, file, slug } => {
            let r = super::restore(db, config, t.resolve(db).await?, audit, &file, &slug).await?;
            println!("{}\t{}\t{}\t{}", r.workspace, r.workspace_id, r.subjects_restored, r.subjects_unreadable);
        }
    }
    Ok(Outcome::Ok)
}
