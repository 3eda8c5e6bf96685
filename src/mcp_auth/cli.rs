//! `gatehouse mcp-auth …`: the trusted operator's view of a tenant's MCP clients and grants.

use uuid::Uuid;

use super::grants;
use crate::{admin_log::Audit, cli::Outcome, db::Db, tenants::cli::TenantArg};

#[derive(clap::Subcommand)]
pub enum Command {
    /// List the tenant's MCP clients (one JSON object per line).
    Clients {
        #[command(flatten)]
        t: TenantArg,
    },
    /// List the tenant's grants (authorized clients per member; one JSON object per line).
    Grants {
        #[command(flatten)]
        t: TenantArg,
    },
    /// Revoke a client: its tokens are refused on the next request.
    RevokeClient {
        #[command(flatten)]
        t: TenantArg,
        id: Uuid,
    },
    /// Revoke one grant (a member's authorization of a client) and all its tokens.
    RevokeGrant {
        #[command(flatten)]
        t: TenantArg,
        id: Uuid,
    },
}

/// Runs a `gatehouse mcp-auth` command.
pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<Outcome> {
    let (Command::Clients { t } | Command::Grants { t } | Command::RevokeClient { t, .. } | Command::RevokeGrant { t, .. }) =
        &cmd;
    let tenant = t.resolve(db).await?;
    match cmd {
        Command::Clients { .. } => {
            for c in grants::clients(db, tenant).await? {
                println!("{}", serde_json::to_string(&c)?);
            }
        }
        Command::Grants { .. } => {
            for g in grants::grants(db, tenant, None).await? {
                println!("{}", serde_json::to_string(&g)?);
            }
        }
        Command::RevokeClient { id, .. } => {
            grants::revoke_client(db, tenant, audit, id).await?;
            println!("{id}\trevoked");
        }
        Command::RevokeGrant { id, .. } => {
            grants::revoke_grant(db, tenant, audit, id, None).await?;
            println!("{id}\trevoked");
        }
    }
    Ok(Outcome::Ok)
}
