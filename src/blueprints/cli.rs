//! `gatehouse blueprint …`: the command line's view of the same functions the API calls.

use crate::{
    admin_log::Audit,
    blueprints::{self, Decision},
    cli::Outcome,
    config::Config,
    db::Db,
    tenants::cli::TenantArg,
};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Create a blueprint; prints its slug and id.
    Create {
        #[command(flatten)]
        t: TenantArg,
        slug: String,
        #[arg(long)]
        name: Option<String>,
    },
    /// Add the next version from a JSON configuration document (connectors, classification,
    /// grants, pools); prints its number and digest. It starts pending admission.
    Version {
        #[command(flatten)]
        t: TenantArg,
        slug: String,
        #[arg(long)]
        file: std::path::PathBuf,
        /// Fail with exit 1 (blueprint_changed) unless this is still the latest version (0: none).
        #[arg(long)]
        expected_latest: Option<i32>,
    },
    /// Admit a pending version; prints its number and state.
    Admit {
        #[command(flatten)]
        t: TenantArg,
        slug: String,
        version: i32,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Reject a pending version; prints its number and state.
    Reject {
        #[command(flatten)]
        t: TenantArg,
        slug: String,
        version: i32,
        #[arg(long)]
        reason: Option<String>,
    },
    /// One blueprint per line: slug, latest version (or -), id, name.
    List {
        #[command(flatten)]
        t: TenantArg,
    },
    /// A blueprint's versions, one per line: version, admission, digest, created by.
    Show {
        #[command(flatten)]
        t: TenantArg,
        slug: String,
    },
}

/// Runs a `gatehouse blueprint` command.
pub async fn run(db: &Db, audit: &Audit, config: &Config, cmd: Command) -> anyhow::Result<Outcome> {
    let t = match &cmd {
        Command::Create { t, .. }
        | Command::Version { t, .. }
        | Command::Admit { t, .. }
        | Command::Reject { t, .. }
        | Command::List { t }
        | Command::Show { t, .. } => t,
    };
    let tenant = t.resolve(db).await?;
    match cmd {
        Command::Create { slug, name, .. } => {
            let b = blueprints::create(db, tenant, audit, &slug, name.as_deref()).await?;
            println!("{}\t{}", b.slug, b.id.0);
        }
        Command::Version { slug, file, expected_latest, .. } => {
            let value = crate::cli::json_file("file", &file)?;
            let document = blueprints::parse_document(value, config.vault_keys.as_ref())?;
            let v = blueprints::add_version(db, tenant, audit, &slug, &document, expected_latest).await?;
            println!("{}\t{}", v.version, v.digest);
        }
        Command::Admit { slug, version, reason, .. } => {
            let v = blueprints::decide(db, tenant, audit, &slug, version, Decision::Admit, reason.as_deref()).await?;
            println!("{}\t{}", v.version, v.admission);
        }
        Command::Reject { slug, version, reason, .. } => {
            let v = blueprints::decide(db, tenant, audit, &slug, version, Decision::Reject, reason.as_deref()).await?;
            println!("{}\t{}", v.version, v.admission);
        }
        Command::List { .. } => {
            for b in blueprints::list(db, tenant).await? {
                let latest = b.latest_version.map_or_else(|| "-".to_owned(), |v| v.to_string());
                println!("{}\t{latest}\t{}\t{}", b.slug, b.id.0, b.name);
            }
        }
        Command::Show { slug, .. } => {
            for v in blueprints::show(db, tenant, &slug).await?.versions {
                println!("{}\t{}\t{}\t{}", v.version, v.admission, v.digest, v.created_by);
            }
        }
    }
    Ok(Outcome::Ok)
}
