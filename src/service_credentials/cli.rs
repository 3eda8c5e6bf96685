//! `gatehouse service-credential …`: a tenant's service credentials (`gsc_…` + secret) from
//! the command line.

use clap::Subcommand;
use uuid::Uuid;

use crate::{
    admin_log::Audit,
    cli::{Outcome, last_used, revoked_or_live},
    db::Db,
    tenants::cli::TenantArg,
};

#[derive(Subcommand)]
pub enum Command {
    /// Create a credential; prints its id, client id, then the secret (shown this once only).
    Create {
        #[command(flatten)]
        t: TenantArg,
        #[arg(long)]
        name: String,
    },
    /// One credential per line: id, client id, name, state, last used.
    List {
        #[command(flatten)]
        t: TenantArg,
    },
    Revoke {
        #[command(flatten)]
        t: TenantArg,
        id: Uuid,
    },
}

/// Runs a `gatehouse service-credential` command.
pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<Outcome> {
    match cmd {
        Command::Create { t, name } => {
            let created = super::create(db, t.resolve(db).await?, audit, &name).await?;
            println!("{}\n{}\n{}", created.credential.id, created.credential.client_id, created.client_secret);
        }
        Command::List { t } => {
            for c in super::list(db, t.resolve(db).await?).await? {
                let (state, used) = (revoked_or_live(c.revoked_at), last_used(c.last_used_at));
                println!("{}\t{}\t{}\t{state}\t{used}", c.id, c.client_id, c.name);
            }
        }
        Command::Revoke { t, id } => {
            let c = super::revoke(db, t.resolve(db).await?, audit, id).await?;
            println!("{}\t{}", c.id, revoked_or_live(c.revoked_at));
        }
    }
    Ok(Outcome::Ok)
}
