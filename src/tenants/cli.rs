//! `gatehouse tenant …`, and [`TenantArg`]: the `--tenant SLUG` every tenant-scoped command
//! of the other nouns takes.

use std::{io::Write, os::unix::fs::OpenOptionsExt, path::PathBuf};

use clap::{Args, Subcommand};

use super::{Status, Tenant, TenantId};
use crate::{
    admin_log::Audit,
    cli::Outcome,
    config::{Config, Secret},
    db::Db,
    members,
    tenant_moves::{self, Comparison, TransferKey},
};

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
    /// A moved tenant answers `tenant_moved` here: the CLI writes nothing to a sealed tenant.
    pub async fn resolve(&self, db: &Db) -> crate::error::Result<TenantId> {
        let t = self.load(db).await?;
        if t.status == Status::Moved {
            let base = super::moved_to(db, t.id).await?.unwrap_or_default();
            return Err(super::moved_error(&base, "", false));
        }
        Ok(t.id)
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
    /// Write a new transfer key (32 random bytes, mode 0600) for one export and its import.
    TransferKey {
        #[arg(long)]
        to: PathBuf,
    },
    /// Export everything the tenant owns into a sealed file (format: docs/tenant-export.md).
    Export {
        #[command(flatten)]
        tenant: TenantArg,
        #[arg(long)]
        to: PathBuf,
        /// The transfer key the destination will import with.
        #[arg(long)]
        key_file: PathBuf,
        /// Leave the activity history out.
        #[arg(long)]
        without_activity: bool,
    },
    /// Import an export into this deployment, in one transaction.
    Import {
        #[arg(long)]
        from: PathBuf,
        #[arg(long)]
        key_file: PathBuf,
    },
    /// Compare this deployment's tenant with the destination's by live digests per table.
    Verify {
        #[command(flatten)]
        tenant: TenantArg,
        /// The destination's database URL.
        #[arg(long)]
        against: String,
        #[arg(long)]
        without_activity: bool,
    },
    /// Verify once more and seal the tenant as moved to `--to` (the destination's base URL).
    Seal {
        #[command(flatten)]
        tenant: TenantArg,
        #[arg(long)]
        to: String,
        /// The destination's database URL.
        #[arg(long)]
        against: String,
        #[arg(long)]
        without_activity: bool,
    },
    /// Lift a seal, while the destination has changed nothing since.
    Unseal {
        #[command(flatten)]
        tenant: TenantArg,
        /// The destination's database URL.
        #[arg(long)]
        against: String,
        #[arg(long)]
        without_activity: bool,
    },
}

/// Prints a comparison, one table per line: name, source rows, destination rows, verdict.
fn print_comparison(c: &Comparison) -> Outcome {
    for (name, (s, d)) in &c.tables {
        let verdict = if s.digested == d.digested && s.digest == d.digest { "same" } else { "differs" };
        println!("{name}	{}	{}	{verdict}", s.rows, d.rows);
    }
    if c.equal() {
        println!("verified");
        Outcome::Ok
    } else {
        println!("differs");
        Outcome::Refused
    }
}

async fn destination(url: &str) -> anyhow::Result<Db> {
    Ok(Db::connect(&Secret::new(url.to_owned()), 2).await?)
}

/// Runs a `gatehouse tenant` command.
pub async fn run(db: &Db, audit: &Audit, config: &Config, cmd: Command) -> anyhow::Result<Outcome> {
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
        Command::TransferKey { to } => {
            let key = TransferKey::generate();
            let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&to)?;
            file.write_all(key.encode().as_bytes())?;
            file.sync_all()?;
            println!("{}", to.display());
        }
        Command::Export { tenant, to, key_file, without_activity } => {
            let ring = crate::vault::slots::require(config.vault_keys.as_ref())?;
            let key = TransferKey::read(&key_file)?;
            let s = tenant_moves::export(db, audit, ring, &key, &tenant.tenant, &to, without_activity).await?;
            println!("{}\t{}", s.export_id, s.manifest_digest);
            for (name, sum) in &s.tables {
                println!("{name}\t{}", sum.rows);
            }
        }
        Command::Import { from, key_file } => {
            let ring = crate::vault::slots::require(config.vault_keys.as_ref())?;
            let key = TransferKey::read(&key_file)?;
            let s = tenant_moves::import(db, audit, ring, &key, &from).await?;
            println!("{}\t{}\t{}", s.tenant, s.export_id, s.manifest_digest);
            for (name, sum) in &s.tables {
                println!("{name}\t{}", sum.rows);
            }
        }
        Command::Verify { tenant, against, without_activity } => {
            let dest = destination(&against).await?;
            let c = tenant_moves::verify(db, &dest, audit, &tenant.tenant, without_activity).await;
            dest.pool().close().await;
            return Ok(print_comparison(&c?));
        }
        Command::Seal { tenant, to, against, without_activity } => {
            let dest = destination(&against).await?;
            let c = tenant_moves::seal(db, &dest, audit, &tenant.tenant, &to, without_activity).await;
            dest.pool().close().await;
            print_comparison(&c?);
            println!("sealed\t{to}");
        }
        Command::Unseal { tenant, against, without_activity } => {
            let dest = destination(&against).await?;
            let prior = tenant_moves::unseal(db, &dest, audit, &tenant.tenant, without_activity).await;
            dest.pool().close().await;
            println!("unsealed\t{}", prior?.as_str());
        }
    }
    Ok(Outcome::Ok)
}
