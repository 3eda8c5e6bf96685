//! `gatehouse workspace fork | fork-extend | fork-pin`, flattened into the `workspace` command.

use crate::{admin_log::Audit, cli::Outcome, config::Config, db::Db, tenants::cli::TenantArg};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Fork a workspace into a preview workspace that expires; prints slug, id and move.
    Fork {
        #[command(flatten)]
        t: TenantArg,
        /// The workspace to fork.
        workspace: String,
        #[arg(long)]
        slug: String,
        /// Hours until the fork expires (default 72, at most 720).
        #[arg(long)]
        ttl_hours: Option<i64>,
    },
    /// Extend a fork's life by some hours; prints its expiry and pin.
    ForkExtend {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
        #[arg(long)]
        hours: i64,
    },
    /// Pin a fork (it never expires while pinned), or unpin it with --unpin.
    ForkPin {
        #[command(flatten)]
        t: TenantArg,
        workspace: String,
        #[arg(long)]
        unpin: bool,
    },
}

/// Runs a fork command of `gatehouse workspace`.
pub async fn run(db: &Db, audit: &Audit, config: &Config, cmd: Command) -> anyhow::Result<Outcome> {
    let expiry = match cmd {
        Command::Fork { t, workspace, slug, ttl_hours } => {
            let f = super::fork(db, config, t.resolve(db).await?, audit, &workspace, &slug, ttl_hours).await?;
            println!("{}\t{}\t{}", f.workspace.slug, f.workspace.id.0, f.move_id);
            return Ok(Outcome::Ok);
        }
        Command::ForkExtend { t, workspace, hours } => super::extend(db, t.resolve(db).await?, audit, &workspace, hours).await?,
        Command::ForkPin { t, workspace, unpin } => super::pin(db, t.resolve(db).await?, audit, &workspace, !unpin).await?,
    };
    let pin = if expiry.pinned { "pinned" } else { "unpinned" };
    println!("{}\t{}\t{pin}", expiry.workspace, expiry.expires_at.to_rfc3339());
    Ok(Outcome::Ok)
}
