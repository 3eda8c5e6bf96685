//! `gatehouse sso …`: a tenant's own OpenID connections and its SSO requirement.

use std::collections::BTreeMap;

use clap::Subcommand;
use uuid::Uuid;

use super::ConnectionInput;
use crate::{admin_log::Audit, cli::Outcome, config::Config, db::Db, tenants::cli::TenantArg};

#[derive(Subcommand)]
pub enum Command {
    /// The tenant's OpenID connections.
    #[command(subcommand)]
    Connection(ConnectionCommand),
    /// Require (`on`) or stop requiring (`off`) sign-in through the tenant's connections.
    Require(RequireArgs),
}

#[derive(Subcommand)]
pub enum ConnectionCommand {
    /// Add a connection; prints its id. The secret is read from the environment variable
    /// named by `--client-secret-env` (never from the command line), or the key from a file.
    Add(Box<AddArgs>),
    /// One connection per line: id, name, issuer, client id, domains, jit.
    List {
        #[command(flatten)]
        t: TenantArg,
    },
    Remove {
        #[command(flatten)]
        t: TenantArg,
        id: Uuid,
    },
}

#[derive(clap::Args)]
pub struct RequireArgs {
    #[command(flatten)]
    t: TenantArg,
    #[arg(value_parser = ["on", "off"])]
    state: String,
}

#[derive(clap::Args)]
pub struct AddArgs {
    #[command(flatten)]
    t: TenantArg,
    #[arg(long)]
    name: String,
    #[arg(long)]
    issuer: String,
    #[arg(long)]
    client_id: String,
    /// The environment variable holding the client secret.
    #[arg(long)]
    client_secret_env: Option<String>,
    /// A PKCS#8 PEM file (private_key_jwt).
    #[arg(long)]
    private_key_file: Option<std::path::PathBuf>,
    /// client_secret_basic (default with a secret), client_secret_post or private_key_jwt.
    #[arg(long)]
    auth_method: Option<String>,
    /// An email domain the connection signs in (repeat for more).
    #[arg(long = "domain", required = true)]
    domains: Vec<String>,
    #[arg(long)]
    groups_claim: Option<String>,
    /// `VALUE=ROLE`: a groups claim value and the role it gives (repeat for more).
    #[arg(long = "role")]
    roles: Vec<String>,
    #[arg(long)]
    default_role: Option<String>,
    /// `create` (first sign-in creates the member) or `invitation` (default).
    #[arg(long)]
    jit: Option<String>,
}

pub async fn run(db: &Db, audit: &Audit, config: &Config, cmd: Command) -> anyhow::Result<Outcome> {
    match cmd {
        Command::Require(RequireArgs { t, state }) => {
            let s = super::set_required(db, t.resolve(db).await?, audit, state == "on", None).await?;
            println!("required\t{}\tenforced\t{}", s.required, s.enforced);
        }
        Command::Connection(ConnectionCommand::Add(args)) => {
            let AddArgs {
                t,
                name,
                issuer,
                client_id,
                client_secret_env,
                private_key_file,
                auth_method,
                domains,
                groups_claim,
                roles,
                default_role,
                jit,
            } = *args;
            let client_secret = match client_secret_env {
                Some(var) => Some(std::env::var(&var).map_err(|_| anyhow::anyhow!("the environment variable {var} is not set"))?),
                None => None,
            };
            let private_key = match private_key_file {
                Some(path) => {
                    Some(std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?)
                }
                None => None,
            };
            let mut role_mapping = BTreeMap::new();
            for r in roles {
                let (value, role) = r.rsplit_once('=').ok_or_else(|| anyhow::anyhow!("--role takes VALUE=ROLE, not `{r}`"))?;
                role_mapping.insert(value.to_owned(), role.to_owned());
            }
            let input = ConnectionInput {
                name,
                issuer,
                client_id,
                auth_method,
                client_secret,
                private_key,
                email_domains: domains,
                groups_claim,
                role_mapping,
                default_role,
                jit,
                version: None,
            };
            let c = super::create(db, config.vault_keys.as_ref(), t.resolve(db).await?, audit, &input).await?;
            println!("{}", c.id);
        }
        Command::Connection(ConnectionCommand::List { t }) => {
            for c in super::list(db, t.resolve(db).await?).await? {
                let domains = c.email_domains.join(",");
                println!("{}\t{}\t{}\t{}\t{domains}\t{}", c.id, c.name, c.issuer, c.client_id, c.jit.as_str());
            }
        }
        Command::Connection(ConnectionCommand::Remove { t, id }) => {
            super::delete(db, t.resolve(db).await?, audit, id).await?;
            println!("{id}\tremoved");
        }
    }
    Ok(Outcome::Ok)
}
