//! `gatehouse token …`: a tenant's access tokens (`gth_…`) from the command line.

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
    /// Create a token; prints its id, then the secret (shown this once only).
    Create {
        #[command(flatten)]
        t: TenantArg,
        #[arg(long)]
        name: String,
    },
    /// One token per line: id, prefix, name, state, last used.
    List {
        #[command(flatten)]
        t: TenantArg,
    },
    Rename {
        #[command(flatten)]
        t: TenantArg,
        id: Uuid,
        name: String,
    },
    Revoke {
        #[command(flatten)]
        t: TenantArg,
        id: Uuid,
    },
}

/// Runs a `gatehouse token` command; `cap` is the configured number of live tokens a tenant
/// may hold.
pub async fn run(db: &Db, audit: &Audit, cap: i32, cmd: Command) -> anyhow::Result<Outcome> {
    match cmd {
        Command::Create { t, name } => {
            let created = super::create(db, t.resolve(db).await?, audit, &name, None, cap).await?;
            println!("{}\n{}", created.token.id, created.secret);
        }
        Command::List { t } => {
            for k in super::list(db, t.resolve(db).await?).await? {
                let (state, used) = (revoked_or_live(k.revoked_at), last_used(k.last_used_at));
                println!("{}\t{}\t{}\t{state}\t{used}", k.id, k.prefix, k.name);
            }
        }
        Command::Rename { t, id, name } => {
            let k = super::rename(db, t.resolve(db).await?, audit, id, &name).await?;
            println!("{}\t{}", k.id, k.name);
        }
        Command::Revoke { t, id } => {
            let k = super::revoke(db, t.resolve(db).await?, audit, id).await?;
            println!("{}\t{}", k.id, revoked_or_live(k.revoked_at));
        }
    }
    Ok(Outcome::Ok)
}
