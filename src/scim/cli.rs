//! `gatehouse scim token …`: a tenant's SCIM tokens (`gsm_…`) from the command line.

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
    /// The tenant's SCIM tokens, for its directory (IdP) to provision people.
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Mint a token; prints its id, then the secret (shown this once only).
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
    Revoke {
        #[command(flatten)]
        t: TenantArg,
        id: Uuid,
    },
}

pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<Outcome> {
    let Command::Token(cmd) = cmd;
    match cmd {
        TokenCommand::Create { t, name } => {
            let created = super::create_token(db, t.resolve(db).await?, audit, &name).await?;
            println!("{}\n{}", created.token.id, created.secret);
        }
        TokenCommand::List { t } => {
            for k in super::list_tokens(db, t.resolve(db).await?).await? {
                let (state, used) = (revoked_or_live(k.revoked_at), last_used(k.last_used_at));
                println!("{}\t{}\t{}\t{state}\t{used}", k.id, k.prefix, k.name);
            }
        }
        TokenCommand::Revoke { t, id } => {
            let k = super::revoke_token(db, t.resolve(db).await?, audit, id).await?;
            println!("{}\t{}", k.id, revoked_or_live(k.revoked_at));
        }
    }
    Ok(Outcome::Ok)
}
