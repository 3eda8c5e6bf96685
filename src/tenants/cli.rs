//! `gatehouse tenant …`, and [`TenantArg`]: the `--tenant SLUG` every tenant-scoped command
//! of the other nouns takes.

use clap::{Args, Subcommand};

use super::{Status, Tenant, TenantId};
use crate::{admin_log::Audit, cli::Outcome, db::Db, members};

/// The `--tenant` flag: a tenant's slug, resolved once per command.
// Without `about = None`, a command without a doc comment of its own that flattens this
// struct would show the line above as its help.
#[derive(Args, Clone, Debug)]
#[command(about = None, long_about = None)]
pub struct TenantArg {
    /// The tenant's slug.
    #[arg(long)]
    pub tenant: String,
}

impl TenantArg {
    /// The tenant's id (`not_found` when no tenant has the slug).
    pub async fn resolve(&self, db: &Db) -> crate::error::Result<TenantId> {
        Ok(self.load(db).await?.id)
    }

    /// The whole tenant row, for commands that also need its slug or status.
    pub async fn load(&self, db: &Db) -> crate::error::Result<Tenant> {
        super::by_slug(db, &self.tenant).await
    }
}

#[derive(Subcommand)]
pub enum Command {
    /// Create a tenant.
    Create {
        slug: String,
        #[arg(long)]
        name: String,
        /// Invite this address as the tenant's first owner (accepted at their first sign-in).
        #[arg(long)]
        owner_email: Option<String>,
    },
    /// List tenants, one per line: slug, status, id, name.
    List,
    /// Suspend a tenant.
    Suspend { slug: String },
    /// Re-activate a suspended tenant.
    Activate { slug: String },
    /// Override what a role grants in this tenant: allow, deny, or default (remove the override).
    Permission {
        slug: String,
        #[arg(long)]
        role: String,
        #[arg(long)]
        permission: String,
        #[arg(value_parser = ["allow", "deny", "default"])]
        setting: String,
    },
}

/// Runs a `gatehouse tenant` command.
pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<Outcome> {
    match cmd {
        Command::Create { slug, name, owner_email } => {
            let t = super::create(db, audit, &slug, &name).await?;
            if let Some(email) = owner_email {
                members::invite(db, t.id, audit, &email, members::Role::Owner).await?;
            }
            println!("{}\t{}", t.slug, t.id.0);
        }
        Command::List => {
            for t in super::list(db).await? {
                println!("{}\t{}\t{}\t{}", t.slug, t.status.as_str(), t.id.0, t.name);
            }
        }
        Command::Suspend { slug } => {
            let t = super::set_status(db, audit, &slug, Status::Suspended).await?;
            println!("{}\t{}", t.slug, t.status.as_str());
        }
        Command::Activate { slug } => {
            let t = super::set_status(db, audit, &slug, Status::Active).await?;
            println!("{}\t{}", t.slug, t.status.as_str());
        }
        Command::Permission { slug, role, permission, setting } => {
            let tenant = TenantArg { tenant: slug }.resolve(db).await?;
            let allowed = match setting.as_str() {
                "allow" => Some(true),
                "deny" => Some(false),
                _ => None,
            };
            let (role, permission) = (members::Role::parse(&role)?, members::Permission::parse(&permission)?);
            members::set_override(db, tenant, audit, role, permission, allowed).await?;
            println!("{}\t{}\t{}", role.as_str(), permission.as_str(), setting);
        }
    }
    Ok(Outcome::Ok)
}
