//! `gatehouse impersonation …`: a tenant's impersonation grants and setting from the command
//! line (the operator's view: list, approve, revoke; the admin-log actor is `cli`).

use clap::Subcommand;
use uuid::Uuid;

use crate::{admin_log::Audit, cli::Outcome, db::Db, tenants::cli::TenantArg};

#[derive(Subcommand)]
pub enum Command {
    /// One grant per line: id, status, staff email, minutes, expires at, reason.
    List {
        #[command(flatten)]
        t: TenantArg,
    },
    /// Approve a pending grant (its clock starts now); a decided one exits 1 (`already_decided`).
    Approve {
        #[command(flatten)]
        t: TenantArg,
        id: Uuid,
    },
    /// Revoke a grant: the staff person's next request is refused on every replica.
    Revoke {
        #[command(flatten)]
        t: TenantArg,
        id: Uuid,
    },
    /// Show, or set with `--approval-required true|false`, whether grants need approval.
    Settings {
        #[command(flatten)]
        t: TenantArg,
        #[arg(long)]
        approval_required: Option<bool>,
    },
}

fn line(g: &super::Grant) -> String {
    let expires = g.expires_at.map_or_else(|| "-".to_owned(), |t| t.to_rfc3339());
    format!("{}\t{}\t{}\t{}\t{expires}\t{}", g.id, g.status, g.staff_email, g.minutes, g.reason)
}

pub async fn run(db: &Db, audit: &Audit, cmd: Command) -> anyhow::Result<Outcome> {
    match cmd {
        Command::List { t } => {
            for g in super::list(db, t.resolve(db).await?).await? {
                println!("{}", line(&g));
            }
        }
        Command::Approve { t, id } => println!("{}", line(&super::approve(db, t.resolve(db).await?, audit, id).await?)),
        Command::Revoke { t, id } => println!("{}", line(&super::revoke(db, t.resolve(db).await?, audit, id).await?)),
        Command::Settings { t, approval_required } => {
            let tenant = t.resolve(db).await?;
            let settings = match approval_required {
                Some(required) => super::set_settings(db, tenant, audit, super::Settings { approval_required: required }).await?,
                None => super::settings(db, tenant).await?,
            };
            println!("approval_required\t{}", settings.approval_required);
        }
    }
    Ok(Outcome::Ok)
}
